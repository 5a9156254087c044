"""Errors a user caused and can fix; the CLI prints them as one line and exits 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: an unreadable file, an unknown pod, a malformed flag value."""
