// Package demo is what `ferry dev` shows a newcomer: a producer that writes
// order rows and their outbox events in one transaction at a steady pace, and
// a tail that prints what arrives on RabbitMQ.
//
// It owns the demo_orders table and the demo queue. It is an example of using
// package outbox, not part of Ferry's contract.
package demo
