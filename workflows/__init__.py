"""Temporal workflow definitions: deterministic orchestration and state, no I/O."""
