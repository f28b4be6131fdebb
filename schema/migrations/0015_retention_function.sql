-- Retention under least-privilege roles (issue: alerts proven; the
-- retention-stalled test found it): schema/roles.sql gives the relay role
-- no DELETE on outbox_events, so that it can never delete an event, and
-- retention, which the workers run as that role, failed every time
-- ("permission denied for table outbox_events").
--
-- Retention now deletes through this function, which deletes only what
-- retention may: delivered rows (published or skipped) older than age, at
-- most lim of them per call. roles.sql makes it SECURITY DEFINER with a
-- fixed search_path and grants the relay role EXECUTE on it, as for the
-- version trigger: the relay still cannot delete a pending, dispatched or
-- quarantined event, nor a delivered one that is not past retention.
-- Without roles.sql (one role for everything) it runs as its caller, as
-- the DELETE did.
CREATE FUNCTION ferry_delete_delivered(age interval, lim integer) RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM outbox_events
        WHERE id IN (
            SELECT id FROM outbox_events
            WHERE status IN ('published', 'skipped')
              AND coalesce(published_at, created_at) < now() - age
            LIMIT lim)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
