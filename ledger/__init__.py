"""The audit ledger: append-only preemption events in Postgres (SQLite for a first run).

One table, `preemption_events`, holds every decision and action as an immutable row; the
database refuses UPDATE, DELETE and TRUNCATE on it. Everything a reader sees (one entry per
attempt, grouped by preemption, one per victim) is folded from those events, never stored
separately, so the ledger cannot disagree with itself. Two more append-only tables sit
beside it: `decision_inputs` (what each decision's planner read, for replay) and
`upstream_preemptions` (what kube-scheduler preempted, seen in shadow mode).

Layers, each a small module:

- `kinds`: the event kinds, whose values are the names stored in the `kind` column.
- `events`: `LedgerEvent`, the frozen value activities build, and `idempotency_key`.
- `models`: the SQLAlchemy table (what the migrations must agree with).
- `errors`: what a caller must tell apart: unavailable (retry as is) or not migrated.
- `engine`: one engine from one URL, for Postgres or the embedded SQLite default.
- `writer`: idempotent appends, sync and async.
- `views`: pure folds from events to the per-attempt, per-preemption and per-victim views.
- `queries`: the reads behind `preemptctl history` and `preemptctl explain`.
- `narrative`: the decision's rationale put into words.
- `inputs`: each decision's planner inputs, compressed (decision_inputs), for `preemptctl
  replay --decision`; retention pruning.
- `upstream`: kube-scheduler's own preemptions (upstream_preemptions), for `preemptctl compare`.
"""
