-- Console sessions: the console's cookie holds a random session id, never the API token; the
-- store keeps the sha256 of that id, the token it was opened with, and when it ends. A session
-- ends at `expires_at` (its lifetime, bounded by the token's own expiry), after an idle spell
-- (`last_seen_at`; the length is a setting of the API, checked by the services), at logout
-- (its row is deleted), and when its token is revoked (the revocation deletes the token's rows
-- in its statement; a deleted token takes its sessions with it by the cascade).
CREATE TABLE IF NOT EXISTS console_sessions (
    hash         text             PRIMARY KEY,      -- sha256 hex of the cookie's session id
    token_id     text             NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    created_at   double precision NOT NULL,
    last_seen_at double precision NOT NULL,
    expires_at   double precision NOT NULL
);
-- A revocation deletes a token's sessions; the trim deletes those that ended.
CREATE INDEX IF NOT EXISTS console_sessions_by_token ON console_sessions (token_id);
CREATE INDEX IF NOT EXISTS console_sessions_by_expiry ON console_sessions (expires_at);
