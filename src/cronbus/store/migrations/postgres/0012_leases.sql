-- Role leases (one process of the cluster at a time applies retention, evaluates alerts,
-- computes the shared figures) and the snapshots their holders write for every process to read.
CREATE TABLE role_leases (
    name       text             PRIMARY KEY,
    holder     text             NOT NULL,
    expires_at double precision NOT NULL
);

CREATE TABLE snapshots (
    key      text             PRIMARY KEY,
    taken_at double precision NOT NULL,
    body     text             NOT NULL
);
