-- Poison events and their repair (issue: quarantine, repair, replay).

-- quarantined: the aggregate workflow gave up publishing the event and holds
--   the aggregate until an operator repairs it (or a skip policy applies).
-- skipped: an operator (or a skip policy) decided the event is not published;
--   the aggregate moved past it.
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_status_check;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_status_check
    CHECK (status IN ('pending', 'dispatched', 'published', 'quarantined', 'skipped'));

-- Operators list what is stuck; keep that cheap however large the table is.
CREATE INDEX outbox_events_quarantined_idx
    ON outbox_events (created_at)
    WHERE status = 'quarantined';

-- Every repair and replay, append-only. request_id makes a repeated request
-- a no-op, however often it is sent.
CREATE TABLE ferry_repairs (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id      text        NOT NULL UNIQUE,
    at              timestamptz NOT NULL DEFAULT now(),
    actor           text        NOT NULL CHECK (actor <> ''),
    action          text        NOT NULL CHECK (action IN ('retry', 'skip', 'patch', 'replay', 'policy-skip')),
    event_id        uuid        NOT NULL,
    aggregate_type  text        NOT NULL,
    aggregate_id    text        NOT NULL,
    aggregate_version bigint    NOT NULL,
    reason          text        NOT NULL CHECK (reason <> ''),
    -- SHA-256 of the payload (as stored, jsonb text form) before and after
    -- the repair; equal unless the action is patch.
    payload_sha256_before text  NOT NULL,
    payload_sha256_after  text  NOT NULL,
    schema_version_before integer NOT NULL,
    schema_version_after  integer NOT NULL
);

CREATE INDEX ferry_repairs_event_idx ON ferry_repairs (event_id);

CREATE FUNCTION ferry_repairs_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ferry_repairs is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER ferry_repairs_append_only
    BEFORE UPDATE OR DELETE ON ferry_repairs
    FOR EACH ROW EXECUTE FUNCTION ferry_repairs_append_only();
