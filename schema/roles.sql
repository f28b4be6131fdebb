-- Least-privilege roles for Ferry. Run with psql, as the owner of Ferry's
-- tables (whoever ran `ferry migrate`) or a superuser, after `ferry migrate`
-- and again after every upgrade (it is idempotent):
--
--   psql "$ADMIN_URL" -v ON_ERROR_STOP=1 \
--        -v schema=public \
--        -v producer=ferry_producer -v relay=ferry_relay \
--        -v consumer=ferry_consumer -v consumer_schema=ferry_consumer \
--        -f schema/roles.sql
--
-- It creates three NOLOGIN group roles and grants them what their part of
-- Ferry needs, nothing more. Give them to login roles of your own, with
-- passwords (or certificates) you manage:
--
--   CREATE ROLE orders_service LOGIN PASSWORD '…' IN ROLE ferry_producer;
--   CREATE ROLE ferry LOGIN PASSWORD '…' IN ROLE ferry_relay;
--
-- producer  a service writing events: INSERT into outbox_events, and read
--           back only the id and the assigned version (RETURNING). It cannot
--           read payloads, change or delete rows, or touch the version
--           counters directly.
-- relay     `ferry run`, `ferry poller`, `ferry worker`: read the outbox and
--           update its bookkeeping columns and the delivered version; apply
--           repairs (the worker patches a quarantined event's payload and
--           schema version on an operator's request, and appends the audit
--           row to ferry_repairs); delete delivered rows past retention, through
--           ferry_delete_delivered only. It cannot insert or delete events, change
--           their identity, type or order, or rewrite the audit trail.
-- consumer  owns the schema :consumer_schema, where it creates its inbox
--           (package inbox) and business tables; no access to the outbox.
--
-- The version trigger: a producer's INSERT fires outbox_assign_version(),
-- which locks, inserts and updates the aggregate's row in
-- outbox_aggregates. Rather than granting producers those rights on the
-- table (they could then move delivered_version and make the relay skip
-- events), the function runs as its owner (SECURITY DEFINER) with a fixed
-- search_path, so it can only touch the tables of this schema, and a
-- producer can reach outbox_aggregates only through it.

\set ON_ERROR_STOP on

-- Roles are cluster-wide: create each one once.
SELECT format('CREATE ROLE %I NOLOGIN', r)
FROM unnest(ARRAY[:'producer', :'relay', :'consumer']) AS r
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r)
\gexec

BEGIN;

ALTER FUNCTION :"schema".outbox_assign_version()
    SECURITY DEFINER SET search_path = :"schema", pg_temp;
-- A trigger function cannot be called directly; this also keeps it out of
-- reach should that ever change.
REVOKE ALL ON FUNCTION :"schema".outbox_assign_version() FROM PUBLIC;

-- Retention deletes delivered rows past their age through this function
-- only (migration 0015): the relay may not delete events otherwise.
ALTER FUNCTION :"schema".ferry_delete_delivered(interval, integer)
    SECURITY DEFINER SET search_path = :"schema", pg_temp;
REVOKE ALL ON FUNCTION :"schema".ferry_delete_delivered(interval, integer) FROM PUBLIC;

-- Start from nothing, so a re-run also takes back what an older version of
-- this script granted.
REVOKE ALL ON ALL TABLES IN SCHEMA :"schema" FROM :"producer", :"relay", :"consumer";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA :"schema" FROM :"producer", :"relay", :"consumer";
REVOKE ALL ON SCHEMA :"schema" FROM :"producer", :"relay", :"consumer";

GRANT USAGE ON SCHEMA :"schema" TO :"producer", :"relay";

-- producer
GRANT INSERT ON :"schema".outbox_events TO :"producer";
-- outbox.Writer returns the id and the assigned version (RETURNING needs
-- SELECT on the returned columns). Only these two: no payloads.
GRANT SELECT (id, aggregate_version) ON :"schema".outbox_events TO :"producer";

-- relay
GRANT SELECT ON :"schema".outbox_events, :"schema".outbox_aggregates TO :"relay";
-- The relay's bookkeeping, and the two columns a repair may patch (payload,
-- schema_version: audited in ferry_repairs). Never an event's identity,
-- aggregate, version or type.
GRANT UPDATE (status, attempts, next_attempt_at, claimed_by, dispatched_at, published_at, last_error,
              last_error_class, payload, schema_version, owner_epoch)
    ON :"schema".outbox_events TO :"relay";
GRANT UPDATE (delivered_version, updated_at) ON :"schema".outbox_aggregates TO :"relay";
-- The publish-first lane: who owns an aggregate (taken, handed over,
-- released, taken back), its epochs, and the relays' registry.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".outbox_owners, :"schema".ferry_relays TO :"relay";
GRANT USAGE ON SEQUENCE :"schema".ferry_owner_epoch TO :"relay";
GRANT EXECUTE ON FUNCTION :"schema".ferry_delete_delivered(interval, integer) TO :"relay";
-- The audit trail: append and read, never update or delete.
GRANT SELECT, INSERT ON :"schema".ferry_repairs TO :"relay";
-- The maintenance record: a retention run writes what it found and whether
-- it finished; /metrics reads it (ferry_retention_* series).
GRANT SELECT, UPDATE ON :"schema".ferry_maintenance TO :"relay";
-- The e-mail effect's sent-ledger (the worker sends e-mails): rows are
-- claimed and settled, never deleted.
GRANT SELECT, INSERT, UPDATE ON :"schema".ferry_email_ledger TO :"relay";

COMMIT;

-- consumer: a schema of its own, which it owns outright.
SELECT format('CREATE SCHEMA %I AUTHORIZATION %I', :'consumer_schema', :'consumer')
WHERE NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = :'consumer_schema')
\gexec
ALTER SCHEMA :"consumer_schema" OWNER TO :"consumer";
