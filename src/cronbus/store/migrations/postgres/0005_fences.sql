-- Fencing on a token that cannot repeat: each claim draws a random 64-bit fence, kept on the run
-- with its lease and on the attempt. Attempt ids come from a sequence, which can hand a value out
-- again after a crash (claims commit asynchronously); a completion must bring back the fence.
-- The attempt's copy tells a retried completion (an ambiguous commit) from a late worker.
ALTER TABLE runs ADD COLUMN fence bigint;
ALTER TABLE attempts ADD COLUMN fence bigint;
