-- What Ferry's maintenance runs last achieved, for /metrics (issue:
-- operations proven; alert FerryRetentionStalled).
--
-- A retention run that fails, waits on a lock, or never starts (no worker,
-- the schedule paused or deleted) deletes nothing, and nothing said so:
-- delivered rows past --retention pile up unseen. The retention activity
-- writes here what it found and whether it finished; every process's
-- /metrics reads the one row at scrape time (a primary-key lookup), so all
-- of them report the same figures, and a restart forgets nothing.
--
-- Rows past retention are counted by the run, not by the scrape: published_at
-- has no index (an index on delivered rows would cost every publish), so the
-- count reads the whole table. Once per run (hourly) that is affordable;
-- once per scrape it is not.
--
-- One row per job; today only 'retention'.
--   since         when this record began (this migration): the baseline of
--                 "no run has succeeded yet", so that a retention that never
--                 once succeeds still ages.
--   succeeded_at  end of the last run that finished without error.
--   overdue_rows  delivered rows past the run's RowAge, counted at the start
--                 of the last run (NULL until a run has counted); set to 0 by
--                 a run that finished, since it deleted them.
--   counted_at    when overdue_rows was counted.
CREATE TABLE ferry_maintenance (
    job          text        PRIMARY KEY,
    since        timestamptz NOT NULL DEFAULT now(),
    succeeded_at timestamptz,
    overdue_rows bigint      CHECK (overdue_rows >= 0),
    counted_at   timestamptz
);

INSERT INTO ferry_maintenance (job) VALUES ('retention');
