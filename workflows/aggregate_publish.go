package workflows

import (
	"cmp"
	"slices"

	"go.temporal.io/sdk/workflow"
)

// The aggregate workflow's publish path: where a run starts (the cursor),
// which settings it runs with, the fast path (PublishBatchActivity, a
// local activity per run of events) and the regular path
// (PublishEventActivity, one activity per event, whose retries the
// Temporal UI shows).

func (s *aggregateState) policy(eventType string) EventPolicy {
	if p, ok := s.cfg.policies[eventType]; ok {
		return p
	}
	return s.cfg.policies["*"]
}

func (s *aggregateState) publish(ctx workflow.Context, ev EventRef) error {
	s.publishing = ev.Version
	defer func() { s.publishing = 0 }()
	actx := workflow.WithActivityOptions(ctx, publishOptions(s.policy(ev.Type)))
	var res PublishResult
	err := workflow.ExecuteActivity(actx, PublishEventActivity, PublishInput{
		EventID:       ev.ID,
		AggregateType: s.in.AggregateType,
		AggregateID:   s.in.AggregateID,
		Version:       ev.Version,
		Epoch:         s.epoch,
	}).Get(ctx, &res)
	if err == nil {
		s.done(ev)
		s.startEffects(ctx, ev, res.Effects)
	}
	return err
}

// publishBatch publishes the run of consecutive pending events after the
// delivered one, up to the batch size, in one local activity: one marker in
// history for the whole run instead of an activity's three events (and a
// workflow task) per event. It returns how many events it published; 0
// means the caller publishes the next event on the regular path, where
// retries, timeouts and the last failure are visible in the Temporal UI.
func (s *aggregateState) publishBatch(ctx workflow.Context) int {
	if !s.fastPath() {
		return 0
	}
	ask := s.askSettings()
	size := s.cfg.batchSize
	if ask {
		size = MaxPublishBatchSize // the worker's own cuts it
	}
	var run []EventRef
	if s.cursorUnknown {
		// Where the run starts is the activity's to find out.
		run = slices.Clone(s.pending[:min(len(s.pending), size)])
	} else {
		run = s.run(size)
	}
	if len(run) == 0 {
		return 0
	}
	s.publishing = run[0].Version
	defer func() { s.publishing = 0 }()
	var res PublishBatchResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, fastPathOptions), PublishBatchActivity,
		PublishBatchInput{AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Events: run,
			LoadCursor: s.cursorUnknown, Settings: ask, Epoch: s.epoch}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Info("fast path failed; publishing the event on the regular path, with retries",
			"version", run[0].Version, "error", err)
		return 0
	}
	if ask {
		s.adopt(res.Settings)
	}
	if s.cursorUnknown {
		s.setCursor(res.Cursor)
	}
	n := min(res.Published, len(run))
	if res.Stopped != "" {
		workflow.GetLogger(ctx).Info("fast path stopped early", "published", n, "of", len(run), "reason", res.Stopped)
	}
	effects := map[int64][]EffectStart{}
	for _, e := range res.Effects {
		effects[e.Version] = e.Effects
	}
	published := 0
	for range n {
		ev, ok := s.next()
		if !ok {
			break // the activity cannot have published past a gap
		}
		s.done(ev)
		s.startEffects(ctx, ev, effects[ev.Version])
		published++
	}
	return published
}

// fastPath says whether this run publishes in batches: when its settings
// say so, and always for the first batch of a run of Revision2, which asks
// the worker for them. Histories recorded before the fast path have no
// batch size in their input and replay the regular path. (A GetVersion
// marker would do the same, but it upserts the TemporalChangeVersion
// search attribute on every run: a visibility write per workflow, a sixth
// of the embedded server's CPU for aggregates with one event each; the
// revision in the input costs nothing.)
func (s *aggregateState) fastPath() bool {
	return s.askSettings() || s.cfg.batchSize > 0
}

// run is the longest prefix of pending, at most size events, whose
// versions follow the delivered one without a gap.
func (s *aggregateState) run(size int) []EventRef {
	n := 0
	for n < len(s.pending) && n < size && s.pending[n].Version == s.delivered+1+int64(n) {
		n++
	}
	return slices.Clone(s.pending[:n])
}

// loadCursor reads the delivered version from PostgreSQL (and, for a run
// of Revision2 that has no settings yet, the worker's settings).
func (s *aggregateState) loadCursor(ctx workflow.Context) error {
	cur, err := s.readCursor(ctx)
	if err != nil {
		return err
	}
	s.setCursor(cur.Delivered)
	return nil
}

// loadSettings asks the worker for the run's settings: what a run of
// Revision2 continued as new does first. The cursor that comes with them
// is not used: a resumed run's Delivered is authoritative (a block it
// carries may sit at a version an operator skipped in the table meanwhile).
func (s *aggregateState) loadSettings(ctx workflow.Context) error {
	_, err := s.readCursor(ctx)
	return err
}

// readCursor runs LoadCursorActivity, asking for the settings when the
// run has none yet and adopting them.
func (s *aggregateState) readCursor(ctx workflow.Context) (CursorResult, error) {
	var cur CursorResult
	ask := s.askSettings()
	lctx := workflow.WithLocalActivityOptions(ctx, cursorOptions)
	err := workflow.ExecuteLocalActivity(lctx, LoadCursorActivity,
		CursorInput{AggregateType: s.in.AggregateType, AggregateID: s.in.AggregateID, Settings: ask}).Get(ctx, &cur)
	if err != nil {
		return cur, err
	}
	if ask {
		s.adopt(cur.Settings)
	}
	return cur, nil
}

// askSettings: the run is of Revision2 or later and its worker has not
// answered yet.
func (s *aggregateState) askSettings() bool {
	return !s.settingsKnown
}

// adopt takes the settings a worker answered with (recorded in history as
// the activity's result). A worker that answered none (nil) gets the
// defaults.
func (s *aggregateState) adopt(settings *Settings) {
	s.cfg = workerSettings(*cmp.Or(settings, &Settings{}))
	s.settingsKnown = true
}

// resolveCursor learns where a fresh run starts: from its first batch,
// which reads the cursor and publishes what follows it in one local
// activity, or, when that fails or there is nothing to publish yet, from
// LoadCursorActivity (retried until it answers).
func (s *aggregateState) resolveCursor(ctx workflow.Context) error {
	if s.regularNext {
		// Handed over after a failed publish: the next event goes to the
		// regular path, so the cursor comes on its own.
		return s.loadCursor(ctx)
	}
	s.publishBatch(ctx)
	if !s.cursorUnknown {
		return nil
	}
	return s.loadCursor(ctx)
}

// setCursor records the delivered version read from PostgreSQL and drops
// the pending events at or below it: an earlier run published them.
func (s *aggregateState) setCursor(delivered int64) {
	s.cursorUnknown = false
	s.delivered = max(s.delivered, delivered)
	n := 0
	for n < len(s.pending) && s.pending[n].Version <= s.delivered {
		n++
	}
	s.duplicates += n
	s.pending = s.pending[n:]
}
