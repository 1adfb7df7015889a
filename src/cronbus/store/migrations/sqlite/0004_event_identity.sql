-- Event identity is CloudEvents' source + id: the same id from two sources is two events. An
-- id is deduplicated per (topic, id, source) while its event is kept. The id comes first in the
-- key because it is the selective part (sources repeat, ids rarely do): the dedupe probe of an
-- append reads the index by (topic, id) and checks the source from the index entry.
--
-- SQLite cannot drop a table constraint, so the events table is rebuilt (rows in offset order,
-- so rowids keep following offsets).
CREATE TABLE events_0004 (
    topic           TEXT    NOT NULL,
    offset          INTEGER NOT NULL,
    event_id        TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    subject         TEXT,
    time            REAL    NOT NULL,
    datacontenttype TEXT    NOT NULL,
    key             TEXT,
    data            TEXT    NOT NULL,           -- JSON text, as published
    published_at    REAL    NOT NULL,
    PRIMARY KEY (topic, offset),                -- reads: events of a topic after an offset
    UNIQUE (topic, event_id, source)            -- an event (source + id) is stored once per topic
);
INSERT INTO events_0004 (topic, offset, event_id, type, source, subject, time, datacontenttype,
                         key, data, published_at)
SELECT topic, offset, event_id, type, source, subject, time, datacontenttype, key, data,
       published_at
FROM events ORDER BY topic, offset;
DROP TABLE events;
ALTER TABLE events_0004 RENAME TO events;
-- offset_at and retention by age: the last event of a topic published before a time.
CREATE INDEX events_by_time ON events (topic, published_at, offset);

-- A replay past a topic's end used to move the cursor beyond its last offset, so the events
-- published next were skipped. Replays now stop at the end; cursors left beyond it come back.
UPDATE subscriptions SET cursor = coalesce(
    (SELECT last_offset FROM topics t WHERE t.name = subscriptions.topic), 0)
WHERE cursor > coalesce((SELECT last_offset FROM topics t WHERE t.name = subscriptions.topic), 0);
