-- External side effects (issue: effects as workflows with idempotency keys).

-- The e-mail sent-ledger: one row per idempotency key (effect + event +
-- step). SMTP has no idempotency key, so this row is what keeps a retry
-- after a confirmed send from sending again.
--
-- status:
--   pending    nothing accepted yet (a refusal with 4xx, or a failure before
--              the final "."): the next attempt sends
--   sending    a transaction is running until claimed_until; found expired,
--              the worker died mid-send: ambiguous
--   sent       the server answered 250 to the final "."; never sent again
--   ambiguous  the connection was lost after the final "." (RFC 1047): the
--              server may have accepted; policy decides (resend with the same
--              Message-ID, or park for an operator)
--   rejected   5xx: refused for good
--   marked_sent / marked_failed  an operator settled an ambiguous send
CREATE TABLE ferry_email_ledger (
    idempotency_key text        PRIMARY KEY,
    message_id      text        NOT NULL UNIQUE,
    event_id        uuid        NOT NULL,
    effect          text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sending', 'sent', 'ambiguous', 'rejected', 'marked_sent', 'marked_failed')),
    claimed_until   timestamptz,
    -- SMTP transactions started, and those whose outcome was unknown: every
    -- ambiguous one is a possible duplicate at the recipient.
    attempts        integer     NOT NULL DEFAULT 0,
    ambiguous       integer     NOT NULL DEFAULT 0,
    last_reply      text,
    resolved_by     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);

-- Operators list what is undecided; keep that cheap as the ledger grows.
CREATE INDEX ferry_email_ledger_open_idx
    ON ferry_email_ledger (updated_at)
    WHERE status IN ('sending', 'ambiguous');
