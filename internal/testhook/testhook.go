// Package testhook holds the switches that exist only for Ferry's own
// tests, so that no public Config carries them. A package that honours a
// switch installs it here in its init; being internal, no code outside
// this repository can reach it.
//
// The switches take and return their package's Config as any, because
// this package cannot import the packages that import it; the generic
// helpers give callers their type back.
package testhook

// PollerShortLease returns a copy of cfg, a poller.Config, that lifts the
// rule that Lease exceed SignalTimeout + MarkTimeout and stops bounding a
// batch's signals by the lease, so another poller may claim and signal
// rows this one is still signalling. The fault suite's negative control
// (e2e) uses it to prove that its checker sees duplicate signals. Package
// poller installs it.
var PollerShortLease func(cfg any) any

// AllowShortLease is PollerShortLease for a poller.Config.
func AllowShortLease[C any](cfg C) C {
	if PollerShortLease == nil {
		panic("testhook: package poller is not linked, so PollerShortLease is not installed")
	}
	return PollerShortLease(cfg).(C)
}
