package schema

// Undelivered is a subquery of the rows not yet delivered: pending,
// dispatched and quarantined (published and skipped rows are delivered or
// given up). It yields aggregate_type, status and created_at, each status
// read through its own partial index (0001, 0002, 0006), so its cost follows
// the rows in flight, not the table, which holds every delivered row for
// the retention period. Use it as `FROM (` + Undelivered + `) u`.
const Undelivered = `
SELECT aggregate_type, status, created_at FROM outbox_events WHERE status = 'pending'
UNION ALL
SELECT aggregate_type, status, created_at FROM outbox_events WHERE status = 'dispatched'
UNION ALL
SELECT aggregate_type, status, created_at FROM outbox_events WHERE status = 'quarantined'`
