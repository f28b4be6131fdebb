package bench

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferry-outbox/ferry/broker"
)

// Receipt is one message as the counting consumer saw it.
type Receipt struct {
	ID            string
	AggregateType string
	AggregateID   string
	Version       int64
	At            time.Time
}

// Tally checks the deliveries of one run: every expected event at least
// once, per aggregate in version order. It is safe for concurrent use.
type Tally struct {
	mu      sync.Mutex
	aggType string
	first   map[string]time.Time // event id → first receipt
	// high is, per aggregate, the highest version received so far.
	high       map[string]int64
	duplicates int
	outOfOrder int
	stray      int
	last       time.Time
}

// NewTally counts the messages of aggregate type aggType; others are
// counted as stray (late duplicates of an earlier run).
func NewTally(aggType string) *Tally {
	return &Tally{aggType: aggType, first: map[string]time.Time{}, high: map[string]int64{}}
}

// Add records a receipt. A first receipt whose version is not the next of
// its aggregate counts as out of order; versions start at 1 on every
// aggregate of a run.
func (t *Tally) Add(r Receipt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.AggregateType != t.aggType {
		t.stray++
		return
	}
	if _, seen := t.first[r.ID]; seen {
		t.duplicates++
		return
	}
	t.first[r.ID] = r.At
	if r.At.After(t.last) {
		t.last = r.At
	}
	if h := t.high[r.AggregateID]; r.Version != h+1 {
		t.outOfOrder++
	}
	t.high[r.AggregateID] = max(t.high[r.AggregateID], r.Version)
}

// Received is the number of distinct events received so far.
func (t *Tally) Received() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.first)
}

// Verdict is what a Tally found against the events that were committed.
type Verdict struct {
	// Lost: committed, never received. Anything but 0 fails the run.
	Lost int `json:"lost"`
	// Duplicates: receipts beyond the first of an event (at-least-once).
	Duplicates int `json:"duplicates"`
	// OutOfOrder: first receipts whose version was not the next one of
	// their aggregate. Anything but 0 fails the run.
	OutOfOrder int `json:"out_of_order"`
	// Unexpected: received with this run's aggregate type, never committed.
	Unexpected int `json:"unexpected"`
	// Stray: messages of other runs (late duplicates), ignored.
	Stray int `json:"stray"`
}

// OK says whether the run delivered everything, in order, and nothing else.
func (v Verdict) OK() bool { return v.Lost == 0 && v.OutOfOrder == 0 && v.Unexpected == 0 }

// Check compares the receipts with the committed events (id → commit time)
// and returns the verdict, the commit → first receipt latencies and the
// last receipt's time.
func (t *Tally) Check(committed map[string]time.Time) (Verdict, []time.Duration, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := Verdict{Duplicates: t.duplicates, OutOfOrder: t.outOfOrder, Stray: t.stray}
	lat := make([]time.Duration, 0, len(committed))
	for id, at := range committed {
		got, ok := t.first[id]
		if !ok {
			v.Lost++
			continue
		}
		// Clocks are the same; a receipt can still come before the
		// producer noted its commit (the relay was faster than the
		// producer's next line). That is 0, not negative.
		lat = append(lat, max(0, got.Sub(at)))
	}
	for id := range t.first {
		if _, ok := committed[id]; !ok {
			v.Unexpected++
		}
	}
	return v, lat, t.last
}

// WarmUp is the start of a steady-rate run that Latency after warm-up
// leaves out: the first event of each of its 100 aggregates starts a
// workflow, all within the first second.
const WarmUp = 10 * time.Second

// latenciesAfter is Check's latencies of the events committed at or after
// from.
func (t *Tally) latenciesAfter(committed map[string]time.Time, from time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lat []time.Duration
	for id, at := range committed {
		if got, ok := t.first[id]; ok && !at.Before(from) {
			lat = append(lat, max(0, got.Sub(at)))
		}
	}
	return lat
}

// writeTimeline writes one line per received event, in commit order:
// milliseconds from the first commit to its commit, its latency (commit →
// receipt) and its id. It shows when in a run the slow events were.
func (t *Tally) writeTimeline(w io.Writer, committed map[string]time.Time) error {
	t.mu.Lock()
	type point struct {
		id      string
		at, got time.Time
	}
	points := make([]point, 0, len(committed))
	for id, at := range committed {
		if got, ok := t.first[id]; ok {
			points = append(points, point{id, at, got})
		}
	}
	t.mu.Unlock()
	if len(points) == 0 {
		return nil
	}
	slices.SortFunc(points, func(a, b point) int { return a.at.Compare(b.at) })
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "commit_ms,latency_ms,event_id")
	for _, p := range points {
		fmt.Fprintf(bw, "%.1f,%.1f,%s\n", float64(p.at.Sub(points[0].at).Microseconds())/1000,
			float64(max(0, p.got.Sub(p.at)).Microseconds())/1000, p.id)
	}
	return bw.Flush()
}

// Consumer is the counting consumer: its own exclusive queue bound to
// every routing key of the bench exchange, auto-ack, each message handed to
// the current Tally with its receipt time.
type Consumer struct {
	conn  *amqp.Connection
	queue string
	done  chan struct{}

	mu    sync.Mutex
	tally *Tally
	err   error
}

// consumerBinding binds the consumer's queue to the routing keys of the
// producer's events, <aggregate type>.bench (delivery.DefaultRoutingKey;
// the bench's aggregate types have no dot).
const consumerBinding = "*." + benchEventType

// StartConsumer declares the exchange (as Ferry does) and the consumer's
// queue, and starts consuming.
//
// The queue takes the routing keys of the producer's events alone
// (consumerBinding), so the handoff probe's event type is unroutable: no
// queue of the bench's exchange takes it.
func StartConsumer(amqpURL, exchange, queue string) (*Consumer, error) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("consumer: dial RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	}
	if err == nil {
		// Durable, so persistent messages reach the disk before their
		// confirm, as with a real consumer's queue; exclusive, so it goes
		// with the connection.
		_, err = ch.QueueDeclare(queue, true, false, true, false, nil)
	}
	if err == nil {
		err = ch.QueueBind(queue, consumerBinding, exchange, false, nil)
	}
	if err == nil {
		err = ch.Qos(2000, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(queue, "ferry-bench", true, true, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consumer: set up queue %s on exchange %s: %w", queue, exchange, err)
	}
	c := &Consumer{conn: conn, queue: queue, done: make(chan struct{})}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		defer close(c.done)
		for d := range deliveries {
			c.add(d)
		}
		if err := <-closed; err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
		}
	}()
	return c, nil
}

func (c *Consumer) add(d amqp.Delivery) {
	at := time.Now()
	c.mu.Lock()
	t := c.tally
	c.mu.Unlock()
	if t == nil {
		return
	}
	aggType, _ := d.Headers[broker.HeaderAggregateType].(string)
	aggID, _ := d.Headers[broker.HeaderAggregateID].(string)
	t.Add(Receipt{ID: d.MessageId, AggregateType: aggType, AggregateID: aggID, Version: headerInt(d.Headers[broker.HeaderAggregateVersion]), At: at})
}

// Count directs the following messages to t.
func (c *Consumer) Count(t *Tally) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tally = t
}

// Err is the reason the consumer stopped, nil while it runs.
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close stops consuming; the queue goes with the connection.
func (c *Consumer) Close() {
	_ = c.conn.Close()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
	}
}

// headerInt reads an integer header whichever AMQP integer type carried it.
func headerInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case int:
		return int64(n)
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case string:
		x, _ := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		return x
	}
	return 0
}
