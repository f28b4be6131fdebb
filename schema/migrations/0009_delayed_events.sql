-- Delayed events: a producer can ask for an event not to be delivered
-- before a time, and the aggregate's order still holds.
--
-- deliver_after is the producer's: NULL (the default) delivers at once, a
-- time in the past too. A time in the future keeps the row out of the
-- relay's claim until then: the version trigger sets next_attempt_at, which
-- the claim already waits for (0001), to that time. The database's clock
-- decides (now()), not the producer's.
--
-- Order: an aggregate's later versions must not overtake a delayed one, so
-- the trigger keeps the aggregate's latest delivery time on its counter
-- row (outbox_aggregates.hold_until) and gives every later version written
-- while it is in the future the same time, or its own when later. A later
-- version written once the time has passed is not held. Such a held row
-- gets deliver_after raised to the time it waits for, so deliver_after of
-- a pending row is always when it becomes deliverable: `ferry status` and
-- the metrics count it as delayed until then, not as late, and
-- published_at >= deliver_after holds for every delivered row.
--
-- Cost: nothing for an event without a delay beyond a NULL check; the hold
-- is read and written by the upsert that already assigns the version, in
-- the row it already locks, so a rollback takes the hold back with the
-- version. Nothing indexes hold_until: the counter row's updates stay HOT.
--
-- A trigger on INSERT only: changing deliver_after of a written row moves
-- nothing (write a new event instead).
--
-- Roles: CREATE OR REPLACE resets the function's SECURITY DEFINER and
-- search_path; run schema/roles.sql again after this migration if you use
-- it (as after every upgrade).
ALTER TABLE outbox_events
    ADD COLUMN deliver_after timestamptz
    CONSTRAINT outbox_events_deliver_after_finite CHECK (isfinite(deliver_after));

ALTER TABLE outbox_aggregates ADD COLUMN hold_until timestamptz;

-- Both paths of 0005, each now carrying the hold in the statement that
-- already touched the counter row. `hold` is the aggregate's hold after
-- this row: the later of the old hold and this row's deliver_after, NULL
-- once both are past.
CREATE OR REPLACE FUNCTION outbox_assign_version() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
    hold timestamptz;
BEGIN
    IF NEW.aggregate_version IS NULL THEN
        INSERT INTO outbox_aggregates AS a (aggregate_type, aggregate_id, last_version, delivered_version, hold_until)
        VALUES (NEW.aggregate_type, NEW.aggregate_id, 1, 0,
                CASE WHEN NEW.deliver_after > now() THEN NEW.deliver_after END)
        ON CONFLICT (aggregate_type, aggregate_id)
            DO UPDATE SET last_version = a.last_version + 1, updated_at = now(),
                hold_until = CASE WHEN greatest(a.hold_until, EXCLUDED.hold_until) > now()
                                  THEN greatest(a.hold_until, EXCLUDED.hold_until) END
        RETURNING a.last_version, a.hold_until INTO NEW.aggregate_version, hold;
    ELSE
        INSERT INTO outbox_aggregates (aggregate_type, aggregate_id, last_version, delivered_version)
        VALUES (NEW.aggregate_type, NEW.aggregate_id, NEW.aggregate_version - 1, NEW.aggregate_version - 1)
        ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING;

        SELECT a.last_version, a.hold_until INTO last, hold
        FROM outbox_aggregates a
        WHERE a.aggregate_type = NEW.aggregate_type AND a.aggregate_id = NEW.aggregate_id
        FOR UPDATE;

        IF NEW.aggregate_version <= last THEN
            RAISE EXCEPTION 'aggregate_version % of %/% is taken: the aggregate is at version %',
                NEW.aggregate_version, NEW.aggregate_type, NEW.aggregate_id, last
                USING ERRCODE = 'unique_violation',
                      CONSTRAINT = 'outbox_events_aggregate_version_key';
        ELSIF NEW.aggregate_version > last + 1 THEN
            RAISE EXCEPTION 'aggregate_version % of %/% skips versions: the next version is %',
                NEW.aggregate_version, NEW.aggregate_type, NEW.aggregate_id, last + 1
                USING ERRCODE = 'check_violation',
                      CONSTRAINT = 'outbox_events_aggregate_version_gap';
        END IF;

        hold := greatest(CASE WHEN hold > now() THEN hold END,
                         CASE WHEN NEW.deliver_after > now() THEN NEW.deliver_after END);
        UPDATE outbox_aggregates
        SET last_version = NEW.aggregate_version, updated_at = now(), hold_until = hold
        WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id;
    END IF;

    IF hold IS NOT NULL THEN
        NEW.deliver_after := hold;
        NEW.next_attempt_at := greatest(NEW.next_attempt_at, hold);
    END IF;
    RETURN NEW;
END
$$;
