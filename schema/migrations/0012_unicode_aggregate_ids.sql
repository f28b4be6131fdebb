-- Aggregate ids outside ASCII ("müller", "製品-7") are delivered; 0007's
-- constraint refused them at insert.
--
-- Why 0007 refused them: the Temporal Go SDK sends the workflow ID in the
-- gRPC header temporal-resource-id, which takes printable ASCII only. The
-- workflow ID is no longer the id as it is: workflows.WorkflowID keeps
-- "ferry/<aggregate_type>/<aggregate_id>" for an id of printable ASCII
-- (every running workflow and recorded history keeps its ID) and escapes
-- any other: "ferry/<aggregate_type>~/<id>", each byte outside 0x20-0x7E
-- and each '~' of the id's UTF-8 written as '~' and two upper-case hex
-- digits ("müller" is "ferry/customer~/m~C3~BCller"). The '~' after the
-- type cannot occur in an ID of the first form (the type's alphabet is
-- [A-Za-z0-9_.-], 0001), so no ASCII id shares an ID with another id. The
-- row, the AMQP headers and the destinations' envelopes keep the id as it
-- was written.
--
-- What is still refused at insert, of pending rows:
--   - a control character (C0 U+0001-U+001F, DEL U+007F, C1 U+0080-U+009F):
--     outbox_events_aggregate_id_printable, 0007's name with the new rule.
--     Any encoding could carry it, but it shows in no list and acts on
--     terminals. (NUL and invalid UTF-8 never reach a row: text cannot hold
--     NUL, and a UTF8 database refuses invalid UTF-8 before any check.)
--   - more than 200 bytes: outbox_events_aggregate_id_bytes. Escaping
--     turns a byte into at most three, so the workflow ID stays at most
--     6 + 100 + 2 + 3 * 200 = 708 bytes, under Temporal's limit.maxIDLength
--     (1000 by default). 0001's 200 characters could not bound it: 200
--     characters of four bytes escape to 2,400. For ASCII ids, the only
--     ones accepted so far, bytes and characters are the same.
-- package outbox's Writer checks the same before the insert.
--
-- A database whose encoding is not UTF8 keeps 0007's rule (printable
-- ASCII): there the column's bytes need not be UTF-8, and octet_length
-- would not count the workflow ID's bytes.
--
-- Like 0007's, both constraints bind pending rows only and are added NOT
-- VALID: rows past pending are left as they are (PostgreSQL checks every
-- updated row, so a check on all rows would fail the relay's and
-- retention's updates of old rows), and validating would read the whole
-- table under this migration's lock. Every pending row passes both already
-- (0007 kept them printable ASCII, 0001 at most 200 characters). To mark
-- them valid later, without blocking writes:
--
--   ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_aggregate_id_printable;
--   ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_aggregate_id_bytes;
--
-- Locks: ACCESS EXCLUSIVE on outbox_events until this migration commits,
-- taken by the first ALTER; nothing below reads more than the quarantined
-- rows (outbox_events_quarantined_idx), so it is short, but it waits for
-- every open transaction that touched the table and inserts queue behind it.
DO $$
BEGIN
    ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_aggregate_id_printable;
    IF getdatabaseencoding() = 'UTF8' THEN
        ALTER TABLE outbox_events
            ADD CONSTRAINT outbox_events_aggregate_id_printable
            CHECK (status <> 'pending' OR aggregate_id !~ '[\x01-\x1f\x7f-\x9f]')
            NOT VALID;
    ELSE
        ALTER TABLE outbox_events
            ADD CONSTRAINT outbox_events_aggregate_id_printable
            CHECK (status <> 'pending' OR aggregate_id ~ '^[ -~]+$')
            NOT VALID;
    END IF;
END
$$;

ALTER TABLE outbox_events
    ADD CONSTRAINT outbox_events_aggregate_id_bytes
    CHECK (status <> 'pending' OR octet_length(aggregate_id) <= 200)
    NOT VALID;

-- The rows 0007 quarantined as InvalidAggregateID stay quarantined: 0007's
-- reason told operators to write such an event again under another id and
-- then to skip the row, so a row may be one whose event was written again,
-- and sending it now could deliver the event twice under two aggregates.
-- Those whose id is deliverable now get a reason that says so and leaves
-- the choice to an operator, through `ferry repair` (audited): retry sends
-- the row, skip gives it up. The others keep 0007's reason, which still
-- holds for them.
UPDATE outbox_events
SET last_error = 'quarantined (InvalidAggregateID): aggregate_id has bytes outside printable ASCII, which '
        || 'Temporal refused in a workflow ID before migration 0012 (migration 0007 quarantined this row). '
        || 'Ferry delivers this id now. If the event was not written again under another id, send it: '
        || 'ferry repair ' || id || ' --action retry --reason ''deliverable since schema 0012''; '
        || 'otherwise give it up: ferry repair ' || id || ' --action skip --reason ''written again'''
WHERE status = 'quarantined'
  AND last_error LIKE 'quarantined (InvalidAggregateID):%'
  AND octet_length(aggregate_id) <= 200
  AND (CASE WHEN getdatabaseencoding() = 'UTF8'
            THEN aggregate_id !~ '[\x01-\x1f\x7f-\x9f]'
            ELSE aggregate_id ~ '^[ -~]+$' END);
