-- A snapshot that sessions keep failing to start from is set aside (a circuit breaker): its
-- consecutive failed starts, and when it was set aside.
ALTER TABLE snapshots ADD COLUMN boot_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN quarantined_at BIGINT;
