package destination

// Dedup drops repeats in a workflow that receives Ferry's envelopes. Ferry
// delivers each aggregate's events to a destination in version order and
// may deliver one again (a retry whose first try reached Temporal, a
// repair, a signal that reached a run after continue-as-new), never an
// older one after a newer one for the first time. So the highest version
// seen per aggregate is all a receiver must remember: anything at or below
// it is a repeat. Its memory is one entry per aggregate the workflow hears
// from, whatever the number of events.
//
// Keep it in the workflow's state and pass it on through continue-as-new
// (it is JSON-encodable); it is deterministic, so it is safe in workflow
// code:
//
//	var seen destination.Dedup
//	ch := workflow.GetSignalChannel(ctx, "paid")
//	for {
//		var ev destination.Envelope
//		ch.Receive(ctx, &ev)
//		if !seen.First(ev) {
//			continue // a repeat: handled already
//		}
//		…
//	}
//
// The zero value is ready to use.
type Dedup struct {
	// Last is the highest version seen per aggregate ("type/id").
	Last map[string]int64 `json:"last"`
}

// First reports whether ev is seen for the first time, and remembers it.
// It is false for an event whose aggregate version is at or below one
// seen before for the same aggregate.
func (d *Dedup) First(ev Envelope) bool {
	key := ev.Aggregate()
	if last, ok := d.Last[key]; ok && ev.AggregateVersion <= last {
		return false
	}
	if d.Last == nil {
		d.Last = map[string]int64{}
	}
	d.Last[key] = ev.AggregateVersion
	return true
}

// Seen reports whether ev is a repeat, without remembering it.
func (d *Dedup) Seen(ev Envelope) bool {
	last, ok := d.Last[ev.Aggregate()]
	return ok && ev.AggregateVersion <= last
}
