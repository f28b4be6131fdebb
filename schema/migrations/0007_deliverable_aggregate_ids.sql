-- Refuse at insert the aggregate ids Temporal cannot take (issue: bad input
-- gets a clear error, and nothing committed is lost).
--
-- An aggregate's workflow ID is "ferry/<aggregate_type>/<aggregate_id>", and
-- the Temporal Go SDK sends it in the gRPC header temporal-resource-id,
-- whose values gRPC allows only printable ASCII (bytes 0x20-0x7E). Any other
-- byte, a control character or any byte of a non-ASCII character, fails
-- every signal ("header key "temporal-resource-id" contains value with
-- non-printable ASCII characters"): the row stayed pending and was retried
-- for ever, listed nowhere. Such an insert now fails, naming the column:
--
--   new row for relation "outbox_events" violates check constraint
--   "outbox_events_aggregate_id_printable"
--
-- Nothing else needed a new constraint: aggregate_type and event_type were
-- limited to [A-Za-z0-9_.-]{1,100} from the start (0001,
-- outbox_events_aggregate_type_check and outbox_events_event_type_check),
-- and with printable ASCII the lengths of 0001 keep the workflow ID at most
-- 6 + 100 + 1 + 200 = 307 bytes, well under Temporal's limit.maxIDLength
-- (1000 by default; outbox_events_aggregate_id_check says 200 characters).
--
-- The rule binds pending rows, the ones the poller hands to Temporal. Rows
-- already past it are left alone: a dispatched or published row got its
-- workflow (a client before the header), and a check on every row would
-- fail the relay's and retention's updates of such old rows, since
-- PostgreSQL checks the new version of every updated row.
--
-- Locks: ADD CONSTRAINT takes an ACCESS EXCLUSIVE lock on outbox_events,
-- held until this migration commits, so the quarantine below sees every row
-- and no bad row slips in behind it. The statements after it read only
-- pending rows, so the lock is short, but it waits for every open
-- transaction that touched outbox_events, and inserts queue behind it.
ALTER TABLE outbox_events
    ADD CONSTRAINT outbox_events_aggregate_id_printable
    CHECK (status <> 'pending' OR aggregate_id ~ '^[ -~]+$')
    NOT VALID;

-- Pending rows that break the rule can never be delivered. Quarantined,
-- they leave the poller's claim, count in `ferry status` and in
-- ferry_outbox_events{status="quarantined"}, and say why. They have no
-- workflow, so `ferry repair` cannot reach them: write the event again with
-- a valid id, then give the row up with
-- UPDATE outbox_events SET status = 'skipped' WHERE id = '…'.
UPDATE outbox_events
SET status = 'quarantined',
    last_error = 'quarantined (InvalidAggregateID): aggregate_id has bytes outside printable ASCII '
        || '(0x20-0x7E), which Temporal refuses in a workflow ID, so this event can never be '
        || 'delivered (migration 0007). Write it again with a valid aggregate_id, then give this '
        || 'row up: UPDATE outbox_events SET status = ''skipped'' WHERE id = ''' || id || ''''
WHERE status = 'pending' AND aggregate_id !~ '^[ -~]+$';

-- Not validated here: VALIDATE CONSTRAINT reads the whole table, delivered
-- rows included, and would do it under the lock above, stalling producers
-- on a large table. It cannot fail (the lock kept any bad pending row from
-- appearing after the quarantine) and changes nothing but the catalog: new
-- rows are checked either way. To mark it valid, run any time, without
-- blocking writes:
--
--   ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_aggregate_id_printable;
