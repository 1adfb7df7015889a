-- Alerts (issue 14): the rules added through the CLI or the services (the app's code rules are
-- not stored), the state of each alert (a rule holding for a subject), silences, and the
-- history. Rules and destinations are one JSON document per rule (destinations hold secrets:
-- every listing masks them).
CREATE TABLE alert_rules (
    name       TEXT PRIMARY KEY,
    namespace  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body       TEXT NOT NULL,   -- JSON: parameters, repeat, destinations
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX alert_rules_by_namespace ON alert_rules (namespace, name);

-- One row per alert that fires, or whose resolve notice some destination still owes.
CREATE TABLE alert_states (
    namespace      TEXT    NOT NULL,
    rule           TEXT    NOT NULL,
    subject        TEXT    NOT NULL,
    firing         INTEGER NOT NULL,
    since          REAL    NOT NULL,
    message        TEXT    NOT NULL,
    notified_at    REAL,
    notice         TEXT,             -- fired, repeated, resolved
    notice_message TEXT,
    pending        TEXT    NOT NULL, -- JSON array of destination keys still owed the notice
    updated_at     REAL    NOT NULL,
    PRIMARY KEY (namespace, rule, subject)
) WITHOUT ROWID;

CREATE TABLE alert_silences (
    namespace  TEXT NOT NULL,
    rule       TEXT NOT NULL,       -- '*': every rule of the namespace
    until      REAL NOT NULL,
    reason     TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (namespace, rule)
) WITHOUT ROWID;

CREATE TABLE alert_history (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        REAL    NOT NULL,
    namespace TEXT    NOT NULL,
    rule      TEXT    NOT NULL,
    subject   TEXT    NOT NULL,
    kind      TEXT    NOT NULL,     -- fired, repeated, resolved, failed, delivered
    message   TEXT    NOT NULL,
    detail    TEXT
);
CREATE INDEX alert_history_by_namespace ON alert_history (namespace, id);
CREATE INDEX alert_history_by_rule ON alert_history (namespace, rule, id);
CREATE INDEX alert_history_by_time ON alert_history (at);
