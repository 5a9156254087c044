"""Errors raised for input the planner cannot use; each names the object at fault."""

from __future__ import annotations


class PlannerInputError(ValueError):
    """A snapshot or object the planner cannot read. The message is meant for a person."""


class QuantityError(PlannerInputError):
    """A resource quantity that Kubernetes itself would reject."""


class UnknownPodError(PlannerInputError):
    """The pod asked about is not in the snapshot."""


class UnknownPodGroupError(PlannerInputError):
    """The pod group asked about is not in the snapshot."""
