package app

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/poller"
)

// Config is everything a Ferry process needs. The CLI fills it from flags
// and FERRY_* environment variables (see README, Configuration).
type Config struct {
	// PostgresURL; default postgres://postgres@127.0.0.1:5432/postgres.
	PostgresURL string
	// AMQPURL; default amqp://guest:guest@127.0.0.1:5672/.
	AMQPURL string
	// TemporalAddress host:port of the frontend; default 127.0.0.1:7233.
	TemporalAddress string
	// Namespace; default "default".
	Namespace string
	// TaskQueue of the aggregate workflows; default "ferry".
	TaskQueue string
	// Exchange events are published to; default "ferry.events".
	Exchange string
	// RoutingKey template; default "{aggregate_type}.{event_type}".
	RoutingKey string
	// BatchSize of one claim; default 200.
	BatchSize int
	// Lease of claimed rows; default 30s.
	Lease time.Duration
	// PollInterval, the fallback when no NOTIFY arrives; default 1s.
	PollInterval time.Duration
	// IdleTimeout after which an idle aggregate workflow completes; default 1m.
	IdleTimeout time.Duration
	// ConnectTimeout bounds reaching each dependency at start; default 10s.
	ConnectTimeout time.Duration
}

// Defaults for this machine's local services.
const (
	DefaultPostgresURL     = "postgres://postgres@127.0.0.1:5432/postgres"
	DefaultAMQPURL         = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultTemporalAddress = "127.0.0.1:7233"
)

var taskQueueName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)

// WithDefaults fills zero fields and validates the result.
func (c Config) WithDefaults() (Config, error) {
	c.PostgresURL = cmp.Or(c.PostgresURL, DefaultPostgresURL)
	c.AMQPURL = cmp.Or(c.AMQPURL, DefaultAMQPURL)
	c.TemporalAddress = cmp.Or(c.TemporalAddress, DefaultTemporalAddress)
	c.Namespace = cmp.Or(c.Namespace, "default")
	c.TaskQueue = cmp.Or(c.TaskQueue, "ferry")
	c.Exchange = cmp.Or(c.Exchange, "ferry.events")
	c.RoutingKey = cmp.Or(c.RoutingKey, activities.DefaultRoutingKeyTemplate)
	if _, err := activities.RoutingKeyTemplate(c.RoutingKey); err != nil {
		return c, err
	}
	c.BatchSize = cmp.Or(c.BatchSize, 200)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, 10*time.Second)
	if !taskQueueName.MatchString(c.TaskQueue) {
		return c, fmt.Errorf("task queue %q: use 1-200 letters, digits, '_', '.', ':' or '-'", c.TaskQueue)
	}
	if c.BatchSize < 1 {
		return c, errors.New("batch size must be at least 1")
	}
	// The poller's own checks, before anything is dialled.
	if err := (poller.Config{BatchSize: c.BatchSize, Lease: c.Lease, PollInterval: c.PollInterval}).Validate(); err != nil {
		return c, err
	}
	return c, nil
}
