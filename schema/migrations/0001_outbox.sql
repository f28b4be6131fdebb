-- Ferry outbox, version 1. This file is the contract between producers (any
-- language) and the relay; see README "Schema". Never edit an applied
-- migration: add a new numbered file.

-- One row per aggregate. It is both the version counter for producers and the
-- relay's durable cursor: an aggregate workflow that starts a new run resumes
-- after delivered_version.
CREATE TABLE outbox_aggregates (
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    -- Highest aggregate_version assigned by a committed (or in-flight) insert.
    last_version      bigint      NOT NULL,
    -- Highest version published in order; every version <= it is delivered.
    delivered_version bigint      NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_type, aggregate_id)
);

CREATE TABLE outbox_events (
    -- Message id on the broker and the consumers' deduplication identity.
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type    text        NOT NULL CHECK (aggregate_type ~ '^[A-Za-z0-9_.-]{1,100}$'),
    aggregate_id      text        NOT NULL CHECK (length(aggregate_id) BETWEEN 1 AND 200),
    -- Filled by outbox_assign_version when NULL; see there.
    aggregate_version bigint      NOT NULL CHECK (aggregate_version >= 1),
    event_type        text        NOT NULL CHECK (event_type ~ '^[A-Za-z0-9_.-]{1,100}$'),
    schema_version    integer     NOT NULL DEFAULT 1 CHECK (schema_version >= 1),
    payload           jsonb       NOT NULL,
    -- W3C trace context of the transaction that wrote the event.
    trace_parent      text,
    trace_state       text,
    created_at        timestamptz NOT NULL DEFAULT now(),

    -- Relay bookkeeping. Producers leave these to their defaults.
    status            text        NOT NULL DEFAULT 'pending'
                                  CHECK (status IN ('pending', 'dispatched', 'published')),
    -- Claims so far; counted by the claim itself, so a row that crashes the
    -- relay is still counted.
    attempts          integer     NOT NULL DEFAULT 0,
    -- A pending row is claimable once this is in the past. A claim moves it
    -- forward by the lease; a failed dispatch by a backoff.
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    claimed_by        text,
    dispatched_at     timestamptz,
    published_at      timestamptz,
    last_error        text,

    CONSTRAINT outbox_events_aggregate_version_key
        UNIQUE (aggregate_type, aggregate_id, aggregate_version)
);

-- The claim reads only pending rows, oldest lease first. Delivered rows, the
-- vast majority of a busy table, stay out of this index.
CREATE INDEX outbox_events_pending_idx
    ON outbox_events (next_attempt_at)
    WHERE status = 'pending';

-- Assigns and checks aggregate_version for every insert, from Go or plain SQL.
-- Locking the aggregate's counter row queues concurrent writers of one
-- aggregate until the first commits or rolls back: versions are unique and
-- gap-free, and a rollback gives its version back. Writers of different
-- aggregates never wait for each other.
CREATE FUNCTION outbox_assign_version() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
BEGIN
    INSERT INTO outbox_aggregates (aggregate_type, aggregate_id, last_version, delivered_version)
    VALUES (NEW.aggregate_type, NEW.aggregate_id,
            coalesce(NEW.aggregate_version, 1) - 1, coalesce(NEW.aggregate_version, 1) - 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING;

    SELECT a.last_version INTO last
    FROM outbox_aggregates a
    WHERE a.aggregate_type = NEW.aggregate_type AND a.aggregate_id = NEW.aggregate_id
    FOR UPDATE;

    IF NEW.aggregate_version IS NULL THEN
        NEW.aggregate_version := last + 1;
    ELSIF NEW.aggregate_version <= last THEN
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

    UPDATE outbox_aggregates
    SET last_version = NEW.aggregate_version, updated_at = now()
    WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id;
    RETURN NEW;
END
$$;

CREATE TRIGGER outbox_events_assign_version
    BEFORE INSERT ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outbox_assign_version();

-- Wakes the poller. Statement-level, and PostgreSQL folds identical
-- notifications of one transaction, so a batch insert costs one NOTIFY.
-- A NOTIFY serialises committing transactions (a global lock at commit); a
-- service that writes thousands of events per second can disable this trigger
-- and rely on the poller's poll interval instead.
CREATE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ferry_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
