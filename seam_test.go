package ferry_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// amqpOwners are the directories whose non-test Go files may import the
// AMQP client. Everything that publishes an event goes through a
// delivery.Target, whose RabbitMQ implementation (delivery/rabbitmq) and
// package broker below it keep the AMQP types (amqp.Table, amqp.Error, …)
// behind the seam.
var amqpOwners = []string{
	"broker",            // the connection, the channel, the confirms
	"delivery/rabbitmq", // Ferry's message contract on RabbitMQ
	// The consumer half reads AMQP deliveries and declares its queues:
	// package consumer, and the example consumer.
	"consumer",
	"examples/inventory",
	// The tests' broker set-up (the test kit's exchange and queue per test,
	// and its private RabbitMQ nodes: ferrytest/servers), and the bench's
	// plain relay and consumer, which measure Ferry and are not part of it.
	"ferrytest",
	"dev/bench",
}

// TestAMQPOnlyBehindTheDeliverySeam fails when a non-test Go file outside
// amqpOwners imports the AMQP client.
func TestAMQPOnlyBehindTheDeliverySeam(t *testing.T) {
	t.Parallel()
	const amqpPath = "github.com/rabbitmq/amqp091-go"
	var found []string
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		dir := filepath.ToSlash(filepath.Dir(path))
		if slices.ContainsFunc(amqpOwners, func(owner string) bool { return dir == owner || strings.HasPrefix(dir, owner+"/") }) {
			return nil
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == amqpPath {
				found = append(found, filepath.ToSlash(path))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, seen, 100, "the walk must see the tree's Go files")
	require.Empty(t, found, "the AMQP client outside the delivery seam: publish through a delivery.Target (package delivery/rabbitmq)")
}
