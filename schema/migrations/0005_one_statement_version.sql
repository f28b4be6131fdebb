-- Assign versions with one statement (issue: benchmark and speed).
--
-- The version trigger of 0001 ran three statements on outbox_aggregates
-- per event: insert-if-missing, SELECT … FOR UPDATE, UPDATE. An event
-- without an explicit version (what package outbox writes) now takes its
-- version with one upsert that increments last_version and returns it. The
-- upsert locks the aggregate's row like the SELECT did, so concurrent
-- writers of one aggregate still queue behind the first until it commits
-- or rolls back: versions stay unique and gap-free, a rollback gives its
-- version back. Explicit versions keep the checked path of 0001.
CREATE OR REPLACE FUNCTION outbox_assign_version() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
BEGIN
    IF NEW.aggregate_version IS NULL THEN
        INSERT INTO outbox_aggregates AS a (aggregate_type, aggregate_id, last_version, delivered_version)
        VALUES (NEW.aggregate_type, NEW.aggregate_id, 1, 0)
        ON CONFLICT (aggregate_type, aggregate_id)
            DO UPDATE SET last_version = a.last_version + 1, updated_at = now()
        RETURNING a.last_version INTO NEW.aggregate_version;
        RETURN NEW;
    END IF;

    INSERT INTO outbox_aggregates (aggregate_type, aggregate_id, last_version, delivered_version)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, NEW.aggregate_version - 1, NEW.aggregate_version - 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING;

    SELECT a.last_version INTO last
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

    UPDATE outbox_aggregates
    SET last_version = NEW.aggregate_version, updated_at = now()
    WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id;
    RETURN NEW;
END
$$;
