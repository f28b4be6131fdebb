package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-outbox/ferry/outbox"
)

// Metrics are the counters Ferry's components increment. A nil *Metrics is
// valid and counts nothing, so components work without metrics.
type Metrics struct {
	quarantined *prometheus.CounterVec
	repairs     *prometheus.CounterVec
	relay       *Relay

	effectOutcomes *prometheus.CounterVec
	paymentLookups *prometheus.CounterVec
	emailAmbiguous prometheus.Counter
	emailResent    prometheus.Counter
	emailNotResent prometheus.Counter
}

// New creates Ferry's counters and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_events_quarantined_total",
			Help: "Events whose publish retries ran out or failed permanently, by event type and error class.",
		}, []string{"event_type", "error_class"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_repairs_total",
			Help: "Repairs and replays applied (audited), by action.",
		}, []string{"action"}),
		effectOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_effect_outcomes_total",
			Help: "Answers to effect requests and settlements of unknown outcomes, by effect kind (charge, refund, email) and outcome: " +
				"succeeded or sent; failed as declined, invalid, key_mismatch or rejected; unknown or ambiguous; " +
				"reconciled (an unknown outcome settled by a payment lookup or an operator's e-mail resolution); " +
				"not_sent, in_progress, rate_limited and unauthorized are retried attempts.",
		}, []string{"kind", "outcome"}),
		paymentLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_effect_payment_lookups_total",
			Help: "Lookups of payment idempotency keys to reconcile unknown outcomes, by result (found, not_found, in_progress, error).",
		}, []string{"result"}),
		emailAmbiguous: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_effect_email_ambiguous_total",
			Help: "SMTP transactions whose outcome was unknown (connection lost after the final '.', or a worker died mid-send): each a possible duplicate.",
		}),
		emailResent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_effect_email_resent_total",
			Help: "E-mails sent again, with the same Message-ID, after an ambiguous transaction.",
		}),
		emailNotResent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_effect_email_not_resent_total",
			Help: "Send attempts that found the e-mail already sent in the ledger and sent nothing.",
		}),
	}
	for _, c := range []prometheus.Collector{m.quarantined, m.repairs, m.effectOutcomes, m.paymentLookups, m.emailAmbiguous, m.emailResent, m.emailNotResent} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metric: %w", err)
		}
	}
	var err error
	if m.relay, err = NewRelay(reg); err != nil {
		return nil, err
	}
	m.relay.quarantined = m.quarantined
	return m, nil
}

// Relay is the poller's and the publish activity's part; nil when m is.
func (m *Metrics) Relay() *Relay {
	if m == nil {
		return nil
	}
	return m.relay
}

// Quarantined counts one quarantined event.
func (m *Metrics) Quarantined(eventType, errorClass string) {
	if m != nil {
		m.quarantined.WithLabelValues(eventType, errorClass).Inc()
	}
}

// Repaired counts one applied repair or replay.
func (m *Metrics) Repaired(action string) {
	if m != nil {
		m.repairs.WithLabelValues(action).Inc()
	}
}

// EffectOutcome counts one answer to an effect request.
func (m *Metrics) EffectOutcome(kind, outcome string) {
	if m != nil {
		m.effectOutcomes.WithLabelValues(kind, outcome).Inc()
	}
}

// EffectReconciled counts one effect of kind whose unknown outcome was
// settled: outcome "reconciled" of ferry_effect_outcomes_total.
func (m *Metrics) EffectReconciled(kind string) {
	m.EffectOutcome(kind, "reconciled")
}

// PaymentLookup counts one reconciliation lookup.
func (m *Metrics) PaymentLookup(result string) {
	if m != nil {
		m.paymentLookups.WithLabelValues(result).Inc()
	}
}

// EmailAmbiguous counts one SMTP transaction with an unknown outcome.
func (m *Metrics) EmailAmbiguous() {
	if m != nil {
		m.emailAmbiguous.Inc()
	}
}

// EmailResent counts one e-mail sent again after an ambiguous transaction.
func (m *Metrics) EmailResent() {
	if m != nil {
		m.emailResent.Inc()
	}
}

// EmailNotResent counts one attempt that the sent-ledger stopped.
func (m *Metrics) EmailNotResent() {
	if m != nil {
		m.emailNotResent.Inc()
	}
}

// outboxCollector reads the outbox's undelivered rows at scrape time, so the
// figures are right whichever Ferry process is scraped.
type outboxCollector struct {
	pool    *pgxpool.Pool
	events  *prometheus.Desc
	age     *prometheus.Desc
	errDesc *prometheus.Desc
	size    *prometheus.Desc
}

// NewOutboxCollector returns a collector of
// ferry_outbox_events{aggregate_type,status} and
// ferry_outbox_oldest_age_seconds{aggregate_type,status} over rows that are
// not yet delivered (pending, dispatched, quarantined; skipped rows were
// given up on purpose and are not a backlog).
func NewOutboxCollector(pool *pgxpool.Pool) prometheus.Collector {
	labels := []string{"aggregate_type", "status"}
	return &outboxCollector{
		pool:    pool,
		events:  prometheus.NewDesc("ferry_outbox_events", "Outbox rows not yet delivered (pending, dispatched, quarantined), by aggregate type and status.", labels, nil),
		age:     prometheus.NewDesc("ferry_outbox_oldest_age_seconds", "Age of the oldest row not yet delivered, by aggregate type and status.", labels, nil),
		errDesc: prometheus.NewDesc("ferry_outbox_scrape_error", "1 when reading the outbox for this scrape failed.", nil, nil),
		size:    prometheus.NewDesc("ferry_outbox_table_bytes", "Size of outbox_events with its indexes and TOAST (retention keeps it bounded).", nil, nil),
	}
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.age
	ch <- c.errDesc
	ch <- c.size
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	backlog, err := outbox.ReadBacklog(ctx, c.pool)
	for _, b := range backlog {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(b.Count), b.AggregateType, b.Status)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, b.OldestAge.Seconds(), b.AggregateType, b.Status)
	}
	var size int64
	if err == nil {
		size, err = outbox.TableBytes(ctx, c.pool)
	}
	if err != nil {
		failed = 1
	} else {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(size))
	}
	ch <- prometheus.MustNewConstMetric(c.errDesc, prometheus.GaugeValue, failed)
}

// Server serves /metrics.
type Server struct {
	addr string
	reg  *prometheus.Registry

	mu  sync.Mutex
	srv *http.Server
	ln  net.Listener
}

// NewRegistry returns a registry with Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// NewServer serves reg on addr (host:port; port 0 picks one).
func NewServer(addr string, reg *prometheus.Registry) *Server {
	return &Server{addr: addr, reg: reg}
}

// Start listens and serves in the background.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", s.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.mu.Lock()
	s.ln = ln
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	srv := s.srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// Addr is the address it listens on, once started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return s.addr
	}
	return s.ln.Addr().String()
}

// Stop stops serving. Safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}
