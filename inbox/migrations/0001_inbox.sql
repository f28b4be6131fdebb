-- Ferry inbox, version 1: the consumer side. These tables may live in the
-- outbox's database or in another one; they never reference outbox tables.
-- Never edit an applied migration: add a new numbered file.

-- One row per event a consumer has applied. The primary key is the
-- deduplication: a second delivery of the same event (same message_id)
-- conflicts with it, in the same transaction as the consumer's own writes,
-- so an effect commits at most once per consumer. Rows are deleted after the
-- retention period by inbox.Cleaner.
CREATE TABLE inbox_processed_events (
    consumer_name     text        NOT NULL,
    event_id          text        NOT NULL CHECK (length(event_id) BETWEEN 1 AND 200),
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    event_type        text        NOT NULL,
    processed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, event_id)
);

-- The cleaner deletes the oldest rows of one consumer in bounded batches.
CREATE INDEX inbox_processed_events_retention_idx
    ON inbox_processed_events (consumer_name, processed_at);

-- The highest aggregate_version each consumer applied, per aggregate: the
-- ordering policy compares every delivery with it, under a row lock, in the
-- same transaction that applies the event. Kept for good (one small row per
-- aggregate): it still recognises a stale redelivery after the event's
-- inbox_processed_events row has passed its retention.
CREATE TABLE inbox_aggregates (
    consumer_name  text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    last_version   bigint      NOT NULL,
    last_event_id  text,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, aggregate_type, aggregate_id)
);
