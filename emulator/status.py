"""Kubernetes `Status` failure bodies, worded as the API server words them.

Clients (and our gateway) classify errors by code, reason and sometimes message text, so the
emulator must not invent its own wording: each builder below mirrors one constructor of
`k8s.io/apimachinery/pkg/api/errors` and cites it.
"""

from __future__ import annotations

from typing import Any

from preemptctl.emulator.resources import Resource


class ApiError(Exception):
    """A failure the emulator answers with a `Status` body and this HTTP code."""

    def __init__(self, code: int, body: dict[str, Any], retry_after: int | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body
        self.retry_after = retry_after


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _details(name: str, resource: Resource) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return details


def not_found(resource: Resource, name: str) -> ApiError:
    """`errors.NewNotFound`."""
    return ApiError(
        404,
        status_body(
            404, "NotFound", f'{resource.qualified} "{name}" not found', _details(name, resource)
        ),
    )


def already_exists(resource: Resource, name: str) -> ApiError:
    """`errors.NewAlreadyExists`."""
    return ApiError(
        409,
        status_body(
            409,
            "AlreadyExists",
            f'{resource.qualified} "{name}" already exists',
            _details(name, resource),
        ),
    )


def conflict(resource: Resource, name: str, cause: str) -> ApiError:
    """`errors.NewConflict`: "Operation cannot be fulfilled on <resource> "<name>": <cause>"."""
    return ApiError(
        409,
        status_body(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {resource.qualified} "{name}": {cause}',
            _details(name, resource),
        ),
    )


MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def precondition_failed(
    resource: Resource, name: str, field: str, wanted: str, actual: str
) -> ApiError:
    """A delete whose preconditions (`uid` or `resourceVersion`) do not hold: the 409 that
    `rest.BeforeDelete` returns, which names the resource by its Kind ("Pod")."""
    consequence = "deleted and then recreated" if field == "UID" else "modified"
    message = (
        f'Operation cannot be fulfilled on {resource.kind} "{name}": the {field} in the '
        f"precondition ({wanted}) does not match the {field} in record ({actual}). "
        f"The object might have been {consequence}"
    )
    details: dict[str, Any] = {"name": name, "kind": resource.kind}
    if resource.group:
        details["group"] = resource.group
    return ApiError(409, status_body(409, "Conflict", message, details))


def gone(message: str) -> ApiError:
    """`errors.NewResourceExpired`: 410 with reason Expired."""
    return ApiError(410, status_body(410, "Expired", message))


def too_old_resource_version(requested: int, oldest: int) -> dict[str, Any]:
    """The `Status` a watch sends (as an ERROR event) when its start is compacted away."""
    return status_body(410, "Expired", f"too old resource version: {requested} ({oldest})")


def bad_request(message: str) -> ApiError:
    return ApiError(400, status_body(400, "BadRequest", message))


def invalid(kind: str, name: str, field: str, detail: str) -> ApiError:
    """`errors.NewInvalid` with one field error."""
    return ApiError(
        422,
        status_body(
            422,
            "Invalid",
            f'{kind} "{name}" is invalid: {field}: {detail}',
            {
                "name": name,
                "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
            },
        ),
    )


def forbidden(
    resource: Resource,
    subresource: str,
    name: str,
    namespace: str,
    verb: str,
    user: str,
) -> ApiError:
    """The authorizer's denial (`errors.NewForbidden` with the message of `forbiddenMessage` in
    apiserver/pkg/endpoints/handlers/responsewriters/errors.go)."""
    rbac_resource = f"{resource.plural}/{subresource}" if subresource else resource.plural
    subject = f'{resource.qualified} "{name}"' if name else resource.qualified
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{rbac_resource}" '
        f'in API group "{resource.group}" {scope}'
    )
    details: dict[str, Any] = {"kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    if name:
        details["name"] = name
    return ApiError(403, status_body(403, "Forbidden", message, details))


def unauthorized() -> ApiError:
    return ApiError(401, status_body(401, "Unauthorized", "Unauthorized"))


def too_many_requests(
    message: str = "Too many requests, please try again later.",
    retry_after: int | None = 1,
    causes: list[dict[str, str]] | None = None,
) -> ApiError:
    """`errors.NewTooManyRequests`: the server also sets Retry-After from retryAfterSeconds."""
    details: dict[str, Any] = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    if causes:
        details["causes"] = causes
    return ApiError(
        429, status_body(429, "TooManyRequests", message, details or None), retry_after or None
    )


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def for_code(code: int, message: str | None = None, retry_after: int | None = None) -> ApiError:
    """A generic failure for an injected fault: the reason the API server gives that code."""
    reason = _REASONS.get(code, "Unknown" if code < 500 else "InternalError")
    if code == 429:
        return too_many_requests(
            message or "Too many requests, please try again later.", retry_after
        )
    text = message or {
        500: "Internal error occurred: injected fault",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted",
    }.get(code, f"injected fault ({code})")
    return ApiError(code, status_body(code, reason, text), retry_after)
