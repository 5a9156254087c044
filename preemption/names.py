"""Names as Kubernetes accepts them: DNS-1123 labels and subdomains, checked where a name
enters preemptctl (the gateway's paths, the CLI's pod arguments, kube-scheduler's Events).

A name becomes a URL path segment. `quote(name, safe="")` escapes `/` and `%`, but `.` and
`..` are unreserved characters and pass unchanged, and the HTTP client removes dot segments
(RFC 3986, 5.2.4): a pod named `..` turns `DELETE /api/v1/namespaces/default/pods/..` into
`DELETE /api/v1/namespaces/default/`. No such pod can exist, since the API server validates
every name it stores, so a name that fails the same validation is refused before any path
is built from it.

Upstream's rules, as `k8s.io/apimachinery/pkg/util/validation/validation.go` defines them
(`IsDNS1123Label`, `IsDNS1123Subdomain`, their formats, limits and messages), applied as
the API server applies them (`k8s.io/apimachinery/pkg/api/validation/generic.go` and
`pkg/apis/core/validation`):

- a namespace is a DNS-1123 label (`ValidateNamespaceName` = `NameIsDNSLabel`): at most 63
  characters of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`;
- a pod name (`ValidatePodName`), a node name (`ValidateNodeName`) and a PodGroup name are
  DNS-1123 subdomains (`NameIsDNSSubdomain`): at most 253 characters of labels joined by
  dots, `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`.

Go's `len` counts bytes: lengths here are UTF-8 bytes too (only ASCII can match anyway).
The messages are upstream's, word for word, so what preemptctl refuses reads as what
`kubectl` would say of the same name. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_LABEL_ERR_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)

DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
DNS1123_SUBDOMAIN_ERR_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)

_LABEL = re.compile(DNS1123_LABEL_FMT)
_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT)

_SHOWN = 80  # characters of a refused name quoted in a message


def max_len_error(length: int) -> str:
    """Upstream's `MaxLenError`."""
    return f"must be no more than {length} characters"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """Upstream's `RegexError`, its spacing included: `(e.g. 'my-name',  or '123-abc',
    regex used for validation is '...')`."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    message += " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            message += " or "
        message += f"'{example}', "
    return message + f"regex used for validation is '{fmt}')"


def _too_long(value: str, limit: int) -> bool:
    """Longer than `limit` as Go's `len` counts: in UTF-8 bytes."""
    return len(value.encode("utf-8", "surrogatepass")) > limit


def is_dns1123_label(value: str) -> list[str]:
    """Upstream's `IsDNS1123Label`: what is wrong with `value` as a label; empty when valid."""
    errors = []
    if _too_long(value, DNS1123_LABEL_MAX_LENGTH):
        errors.append(max_len_error(DNS1123_LABEL_MAX_LENGTH))
    if not _LABEL.fullmatch(value):
        if _SUBDOMAIN.fullmatch(value):
            # A valid subdomain but not a label: the length is checked, so it is the dots.
            errors.append("must not contain dots")
        else:
            errors.append(
                regex_error(DNS1123_LABEL_ERR_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc")
            )
    return errors


def is_dns1123_subdomain(value: str) -> list[str]:
    """Upstream's `IsDNS1123Subdomain`: what is wrong with `value` as a subdomain; empty when
    valid."""
    errors = []
    if _too_long(value, DNS1123_SUBDOMAIN_MAX_LENGTH):
        errors.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _SUBDOMAIN.fullmatch(value):
        errors.append(regex_error(DNS1123_SUBDOMAIN_ERR_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


class NameKind(StrEnum):
    """What a name names (its value, the noun a message uses); `errors` checks a name by the
    rule the API server checks it by."""

    NAMESPACE = "namespace"
    POD = "pod name"
    NODE = "node name"
    POD_GROUP = "pod group name"

    def errors(self, value: str) -> list[str]:
        """What is wrong with `value` as this kind of name; empty when valid."""
        return _RULES[self](value)


_RULES: dict[NameKind, Callable[[str], list[str]]] = {
    NameKind.NAMESPACE: is_dns1123_label,  # ValidateNamespaceName
    NameKind.POD: is_dns1123_subdomain,  # ValidatePodName
    NameKind.NODE: is_dns1123_subdomain,  # ValidateNodeName
    NameKind.POD_GROUP: is_dns1123_subdomain,
}


def shown(value: str) -> str:
    """A refused name as a message quotes it: `repr` (so a control character is an escape,
    never a byte the terminal acts on), cut to 80 characters."""
    return repr(value[:_SHOWN]) + ("..." if len(value) > _SHOWN else "")


def name_problem(kind: NameKind, value: str) -> str | None:
    """One line saying why `value` is not a valid `kind` (`pod name '..' is not valid: a
    lowercase RFC 1123 subdomain must ...`); None when it is valid."""
    errors = kind.errors(value)
    if not errors:
        return None
    return f"{kind} {shown(value)} is not valid: {'; '.join(errors)}"


def pod_key_problem(namespace: str, name: str) -> str | None:
    """Why `namespace`/`name` cannot name a pod (the namespace first); None when both are
    valid."""
    return name_problem(NameKind.NAMESPACE, namespace) or name_problem(NameKind.POD, name)


class InvalidName(ValueError):
    """A name Kubernetes would refuse; the message is `name_problem`'s line."""

    def __init__(self, kind: NameKind, value: str) -> None:
        self.kind = kind
        self.value = value
        super().__init__(name_problem(kind, value) or f"{kind} {shown(value)}")


def valid_name(kind: NameKind, value: str) -> str:
    """`value`, when it is a valid `kind`; else `InvalidName`."""
    if kind.errors(value):
        raise InvalidName(kind, value)
    return value
