-- Fencing on a token that cannot repeat: each claim draws a random 64-bit fence, kept on the run
-- with its lease and on the attempt (the same rule as the PostgreSQL store, where attempt ids can
-- repeat after a crash). The attempt's copy tells a retried completion from a late worker.
ALTER TABLE runs ADD COLUMN fence INTEGER;
ALTER TABLE attempts ADD COLUMN fence INTEGER;
