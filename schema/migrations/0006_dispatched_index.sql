-- Find dispatched rows without reading the table (issue: operating Ferry).
--
-- Pending and quarantined rows have partial indexes (0001, 0002); dispatched
-- rows had none, so every question about them read the whole table: the
-- /metrics scrape (backlog count and oldest age), `ferry status`, and the
-- reconciler's "dispatched long ago" pass. Delivered rows are the bulk of a
-- busy table (they stay for the retention period), so those reads grew with
-- it: 360 ms per scrape at 2 million rows, past the scrape's 5 s timeout
-- long before a month of a busy service. With this index they read only the
-- rows in flight (under a millisecond at 2 million rows).
--
-- Cost: a row enters the index once, when it is dispatched (that update
-- already writes every index: it changes status, so it is never HOT).
--
-- Large tables: CREATE INDEX blocks writes to outbox_events while it
-- builds (it reads the whole table once). To upgrade without that pause,
-- create the index first, outside a transaction, with the same name:
--
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_dispatched_idx
--       ON outbox_events (dispatched_at) WHERE status = 'dispatched';
--
-- then `ferry migrate` finds it and does nothing here.
CREATE INDEX IF NOT EXISTS outbox_events_dispatched_idx
    ON outbox_events (dispatched_at)
    WHERE status = 'dispatched';
