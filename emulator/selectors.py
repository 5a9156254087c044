"""Label and field selectors as the list and watch query parameters carry them.

Field selectors are limited to the fields the API server indexes for the served kinds
(an unsupported one is a 400, as on a real server, so a test cannot rely on a selector
production would be refused).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from preemptctl.emulator.status import ApiError, bad_request

Predicate = Callable[[Mapping[str, Any]], bool]

_SET_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_FIELDS = {
    "Pod": {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "status.phase",
        "spec.schedulerName",
        "status.nominatedNodeName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "status.podIP",
    },
    "Node": {"metadata.name", "spec.unschedulable"},
    "Namespace": {"metadata.name", "status.phase"},
    "Event": {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.kind",
        "involvedObject.namespace",
        "regarding.name",
        "regarding.uid",
        "reason",
        "type",
        "reportingController",
    },
    "PodDisruptionBudget": {"metadata.name", "metadata.namespace"},
}


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b=c`)."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [term for term in terms if term.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    for op in ("!=", "==", "="):
        if op in term:
            key, value = (part.strip() for part in term.split(op, 1))
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    match = _SET_TERM.match(term)
    if match is None:
        raise bad_request(f"unable to parse requirement: {term.strip()}")
    negated, key, operator, values_text = match.groups()
    if operator:
        values = {value.strip() for value in values_text.split(",") if value.strip()}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if negated:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def label_selector(text: str | None) -> Predicate:
    """A predicate over objects for `labelSelector`."""
    if not text:
        return lambda obj: True
    terms = [_label_term(term) for term in _split_terms(text)]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(term(labels) for term in terms)

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """A field as the server's field-label conversion renders it (missing is "")."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_selector(text: str | None, kind: str) -> Predicate:
    """A predicate over objects for `fieldSelector`; unsupported fields are a 400."""
    if not text:
        return lambda obj: True
    supported = _FIELDS.get(kind, {"metadata.name", "metadata.namespace"})
    terms: list[tuple[str, bool, str]] = []
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                path, value = (part.strip() for part in term.split(op, 1))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        if path not in supported:
            raise _unsupported_field(kind, path)
        terms.append((path, op == "!=", value))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, path) == value) != negated for path, negated, value in terms)

    return matches


def _unsupported_field(kind: str, path: str) -> ApiError:
    return bad_request(f"field label not supported: {path}")
