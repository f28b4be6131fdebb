package workflows

import (
	"cmp"
	"fmt"
	"time"
)

// Settings are the aggregate workflow's tunables. The worker owns them
// (worker.Config.Workflow): runs of Revision2 and later ask the worker that
// runs them, through the result of the first activity they call, and keep
// the answer for the rest of the run:
//
//   - a fresh run (started by a poller, after an idle or one-shot
//     completion) from its first PublishBatchActivity, which also reads
//     the cursor, or, when that batch fails, from LoadCursorActivity;
//   - a run continued as new from a LoadCursorActivity at its start.
//
// Activity results are recorded in history, so a replay sees the settings
// the run was given whatever the worker's are now. A change to a worker's
// settings therefore reaches a running aggregate at its next run or
// continue-as-new, never in the middle of a run. Give every worker of a
// task queue the same settings: a run takes them from whichever worker
// runs its first workflow task.
//
// Runs of older revisions (started by pollers before Revision2) read the
// same settings from their input (AggregateInput's IdleTimeout,
// MaxHistoryEvents, PublishBatchSize, MaxBlockedRefs and Policies) and
// carry them across continue-as-new, as they were recorded.
//
// Zero fields mean their defaults.
type Settings struct {
	// IdleTimeout: a keep-alive run with nothing to do completes after
	// this. Default DefaultIdleTimeout (1m).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// MaxHistoryEvents: a run continues as new once its history is this
	// long. Default DefaultMaxHistoryEvents (4,000).
	MaxHistoryEvents int `json:"max_history_events,omitempty"`
	// PublishBatchSize is the most events one fast-path publish takes (a
	// local activity, one marker in history); -1 turns the fast path off,
	// one regular activity per event. Default DefaultPublishBatchSize (100).
	PublishBatchSize int `json:"publish_batch_size,omitempty"`
	// MaxBlockedRefs is the most event references a blocked run keeps; the
	// rows of events signalled beyond it are handed back to PostgreSQL and
	// claimed again after the repair (AggregateInput.MaxBlockedRefs says
	// how). -1: no bound. Default DefaultMaxBlockedRefs (5,000).
	MaxBlockedRefs int `json:"max_blocked_refs,omitempty"`
	// Policies by event type: retries and poison handling; "*" applies to
	// types without an entry. Default: every type gets DefaultMaxAttempts
	// and blocks its aggregate when they run out.
	Policies map[string]EventPolicy `json:"policies,omitempty"`
}

// MaxPublishBatchSize bounds Settings.PublishBatchSize: a confirm window
// and the payloads of one batch stay small.
const MaxPublishBatchSize = 1000

// WithDefaults fills the zero fields with their defaults.
func (s Settings) WithDefaults() Settings {
	s.IdleTimeout = cmp.Or(s.IdleTimeout, DefaultIdleTimeout)
	s.MaxHistoryEvents = cmp.Or(s.MaxHistoryEvents, DefaultMaxHistoryEvents)
	s.PublishBatchSize = cmp.Or(s.PublishBatchSize, DefaultPublishBatchSize)
	s.MaxBlockedRefs = cmp.Or(s.MaxBlockedRefs, DefaultMaxBlockedRefs)
	return s
}

// Validate checks the settings (zero fields count as their defaults). The
// error names the field.
func (s Settings) Validate() error {
	s = s.WithDefaults()
	switch {
	case s.IdleTimeout < 0:
		return fmt.Errorf("Settings.IdleTimeout %s: must not be negative", s.IdleTimeout)
	case s.MaxHistoryEvents < 10 || s.MaxHistoryEvents > 50000:
		// Below 10 a run would continue as new before it did any work;
		// above 50,000 it would reach Temporal's 51,200-event limit.
		return fmt.Errorf("Settings.MaxHistoryEvents %d: use 10 to 50000", s.MaxHistoryEvents)
	case s.PublishBatchSize < -1 || s.PublishBatchSize > MaxPublishBatchSize:
		return fmt.Errorf("Settings.PublishBatchSize %d: use 1 to %d, or -1 for one activity per event", s.PublishBatchSize, MaxPublishBatchSize)
	case s.MaxBlockedRefs < -1:
		return fmt.Errorf("Settings.MaxBlockedRefs %d: use at least 1, or -1 for no bound", s.MaxBlockedRefs)
	}
	for typ, p := range s.Policies {
		if err := p.validate(); err != nil {
			return fmt.Errorf("Settings.Policies[%q]: %w", typ, err)
		}
	}
	return nil
}

func (p EventPolicy) validate() error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("MaxAttempts %d: must be at least 1 (0 for the default, %d)", p.MaxAttempts, DefaultMaxAttempts)
	case p.OnPoison != "" && p.OnPoison != OnPoisonBlock && p.OnPoison != OnPoisonSkip:
		return fmt.Errorf("OnPoison %q: use %q or %q", p.OnPoison, OnPoisonBlock, OnPoisonSkip)
	}
	return nil
}

// runSettings are the settings one run works with, whatever their source.
type runSettings struct {
	idle       time.Duration
	maxHistory int
	batchSize  int // 0: no fast path
	maxBlocked int // 0: no bound
	policies   map[string]EventPolicy
}

// inputSettings are what a run of an older revision reads from its input,
// where zero meant "off" for the batch size and the bound.
func inputSettings(in AggregateInput) runSettings {
	return runSettings{
		idle:       cmp.Or(in.IdleTimeout, DefaultIdleTimeout),
		maxHistory: cmp.Or(in.MaxHistoryEvents, DefaultMaxHistoryEvents),
		batchSize:  max(in.PublishBatchSize, 0),
		maxBlocked: max(in.MaxBlockedRefs, 0),
		policies:   in.Policies,
	}
}

// workerSettings are what a run of Revision2 or later got from its worker.
func workerSettings(s Settings) runSettings {
	s = s.WithDefaults()
	return runSettings{
		idle:       s.IdleTimeout,
		maxHistory: s.MaxHistoryEvents,
		batchSize:  max(s.PublishBatchSize, 0),
		maxBlocked: max(s.MaxBlockedRefs, 0),
		policies:   s.Policies,
	}
}
