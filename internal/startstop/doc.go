// Package startstop holds the start/stop contract Ferry's long-running
// services share (the poller, the consumer, the inbox cleaner): Start
// returns at once and runs the service's loop in the background on a
// context of its own, Stop cancels it and waits until the loop returned,
// and a second Start or Stop is harmless. It owns no loop, no retry and no
// logging: each service brings its own.
package startstop
