-- The class of a row's last error, in a column of its own, so that a
-- command reads it instead of parsing last_error's text (`ferry event`,
-- `ferry blocked`).
--
-- last_error_class is the class of last_error, NULL when that error has
-- none (a signal that failed for an outage, a row the reconciler handed
-- back, a row a blocked workflow held) and when last_error is NULL. Every
-- statement that writes last_error writes it too, in the same SET
-- (TestEveryLastErrorWriteSetsItsClass checks Ferry's SQL for it):
--   - a quarantine: the workflow's error class (Unroutable, PayloadTooLarge,
--     MessageRefused, NoDestination, …, as FerryErrorClass shows it),
--     TemporalRefused from the poller;
--   - a failed publish attempt: the activity's error type (Unroutable,
--     BrokerUnavailable, …), Unknown for an error without one;
--   - a start or signal Temporal refused as invalid, before the attempt
--     that quarantines it: TemporalRefused.
-- The classes are Ferry's error types, the same names as the error_class
-- label of the metrics and the FerryErrorClass search attribute.
--
-- Locks and time: ADD COLUMN of a nullable column without a default only
-- changes the catalog (no table rewrite, every existing row reads NULL);
-- its ACCESS EXCLUSIVE lock is held until the migration commits (the
-- migration's lock_timeout, 10s by default, bounds the wait for it).
ALTER TABLE outbox_events ADD COLUMN last_error_class text;

-- Quarantined rows already carry their class in last_error's text:
-- "quarantined (CLASS): …", the form every quarantine writes, migration
-- 0007's included. Read through the quarantined rows' partial index (0002),
-- so the cost is the rows held for an operator, not the table. Other rows'
-- errors had no class; they get one at their next failure.
UPDATE outbox_events
SET last_error_class = substring(last_error FROM '^quarantined \(([A-Za-z0-9_.-]+)\)')
WHERE status = 'quarantined';
