-- The publish-first lane (issue: Temporal only for the aggregates that
-- need it). In that lane a relay publishes an aggregate's next events to
-- the broker itself and hands the aggregate to its workflow only when a
-- publish fails, an event needs the workflow (effects, workflow
-- destinations) or an operator repairs it. Who publishes an aggregate is
-- recorded here, never in a process's memory.
--
-- Ownership lives in a table of its own, not on outbox_aggregates:
-- producers hold the counter row's lock for their whole transaction (the
-- version trigger), so a claim that locked it would wait on producers, and
-- an indexed column there would make every version update non-HOT. This
-- table holds only the aggregates someone owns right now: a relay's row
-- is deleted when it has marked what it published (or its lease runs out
-- and the next claim takes it over), a workflow's when its run releases
-- the aggregate (or the reconciler takes it back from a run that ended
-- without releasing). An aggregate without a row belongs to the lane and
-- is free: the next claim takes it.
--
-- owner 'relay': a relay publishes the aggregate directly until
--   lease_until; holder names it. A relay killed mid-publish loses the
--   aggregate when the lease runs out.
-- owner 'workflow': the aggregate's workflow ferry/<type>/<id> publishes
--   it, under epoch; relays hand it new events by signal and publish
--   nothing of it. cause says why (the error class of the failed publish,
--   NeedsWorkflow, Repair); handed_version is the highest version a relay
--   handed to the workflow (handed_at when): a run releases the aggregate
--   only once it delivered that far.
--
-- epoch is a fencing token: every ownership change draws a new one from
-- ferry_owner_epoch (one sequence for all aggregates, so an epoch is never
-- reused, even after its row was deleted), and every claim and every mark
-- of the lane names the epoch it was made under. A write under any other
-- epoch changes nothing: a relay that paused past its lease, or a run
-- that lost the aggregate, cannot mark rows another owner publishes.
CREATE SEQUENCE ferry_owner_epoch;

CREATE TABLE outbox_owners (
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    owner          text        NOT NULL CHECK (owner IN ('relay', 'workflow')),
    epoch          bigint      NOT NULL,
    holder         text,
    lease_until    timestamptz,
    cause          text,
    handed_version bigint      NOT NULL DEFAULT 0,
    handed_at      timestamptz,
    since          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_type, aggregate_id),
    CONSTRAINT outbox_owners_relay_lease CHECK (owner <> 'relay' OR (holder IS NOT NULL AND lease_until IS NOT NULL))
);

-- The epoch a row was published under (NULL: published by the workflow
-- lane, or before this migration). Along an aggregate's versions the
-- epochs never go down; the drift check reports an aggregate where they
-- do (a mark under a stale epoch). Nullable without a default: adding it
-- rewrites nothing.
ALTER TABLE outbox_events ADD COLUMN owner_epoch bigint;

-- The relays of this outbox, so that a fleet runs one lane: a relay of
-- the workflow lane beside one of the publish-first lane would have both
-- publish one aggregate. Every poller and log-tailing relay registers at
-- start, refreshes seen_at while it runs and deletes its row when it
-- stops; a start that finds a relay of the other lane seen recently is
-- refused, naming it.
CREATE TABLE ferry_relays (
    name       text        PRIMARY KEY,
    lane       text        NOT NULL CHECK (lane IN ('workflow', 'publish-first')),
    source     text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
