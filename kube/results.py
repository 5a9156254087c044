"""What a Kubernetes call ended as, in the terms a retried activity needs.

A gateway write either returns a `WriteResult` (the call reached a settled state, its
`WriteEffect`: done, nothing to do, victim already gone or terminating, victim replaced,
nomination kept)
or raises a `KubeCallError` that says whether retrying can help. Activities map the latter to
Temporal's retryable or non-retryable `ApplicationError`; nothing here knows Temporal.

The classification (see docs/kubernetes.md for the table):

- 404 on a victim: `ALREADY_GONE` (success: the goal, a victim that no longer runs, holds);
- UID precondition conflict (or, for an apply, kube-apiserver's 422 refusing another
  `metadata.uid`): `REPLACED` (success: the pod we chose is gone; the same-named pod now there
  is someone else's and must not be touched, so this is never retried);
- 409 resourceVersion conflict, 429 (with `retry_after`), 5xx, timeouts, dropped
  connections: `Retryable`;
- 401 and 403: `PermissionDenied` (not retryable; names the RBAC verb and resource);
- 422 and other 4xx: `Rejected` (not retryable; carries the API's reason and message).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class WriteEffect(enum.Enum):
    """What a settled write did (or found it need not do)."""

    DONE = "Done"
    """The write happened."""
    UNCHANGED = "Unchanged"
    """The desired state already held, so no write was sent (a retry after a lost reply)."""
    ALREADY_GONE = "AlreadyGone"
    """The pod does not exist (404)."""
    REPLACED = "Replaced"
    """A pod with the same name but another UID exists; it was left alone."""
    KEPT_OTHER_NOMINATION = "KeptOtherNomination"
    """Another component nominated the pod elsewhere and the decision did not require
    overwriting it (KEP-5278), so it was left as is."""
    TERMINATING = "Terminating"
    """The pod is already being deleted (it has a deletionTimestamp): it needs nothing
    more, so nothing was written."""


@dataclass(frozen=True, slots=True)
class WriteResult:
    """A settled write. `previous` carries what was overwritten or kept (the other
    nomination's node), so the caller can write it to the ledger; `replaced_by_uid`, for a
    `REPLACED` pod, the UID of the pod that now has its name, when the API server said it
    (a refused UID precondition names it) or the lookup read it."""

    effect: WriteEffect
    pod: str
    message: str
    previous: str | None = None
    replaced_by_uid: str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the preemption may go on as if the write happened."""
        return self.effect in (
            WriteEffect.DONE,
            WriteEffect.UNCHANGED,
            WriteEffect.ALREADY_GONE,
            WriteEffect.REPLACED,
            WriteEffect.TERMINATING,
        )


class ErrorKind(enum.Enum):
    CONFLICT = "Conflict"  # 409 resourceVersion: re-read and try again
    THROTTLED = "Throttled"  # 429
    SERVER_ERROR = "ServerError"  # 5xx
    TIMEOUT = "Timeout"
    CONNECTION = "Connection"  # refused, reset, dropped mid-reply
    UNAUTHORIZED = "Unauthorized"  # 401
    FORBIDDEN = "Forbidden"  # 403
    INVALID = "Invalid"  # 422
    REJECTED = "Rejected"  # any other 4xx


class KubeCallError(Exception):
    """A call that did not reach a settled state. `message` is for people: what failed, on
    which object, and what to do."""

    retryable: bool = False

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class Retryable(KubeCallError):
    """Retrying the same call later can succeed. `retry_after` is the server's requested
    delay in seconds (429 Retry-After), if it gave one."""

    retryable = True


class NotRetryable(KubeCallError):
    """Retrying cannot help until a person changes something."""


class PermissionDenied(NotRetryable):
    """401/403: the controller's identity lacks an RBAC permission."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int,
        reason: str,
        verb: str,
        resource: str,
        group: str,
    ) -> None:
        super().__init__(kind, message, status=status, reason=reason)
        self.verb = verb
        self.resource = resource
        self.group = group


class Rejected(NotRetryable):
    """422 and other 4xx: the API refused the request itself (`reason` is the API's)."""
