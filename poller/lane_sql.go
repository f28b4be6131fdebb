package poller

import (
	"strings"

	"github.com/ferry-outbox/ferry/workflows"
)

// The publish-first lane's statements. Ownership lives in outbox_owners
// (migration 0010 says why it is a table of its own): a relay owns the
// aggregates it publishes directly under a lease and an epoch, a workflow
// the aggregates handed to it. No statement here locks an
// outbox_aggregates row that a producer may hold and then waits for
// another one: producers lock that row for their whole transaction, so a
// statement that waited on one while holding another could deadlock with
// a producer writing two aggregates, and PostgreSQL would abort one of the
// two, perhaps the producer.

// laneCandidates picks the aggregates of a direct claim: the oldest due
// pending rows that are their aggregate's next version (delivered + 1),
// of aggregates that no workflow owns and no live lease holds. Rows that
// are not the next version are passed over, not counted in the LIMIT: an
// aggregate whose next version is out of reach (released with a backoff,
// delayed, held back, quarantined) waits and takes no room from the
// others.
//
// The scan must follow the pending rows' index on next_attempt_at (0001)
// and stop at the LIMIT, so that a claim costs the rows it takes, not the
// backlog. Two things in the obvious form defeat that, and are avoided
// here: a join with outbox_aggregates on version = delivered + 1, whose
// selectivity PostgreSQL cannot estimate (it guessed 50 rows of 20,000,
// so "all of them" looked cheapest: a hash join and a sort of every
// pending row, 60 ms a claim at a 20,000-row backlog, against 1 ms);
// and row_number() under the LIMIT, whose default frame reads every peer
// of the last row (rows of one transaction share next_attempt_at). So the
// next-version check is a correlated lookup by primary key, and the rank
// is numbered over the rows the LIMIT kept. The lookup is a boolean
// subquery (delivered + 1 = version), not a comparison with a subquery
// (version = (SELECT delivered + 1 …)): PostgreSQL gives a comparison with
// an unknown value a selectivity of 0.5 %, so on a backlog of 10,000
// aggregates × 10 events it costed a claim of 200 as reading the whole
// backlog (668,000), and JIT-compiled every claim, 600 ms each against
// 15 ms; a boolean of unknown value gets 50 %, a cost of about 7,000. The
// owner rows a candidate must not have are read once per claim into a hash
// (NOT IN over a subquery, which PostgreSQL keeps as a subplan and hashes,
// where it turns NOT EXISTS into a join): as NOT EXISTS, the bench's
// 100,000-row backlog was planned as a sequential scan of outbox_owners
// for each pending row looked at, 512,000 scans and 50 million owner rows
// read in one drain (pg_stat_user_tables), against 212 scans with the
// hash. The columns are the primary key's, never NULL, so NOT IN means NOT
// EXISTS.
const laneCandidates = `
    SELECT c.aggregate_type, c.aggregate_id, c.delivered_version,
           row_number() OVER (ORDER BY c.next_attempt_at) AS rank
    FROM (
        SELECT e.aggregate_type, e.aggregate_id, e.aggregate_version - 1 AS delivered_version, e.next_attempt_at
        FROM outbox_events e
        WHERE e.status = 'pending' AND e.next_attempt_at <= now()
          AND (SELECT a.delivered_version + 1 = e.aggregate_version FROM outbox_aggregates a
               WHERE a.aggregate_type = e.aggregate_type AND a.aggregate_id = e.aggregate_id)
          AND (e.aggregate_type, e.aggregate_id) NOT IN (SELECT o.aggregate_type, o.aggregate_id FROM outbox_owners o
                                                          WHERE o.owner = 'workflow' OR o.lease_until > now())
        ORDER BY e.next_attempt_at
        LIMIT $1
    ) c`

// laneCandidatesOf is laneCandidates for given aggregates ($6, $7: their
// types and ids), as the log-tailing relay hands them over from the
// stream; $1 is unused but keeps the numbering.
const laneCandidatesOf = `
    SELECT e.aggregate_type, e.aggregate_id, a.delivered_version,
           row_number() OVER () AS rank
    FROM unnest($6::text[], $7::text[]) AS k(t, i)
    JOIN outbox_aggregates a ON a.aggregate_type = k.t AND a.aggregate_id = k.i
    JOIN outbox_events e ON e.aggregate_type = a.aggregate_type AND e.aggregate_id = a.aggregate_id
        AND e.aggregate_version = a.delivered_version + 1
    WHERE e.status = 'pending' AND e.next_attempt_at <= now()
      AND NOT EXISTS (SELECT 1 FROM outbox_owners o
                      WHERE o.aggregate_type = e.aggregate_type AND o.aggregate_id = e.aggregate_id
                        AND (o.owner = 'workflow' OR o.lease_until > now()))
      AND $1::int > 0`

// sqlLaneClaimTemplate takes the candidates' ownership and their runs of
// contiguous versions in one statement:
//
//   - owned: an owner row per candidate, 'relay', with a new epoch and a
//     lease of $2 for this relay ($3), inserted, or taken over from a
//     relay whose lease ran out (counted in takeovers: migration 0014);
//     a workflow's row and a live lease are never taken (ON CONFLICT …
//     WHERE). Inserted in key order, so two relays claiming overlapping
//     aggregates lock owner rows in the same order and never deadlock.
//   - run: the owned aggregates' pending due rows from delivered + 1 up to
//     $4 versions, locked SKIP LOCKED; a row's version minus its rank is
//     the delivered version exactly while the versions are contiguous, so
//     the run stops at the first version that is missing, not due or
//     locked, and nothing after it is taken. The lock (not a write: no new
//     row version, no index entry) is what makes the statement see rows as
//     they are now rather than as its snapshot had them: a relay that
//     marked and gave the aggregate up between this statement's snapshot
//     and its insert of the owner row has published those rows, and the
//     lock's recheck finds them published.
//   - claimed: the run's rows, at most $5 in all (the first candidates'
//     runs whole, the last one's cut after a version: still a contiguous
//     prefix). The rows themselves are not written: the owner row's lease
//     keeps every other relay off them (the candidates skip aggregates
//     under a live lease), so a row is written once, by its mark, and a
//     relay that dies leaves nothing to wait out but the owner row's
//     lease. claimed_by and published_at are set by the mark.
//
// The result has a line per owned aggregate, with its epoch and no row,
// and a line per claimed row, with its aggregate and no epoch: a union,
// not a join, because the planner, which knows nothing of the CTEs'
// sizes, joins them by nested loop, aggregates × rows comparisons (400,000
// for a claim of 200 aggregates × 10 rows, most of the statement's time
// once PostgreSQL chose a generic plan for it). An aggregate whose run is
// empty (its next version was locked or just published by the relay it
// took over from) has no row line, and the relay releases it at once.
const sqlLaneClaimTemplate = `
WITH next AS (CANDIDATES
), owned AS (
    INSERT INTO outbox_owners AS o (aggregate_type, aggregate_id, owner, epoch, holder, lease_until)
    SELECT aggregate_type, aggregate_id, 'relay', nextval('ferry_owner_epoch'), $3, now() + $2::interval
    FROM next ORDER BY aggregate_type, aggregate_id
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE
        SET epoch = EXCLUDED.epoch, holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until,
            cause = NULL, since = now(), takeovers = o.takeovers + 1
        WHERE o.owner = 'relay' AND o.lease_until <= now()
    RETURNING o.aggregate_type, o.aggregate_id, o.epoch, o.takeovers
), run AS (
    SELECT r.id, w.aggregate_type, w.aggregate_id, n.rank, r.aggregate_version, r.event_type,
           r.trace_parent, r.trace_state, r.attempts,
           r.aggregate_version - row_number() OVER (PARTITION BY w.aggregate_type, w.aggregate_id
                                                   ORDER BY r.aggregate_version) = n.delivered_version AS contiguous
    FROM owned w
    JOIN next n ON n.aggregate_type = w.aggregate_type AND n.aggregate_id = w.aggregate_id
    CROSS JOIN LATERAL (
        SELECT e.id, e.aggregate_version, e.event_type, e.trace_parent, e.trace_state, e.attempts
        FROM outbox_events e
        WHERE e.aggregate_type = w.aggregate_type AND e.aggregate_id = w.aggregate_id
          AND e.aggregate_version > n.delivered_version AND e.aggregate_version <= n.delivered_version + $4
          AND e.status = 'pending' AND e.next_attempt_at <= now()
        ORDER BY e.aggregate_version
        FOR UPDATE SKIP LOCKED
    ) r
), claimed AS (
    SELECT * FROM run WHERE contiguous ORDER BY rank, aggregate_version LIMIT $5
)
SELECT w.aggregate_type, w.aggregate_id, w.epoch, w.takeovers, '', 0::bigint, '', '', '', 0
FROM owned w
UNION ALL
SELECT c.aggregate_type, c.aggregate_id, 0::bigint, 0, c.id::text, c.aggregate_version,
       c.event_type, coalesce(c.trace_parent, ''), coalesce(c.trace_state, ''), c.attempts
FROM claimed c`

var (
	sqlLaneClaim   = strings.Replace(sqlLaneClaimTemplate, "CANDIDATES", laneCandidates, 1)
	sqlLaneClaimOf = strings.Replace(sqlLaneClaimTemplate, "CANDIDATES", laneCandidatesOf, 1)
)

// sqlLaneMarkTemplate settles a direct claim, per aggregate ($1-$8: type,
// id, the epoch it was claimed under, the highest version the broker
// confirmed or 0, whether to hand it to its workflow, why, the highest
// version handed, and the lowest version confirmed or 0), in one
// statement, so ownership changes in the transaction of the marks it
// belongs to:
//
//   - cur locks the outbox_aggregates rows whose cursor moves, SKIP
//     LOCKED (LOCKING): a row a producer holds is not waited for here;
//     the caller settles that aggregate on its own (LOCKING empty: the
//     statement waits, locking one row). See the file comment for why.
//   - released: the relay's owner rows under their epochs are deleted;
//     the aggregates are free for the next claim.
//   - handed: or they become their workflow's, under a new epoch, with
//     handed_at NULL until the workflow side starts the run; due: the rows
//     from the failure on ($12: few, so a list is no cost) are due now, for
//     it to take at once.
//   - ev, back: the confirmed rows are published under the relay's epoch;
//     the rows of a broker-wide failure ($11) return after $9 with $10 as
//     their last_error. Both count the publish in attempts: the claim does
//     not write the rows, so the mark is where a direct attempt is
//     counted (a row published at its first attempt reads 1, as in the
//     workflow lane). Only rows of aggregates still the relay's. The
//     confirmed rows are an aggregate's versions from the lowest to the
//     highest confirmed, contiguous as the claim took them: ev finds them
//     by that range of the version index, not by their ids, since a list
//     of ids as a parameter is searched row by row, 2,000 × 2,000
//     comparisons for a mark of 200 aggregates × 10 rows, once PostgreSQL
//     chose a generic plan for the statement.
//   - moved: the cursor goes to the highest confirmed version; more says
//     whether later versions were written (perhaps not committed yet).
//
// A line per aggregate says what happened: ok, locked (not settled: its
// counter row was busy) or fenced (refused: not the relay's under that
// epoch any more; its marks were not made).
const sqlLaneMarkTemplate = `
WITH k AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::boolean[], $6::text[], $7::bigint[], $8::bigint[])
        AS k(t, i, epoch, upto, handoff, cause, handed, lo)
), cur AS (
    SELECT a.aggregate_type, a.aggregate_id FROM outbox_aggregates a
    JOIN k ON a.aggregate_type = k.t AND a.aggregate_id = k.i AND k.upto > 0
    ORDER BY a.aggregate_type, a.aggregate_id
    FOR UPDATE OF a LOCKING
), go AS (
    SELECT k.* FROM k
    WHERE k.upto = 0 OR EXISTS (SELECT 1 FROM cur WHERE cur.aggregate_type = k.t AND cur.aggregate_id = k.i)
), released AS (
    DELETE FROM outbox_owners o USING go
    WHERE o.aggregate_type = go.t AND o.aggregate_id = go.i AND o.owner = 'relay' AND o.epoch = go.epoch
      AND NOT go.handoff
    RETURNING o.aggregate_type, o.aggregate_id, o.epoch, 0::bigint AS new_epoch
), handed AS (
    UPDATE outbox_owners o
    SET owner = 'workflow', epoch = nextval('ferry_owner_epoch'), holder = NULL, lease_until = NULL,
        cause = go.cause, handed_version = go.handed, handed_at = NULL, since = now()
    FROM go
    WHERE o.aggregate_type = go.t AND o.aggregate_id = go.i AND o.owner = 'relay' AND o.epoch = go.epoch
      AND go.handoff
    RETURNING o.aggregate_type, o.aggregate_id, go.epoch, o.epoch AS new_epoch
), mine AS (
    SELECT * FROM released UNION ALL SELECT * FROM handed
), ev AS (
    UPDATE outbox_events e
    SET status = 'published', published_at = now(), attempts = e.attempts + 1,
        last_error = NULL, last_error_class = NULL, owner_epoch = m.epoch, claimed_by = $13
    FROM mine m JOIN k ON k.t = m.aggregate_type AND k.i = m.aggregate_id
    WHERE e.aggregate_type = m.aggregate_type AND e.aggregate_id = m.aggregate_id
      AND k.upto > 0 AND e.aggregate_version BETWEEN k.lo AND k.upto AND e.status = 'pending'
    RETURNING 1
), back AS (
    UPDATE outbox_events e
    SET next_attempt_at = now() + $9::interval, attempts = e.attempts + 1, last_error = $10, last_error_class = '` + ClassBroker + `'
    FROM mine m
    WHERE e.id = ANY($11::uuid[]) AND e.aggregate_type = m.aggregate_type AND e.aggregate_id = m.aggregate_id
      AND e.status = 'pending'
    RETURNING 1
), due AS (
    UPDATE outbox_events e
    SET next_attempt_at = now()
    FROM handed h
    WHERE e.id = ANY($12::uuid[]) AND e.aggregate_type = h.aggregate_type AND e.aggregate_id = h.aggregate_id
      AND e.status = 'pending'
    RETURNING 1
), moved AS (
    UPDATE outbox_aggregates a
    SET delivered_version = greatest(a.delivered_version, k.upto), updated_at = now()
    FROM mine m JOIN k ON k.t = m.aggregate_type AND k.i = m.aggregate_id
    WHERE a.aggregate_type = m.aggregate_type AND a.aggregate_id = m.aggregate_id AND k.upto > 0
    RETURNING a.aggregate_type, a.aggregate_id, a.last_version > a.delivered_version AS more
)
SELECT k.t, k.i,
       CASE WHEN m.aggregate_type IS NOT NULL THEN 'ok' WHEN g.t IS NULL THEN 'locked' ELSE 'fenced' END,
       coalesce(m.new_epoch, 0), coalesce(mv.more, false),
       (SELECT count(*) FROM ev), (SELECT count(*) FROM back) + (SELECT count(*) FROM due)
FROM k
LEFT JOIN go g ON g.t = k.t AND g.i = k.i
LEFT JOIN mine m ON m.aggregate_type = k.t AND m.aggregate_id = k.i
LEFT JOIN moved mv ON mv.aggregate_type = k.t AND mv.aggregate_id = k.i`

var (
	sqlLaneMark     = strings.Replace(sqlLaneMarkTemplate, "LOCKING", "SKIP LOCKED", 1)
	sqlLaneMarkWait = strings.Replace(sqlLaneMarkTemplate, "LOCKING", "", 1)
)

// Results of sqlLaneMark per aggregate.
const (
	markOK     = "ok"
	markLocked = "locked"
	markFenced = "fenced"
)

// sqlOwnedClaimTemplate is the claim of the aggregates workflows own: their
// pending due rows above the cursor, oldest first, $1 of them, for the
// relay to hand to the run (by a start when the aggregate was just handed
// over, handed_at still NULL: first; by signal otherwise). Each owner row is locked with its
// rows (SKIP LOCKED: a run releasing it, or another relay handing it
// rows, is not waited for) and its handed_version raised to the highest
// version handed: a run releases the aggregate only once it delivered
// that far, so a version handed while it looked is never stranded. The
// rows are leased as every claim leases them.
const sqlOwnedClaimTemplate = `
WITH picked AS (
    SELECT e.id, o.aggregate_type, o.aggregate_id, o.epoch, e.aggregate_version,
           o.handed_at IS NULL AS first, coalesce(o.cause, '') AS cause
    FROM OWNERS
    JOIN outbox_aggregates a ON a.aggregate_type = o.aggregate_type AND a.aggregate_id = o.aggregate_id
    JOIN outbox_events e ON e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
        AND e.aggregate_version > a.delivered_version
    WHERE o.owner = 'workflow' AND e.status = 'pending' AND e.next_attempt_at <= now()
    ORDER BY e.next_attempt_at
    LIMIT $1
    FOR UPDATE OF e, o SKIP LOCKED
), handed AS (
    UPDATE outbox_owners o SET handed_version = greatest(o.handed_version, p.top), handed_at = now()
    FROM (SELECT aggregate_type, aggregate_id, epoch, max(aggregate_version) AS top FROM picked GROUP BY 1, 2, 3) p
    WHERE o.aggregate_type = p.aggregate_type AND o.aggregate_id = p.aggregate_id AND o.epoch = p.epoch
    RETURNING o.aggregate_type, o.aggregate_id
)
UPDATE outbox_events e
SET attempts = e.attempts + 1, next_attempt_at = now() + $2::interval, claimed_by = $3
FROM picked p JOIN handed h ON h.aggregate_type = p.aggregate_type AND h.aggregate_id = p.aggregate_id
WHERE e.id = p.id
RETURNING e.id::text, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type,
    coalesce(e.trace_parent, ''), coalesce(e.trace_state, ''), e.attempts, p.epoch, p.first, p.cause`

var (
	sqlOwnedClaim   = strings.Replace(sqlOwnedClaimTemplate, "OWNERS", "outbox_owners o", 1)
	sqlOwnedClaimOf = strings.Replace(sqlOwnedClaimTemplate, "OWNERS",
		"unnest($4::text[], $5::text[]) AS k(t, i) JOIN outbox_owners o ON o.aggregate_type = k.t AND o.aggregate_id = k.i", 1)
)

// sqlMarkDispatchedOwned is sqlMarkDispatched for rows handed to a
// workflow that owns their aggregate: only while it owns it under the
// epoch they were handed under ($2, per row).
const sqlMarkDispatchedOwned = `
UPDATE outbox_events e SET status = 'dispatched', dispatched_at = now(), last_error = NULL, last_error_class = NULL
FROM unnest($1::uuid[], $2::bigint[]) AS k(id, epoch)
JOIN outbox_owners o ON o.owner = 'workflow' AND o.epoch = k.epoch
WHERE e.id = k.id AND o.aggregate_type = e.aggregate_type AND o.aggregate_id = e.aggregate_id
  AND e.status = 'pending' AND coalesce(e.last_error, '') NOT LIKE '` + workflows.HeldPrefix + `%'`

// sqlReleaseOwners drops relay owner rows ($1-$3: type, id, epoch) that
// took no rows: the aggregate's next version was out of reach after all.
const sqlReleaseOwners = `
DELETE FROM outbox_owners o
USING unnest($1::text[], $2::text[], $3::bigint[]) AS k(t, i, epoch)
WHERE o.aggregate_type = k.t AND o.aggregate_id = k.i AND o.owner = 'relay' AND o.epoch = k.epoch`
