-- Event identity is CloudEvents' source + id: the same id from two sources is two events. An
-- id is deduplicated per (topic, id, source) while its event is kept. The id comes first in the
-- key because it is the selective part (sources repeat, ids rarely do): the dedupe probe of an
-- append reads the index by (topic, id) and checks the source from the index entry.
ALTER TABLE events DROP CONSTRAINT events_topic_event_id_key;
ALTER TABLE events ADD CONSTRAINT events_topic_event_id_source_key
    UNIQUE (topic, event_id, source);

-- A replay past a topic's end used to move the cursor beyond its last offset, so the events
-- published next were skipped. Replays now stop at the end; cursors left beyond it come back.
UPDATE subscriptions s SET cursor = coalesce(
    (SELECT t.last_offset FROM topics t WHERE t.name = s.topic), 0)
WHERE s.cursor > coalesce((SELECT t.last_offset FROM topics t WHERE t.name = s.topic), 0);
