-- The admin tables of the HTTP API and the services: namespaces, API tokens, the audit log,
-- idempotency claims of requests, and bulk operations. Times are epoch seconds, JSON is text.

-- The namespaces that exist. Rows elsewhere name theirs (`namespace` columns, 0006); the
-- store refuses to delete one still in use, and `default` always exists.
CREATE TABLE namespaces (
    name       TEXT PRIMARY KEY,
    created_at REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO namespaces (name, created_at)
VALUES ('default', CAST(strftime('%s', 'now') AS REAL));

-- Tokens are stored as the sha256 of their text, never in clear; the id is the public part.
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,              -- every request looks a token up by it
    scope        TEXT NOT NULL,                     -- read, write or admin
    namespaces   TEXT NOT NULL,                     -- JSON list of names; ["*"]: all
    created_at   REAL NOT NULL,
    expires_at   REAL,
    revoked_at   REAL,
    last_used_at REAL,
    created_by   TEXT NOT NULL
);

-- Append-only; AUTOINCREMENT so an id is never given twice (ids are the listing's cursor).
CREATE TABLE audit (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        REAL    NOT NULL,
    actor     TEXT    NOT NULL,
    namespace TEXT,                                 -- NULL: no namespace (tokens, namespaces)
    action    TEXT    NOT NULL,
    resource  TEXT    NOT NULL,
    detail    TEXT    NOT NULL                      -- JSON object
);
-- A namespace's entries newest first, from any point (keyset by id).
CREATE INDEX audit_by_namespace ON audit (namespace, id);

-- One row per (token, route, key): the insert decides who owns a key. Status 0: in progress.
CREATE TABLE idempotency (
    token_id   TEXT    NOT NULL,
    route      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    body_hash  TEXT    NOT NULL,
    status     INTEGER NOT NULL DEFAULT 0,
    response   TEXT,                                -- JSON; NULL while in progress
    created_at REAL    NOT NULL,
    PRIMARY KEY (token_id, route, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_by_age ON idempotency (created_at);

CREATE TABLE operations (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    request    TEXT    NOT NULL,                    -- JSON, as asked
    state      TEXT    NOT NULL,
    total      INTEGER NOT NULL DEFAULT 0,
    done       INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0,
    error      TEXT,
    created_by TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    updated_at REAL    NOT NULL
);
CREATE INDEX operations_by_namespace ON operations (namespace, id);
