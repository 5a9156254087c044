"""Ledger failures a caller must tell apart: retry later, or fix the setup first."""

from __future__ import annotations


class LedgerError(Exception):
    """Something about the ledger database a person can read and act on."""


class LedgerUnavailableError(LedgerError):
    """The database cannot be reached right now; the same append can be retried as is.

    Activities classify this as retryable: the idempotency key makes the retry safe.
    """


class LedgerNotMigratedError(LedgerError):
    """The database has no ledger schema, or an older one; `preemptctl migrate` fixes it."""


class LedgerPermissionError(LedgerError):
    """The database role lacks a privilege the command needs: fix the grants, not a retry."""
