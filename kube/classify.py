"""From what the client raised to a `KubeCallError`: the one place that decides retryability.

Reads the `Status` body the API server sends with every failure (reason, message,
details.retryAfterSeconds) rather than the HTTP reason phrase, and the Retry-After header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from preemptctl.kube.results import (
    ErrorKind,
    KubeCallError,
    PermissionDenied,
    Rejected,
    Retryable,
)


@dataclass(frozen=True, slots=True)
class Call:
    """What was being attempted, for messages: `delete` `pods` `default/web-1`."""

    verb: str
    resource: str  # as RBAC names it: "pods", "pods/status", "pods/eviction", "events"
    target: str
    group: str = ""

    def describe(self) -> str:
        return f"{self.verb} {self.resource} {self.target}"


@dataclass(frozen=True, slots=True)
class ApiStatus:
    """The parts of a failure response the gateway decides on."""

    code: int
    reason: str
    message: str
    retry_after: float | None


def api_status(error: ApiException) -> ApiStatus:
    body: Any = None
    raw = error.body
    if raw:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
    if not isinstance(body, dict):
        body = {}
    retry_after: float | None = None
    header = (error.headers or {}).get("Retry-After") if error.headers else None
    if header:
        try:
            retry_after = float(header)
        except ValueError:
            retry_after = None
    details = body.get("details") or {}
    if retry_after is None and details.get("retryAfterSeconds"):
        retry_after = float(details["retryAfterSeconds"])
    message = str(body.get("message") or raw or error.reason or "")
    causes = details.get("causes") or []
    cause_text = "; ".join(str(c.get("message")) for c in causes if c.get("message"))
    if cause_text and cause_text not in message:
        message = f"{message} ({cause_text})"
    return ApiStatus(
        code=int(error.status or 0),
        reason=str(body.get("reason") or error.reason or ""),
        message=message,
        retry_after=retry_after,
    )


def is_uid_precondition_conflict(status: ApiStatus) -> bool:
    """A 409 that says the object is another one than the UID we pinned: worded by
    `rest.BeforeDelete` ("the UID in the precondition (...) does not match the UID in record")
    or, when the pod changed between that check and the write, by storage ("Precondition
    failed: UID in precondition: ..."). A patch naming another UID is answered otherwise
    (`is_uid_mismatch_refusal`)."""
    return status.code == 409 and (
        "UID in the precondition" in status.message or "UID in precondition" in status.message
    )


def is_uid_mismatch_refusal(status: ApiStatus) -> bool:
    """A 422 refusing a patch or a server-side apply whose `metadata.uid` is not the
    object's: how kube-apiserver answers a write that names a pod replaced since it was read
    (`metadata.uid: Invalid value: "<uid sent>": field is immutable`). Unlike a refused
    delete precondition, it names only the UID sent, not the one the object has now."""
    return (
        status.code == 422
        and "metadata.uid" in status.message
        and "field is immutable" in status.message
    )


# The object's current UID as each wording names it: `rest.BeforeDelete`'s "... does not
# match the UID in record (Y)" and storage's `Preconditions.Check`, "Precondition failed: UID
# in precondition: X, UID in object meta: Y".
_CURRENT_UID = (
    re.compile(r"the UID in record \(([^()\s]+)\)"),
    re.compile(r"UID in object meta: ([^\s,;()]+)"),
)


def replacement_uid(status: ApiStatus) -> str | None:
    """The UID of the object that now has the name, read from a refused UID precondition's
    message; None when the answer does not name it (an empty UID names nothing)."""
    for pattern in _CURRENT_UID:
        found = pattern.search(status.message)
        if found is not None:
            return found.group(1)
    return None


def classify(error: BaseException, call: Call) -> KubeCallError:
    """The `KubeCallError` for any failure of a call (API answer or transport)."""
    if isinstance(error, KubeCallError):
        return error
    if isinstance(error, ApiException):
        return classify_status(api_status(error), call)
    # urllib3's NewConnectionError (connection refused) subclasses its ConnectTimeoutError.
    timed_out = isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError)
    if timed_out and not isinstance(error, urllib3.exceptions.NewConnectionError):
        return Retryable(
            ErrorKind.TIMEOUT,
            f"{call.describe()}: the API server did not answer in time ({error}); will retry",
        )
    if isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | OSError):
        return Retryable(
            ErrorKind.CONNECTION,
            f"{call.describe()}: connection to the API server "
            f"failed ({type(error).__name__}: {error}); will retry",
        )
    raise error


def classify_status(status: ApiStatus, call: Call) -> KubeCallError:
    code = status.code
    if code in (401, 403):
        kind = ErrorKind.UNAUTHORIZED if code == 401 else ErrorKind.FORBIDDEN
        verb, resource = call.verb, call.resource
        what = "is not authenticated" if code == 401 else "is not allowed to"
        hint = (
            "check the credentials in the kubeconfig or the service account token"
            if code == 401
            else f'grant verb "{verb}" on resource "{resource}" in API group "{call.group}" '
            "to the controller's ClusterRole (see deploy/ RBAC)"
        )
        action = f"{what} {verb} {resource}" if code == 403 else what
        return PermissionDenied(
            kind,
            f"{call.describe()}: the controller {action}: {status.message} — {hint}",
            status=code,
            reason=status.reason,
            verb=verb,
            resource=resource,
            group=call.group,
        )
    if code == 409:
        return Retryable(
            ErrorKind.CONFLICT,
            f"{call.describe()}: {status.message}; will re-read and retry",
            status=code,
            reason=status.reason,
        )
    if code == 429:
        after = f" after {status.retry_after:g}s" if status.retry_after else ""
        return Retryable(
            ErrorKind.THROTTLED,
            f"{call.describe()}: {status.message}; will retry{after}",
            status=code,
            reason=status.reason,
            retry_after=status.retry_after,
        )
    if code >= 500 or code == 0:
        return Retryable(
            ErrorKind.SERVER_ERROR,
            f"{call.describe()}: API server error {code} "
            f"{status.reason}: {status.message}; will retry",
            status=code,
            reason=status.reason,
            retry_after=status.retry_after,
        )
    if code == 422:
        return Rejected(
            ErrorKind.INVALID,
            f"{call.describe()}: the API rejected the request as "
            f"invalid ({status.reason}): {status.message}",
            status=code,
            reason=status.reason,
        )
    return Rejected(
        ErrorKind.REJECTED,
        f"{call.describe()}: the API refused the request "
        f"({code} {status.reason}): {status.message}",
        status=code,
        reason=status.reason,
    )
