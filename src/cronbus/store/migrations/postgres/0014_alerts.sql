-- Alerts (issue 14): the rules added through the CLI or the services (the app's code rules are
-- not stored), the state of each alert (a rule holding for a subject), silences, and the
-- history. Times are epoch seconds. Rules and destinations are one JSON document per rule
-- (destinations hold secrets: every listing masks them).
CREATE TABLE alert_rules (
    name       text             PRIMARY KEY,
    namespace  text             NOT NULL,
    kind       text             NOT NULL,
    body       jsonb            NOT NULL,  -- parameters, repeat, destinations
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);
CREATE INDEX alert_rules_by_namespace ON alert_rules (namespace, name);

-- One row per alert that fires, or whose resolve notice some destination still owes.
CREATE TABLE alert_states (
    namespace      text             NOT NULL,
    rule           text             NOT NULL,
    subject        text             NOT NULL,
    firing         boolean          NOT NULL,
    since          double precision NOT NULL,
    message        text             NOT NULL,
    notified_at    double precision,
    notice         text,               -- fired, repeated, resolved
    notice_message text,
    pending        text[]           NOT NULL,  -- destination keys still owed the notice
    updated_at     double precision NOT NULL,
    PRIMARY KEY (namespace, rule, subject)
);

CREATE TABLE alert_silences (
    namespace  text             NOT NULL,
    rule       text             NOT NULL,  -- '*': every rule of the namespace
    until      double precision NOT NULL,
    reason     text,
    created_at double precision NOT NULL,
    PRIMARY KEY (namespace, rule)
);

CREATE TABLE alert_history (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        double precision NOT NULL,
    namespace text             NOT NULL,
    rule      text             NOT NULL,
    subject   text             NOT NULL,
    kind      text             NOT NULL,  -- fired, repeated, resolved, failed, delivered
    message   text             NOT NULL,
    detail    text
);
CREATE INDEX alert_history_by_namespace ON alert_history (namespace, id);
CREATE INDEX alert_history_by_rule ON alert_history (namespace, rule, id);
CREATE INDEX alert_history_by_time ON alert_history (at);
