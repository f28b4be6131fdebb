package activities_test

import (
	"testing"

	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

// rabbitNode is a RabbitMQ node of the test's own (servers.RabbitNode), for
// broker settings the shared one must keep.
type rabbitNode struct{ *servers.RabbitNode }

// startRabbitNode starts a node whose rabbitmq.conf adds conf to the
// listener settings. It fails the test, never skips, without RabbitMQ.
func startRabbitNode(t *testing.T, conf string) *rabbitNode {
	t.Helper()
	return &rabbitNode{servers.StartRabbitNode(t, conf)}
}

// ctl runs rabbitmqctl against the node and returns its output.
func (n *rabbitNode) ctl(t *testing.T, args ...string) string {
	t.Helper()
	return n.Ctl(t, args...)
}
