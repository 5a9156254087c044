"""The audit ledger: append-only preemption events in Postgres (SQLite for a first run)."""
