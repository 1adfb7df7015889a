-- Role leases (one process of the cluster at a time applies retention, evaluates alerts,
-- computes the shared figures) and the snapshots their holders write for every process to read.
CREATE TABLE role_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at REAL NOT NULL
);

CREATE TABLE snapshots (
    key      TEXT PRIMARY KEY,
    taken_at REAL NOT NULL,
    body     TEXT NOT NULL
);
