package schema_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/schema"
)

// Upgrading to 0011 gives each quarantined row the class its last_error
// names ("quarantined (CLASS): …", 0007's rows among them) and leaves every
// other row without one: their errors had no class.
func TestMigration0011ReadsTheClassOfQuarantinedRows(t *testing.T) {
	t.Parallel()
	pool := freshSchemaAt(t, 10)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, last_error) VALUES
		('order', 'q1', 'created', '{}', 'quarantined', 'quarantined (Unroutable): no route for order.created'),
		('order', 'q2', 'created', '{}', 'quarantined', 'quarantined (TemporalRefused): Temporal refused it as invalid 3 times'),
		('order', 'q3', 'created', '{}', 'quarantined', 'something an operator wrote by hand'),
		('order', 'p1', 'created', '{}', 'pending', 'quarantined (Unroutable): not quarantined any more'),
		('order', 'p2', 'created', '{}', 'pending', 'signal: unavailable'),
		('order', 'p3', 'created', '{}', 'published', NULL)`)
	require.NoError(t, err)

	res, err := schema.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, 11, res.Applied[0].Version)

	rows, err := pool.Query(ctx, `SELECT aggregate_id, coalesce(last_error_class, '-') FROM outbox_events ORDER BY aggregate_id`)
	require.NoError(t, err)
	got := map[string]string{}
	for rows.Next() {
		var id, class string
		require.NoError(t, rows.Scan(&id, &class))
		got[id] = class
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{"q1": "Unroutable", "q2": "TemporalRefused", "q3": "-", "p1": "-", "p2": "-", "p3": "-"}, got)
}
