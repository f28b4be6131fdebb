// Package demo is what `ferry dev` shows a newcomer: a producer that writes
// order rows and their outbox events in one transaction at a steady pace.
// What arrives is printed by the example consumer (examples/inventory).
//
// It owns the demo_orders table. It is an example of using package outbox,
// not part of Ferry's contract.
package demo
