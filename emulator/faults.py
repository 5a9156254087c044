"""Injected failures, matched per verb and resource, for testing what callers do when the API
server misbehaves.

A rule names a verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`) and a
resource as RBAC names it (`pods`, `pods/status`, `pods/eviction`, `poddisruptionbudgets`),
optionally one object, and what happens: an error `Status` (with Retry-After for 429), an
RBAC denial worded as the authorizer words it, a dropped connection, a request served whose
answer is lost on its way back (`lose`: the write happened, the caller cannot know), or
added latency.
`times` bounds how often it fires ("fail the next N calls"); None means until cleared.
Latency rules add up and let the request go on; the first matching failure rule answers.

`DEV_FAULTS` are the denials `preemptctl dev --fault NAME` injects by name, each one RBAC
permission the controller's ClusterRole grants (deploy/base/clusterrole.yaml) taken away;
`NamedFaults` keeps the table in step with the set of names a person wants on now.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

DEFAULT_USER = "system:serviceaccount:preemptctl:preemptctl"


class Action(Enum):
    FAIL = "fail"
    DENY = "deny"
    DROP = "drop"
    DELAY = "delay"
    LOSE = "lose"  # served, then the connection dropped: the answer is lost on its way back


@dataclass
class Fault:
    action: Action
    verb: str | None = None
    resource: str | None = None
    name: str | None = None
    namespace: str | None = None
    code: int = 500
    message: str | None = None
    retry_after: int | None = None
    seconds: float = 0.0
    user: str = DEFAULT_USER
    times: int | None = None
    hits: int = field(default=0)

    def matches(self, verb: str, resource: str, namespace: str, name: str) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
            and (self.name is None or self.name == name)
            and (self.namespace is None or self.namespace == namespace)
            and (self.times is None or self.times > 0)
        )


@dataclass(frozen=True)
class Decision:
    """What the HTTP layer does with one request: wait, then maybe fail it."""

    delay: float
    fault: Fault | None


class Faults:
    """The emulator's fault table; thread-safe, changeable while requests are in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []
        # Called with each request as it arrives, before any rule (outside the lock): a test's
        # hook to change the cluster at that moment, e.g. replace a pod as its DELETE lands.
        self.on_arrival: Callable[[str, str, str, str], None] | None = None

    def _add(self, fault: Fault) -> Fault:
        with self._lock:
            self._rules.append(fault)
        return fault

    def fail(
        self,
        verb: str | None,
        resource: str | None,
        code: int = 500,
        *,
        times: int | None = 1,
        retry_after: int | None = None,
        message: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Fault:
        """Answer matching requests with `code` and a Kubernetes `Status` body."""
        return self._add(
            Fault(
                Action.FAIL,
                verb,
                resource,
                name,
                namespace,
                code,
                message,
                retry_after,
                times=times,
            )
        )

    def deny(
        self,
        verb: str | None,
        resource: str | None,
        *,
        user: str = DEFAULT_USER,
        times: int | None = None,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Fault:
        """Refuse matching requests as RBAC does: 403 Forbidden naming user, verb, resource."""
        return self._add(
            Fault(Action.DENY, verb, resource, name, namespace, 403, user=user, times=times)
        )

    def drop(
        self,
        verb: str | None,
        resource: str | None,
        *,
        times: int | None = 1,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Fault:
        """Close the connection without answering (a crashed or restarting API server)."""
        return self._add(Fault(Action.DROP, verb, resource, name, namespace, times=times))

    def lose(
        self,
        verb: str | None,
        resource: str | None,
        *,
        times: int | None = 1,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Fault:
        """Serve the request, then close the connection without answering: the write
        happened, and its answer is lost (a load balancer or a proxy dropping it)."""
        return self._add(Fault(Action.LOSE, verb, resource, name, namespace, times=times))

    def delay(
        self,
        verb: str | None,
        resource: str | None,
        seconds: float,
        *,
        times: int | None = None,
        name: str | None = None,
        namespace: str | None = None,
    ) -> Fault:
        """Hold matching requests for `seconds` before serving them."""
        return self._add(
            Fault(Action.DELAY, verb, resource, name, namespace, seconds=seconds, times=times)
        )

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def remove(self, fault: Fault) -> None:
        """Lift one rule (a rule already gone is no error)."""
        with self._lock:
            self._rules = [rule for rule in self._rules if rule is not fault]

    def decide(self, verb: str, resource: str, namespace: str, name: str) -> Decision:
        if self.on_arrival is not None:
            self.on_arrival(verb, resource, namespace, name)
        delay = 0.0
        with self._lock:
            for rule in self._rules:
                if not rule.matches(verb, resource, namespace, name):
                    continue
                rule.hits += 1
                if rule.times is not None:
                    rule.times -= 1
                if rule.action is Action.DELAY:
                    delay += rule.seconds
                    continue
                return Decision(delay, rule)
        return Decision(delay, None)


@dataclass(frozen=True)
class DevFault:
    """One permission of the controller's ClusterRole, denied by name in dev mode."""

    name: str
    verb: str
    resource: str
    group: str
    what: str  # what the controller can no longer do

    @property
    def rule(self) -> str:
        """The ClusterRole rule that grants it back, as deploy/base/clusterrole.yaml writes it."""
        return (
            f'{{apiGroups: ["{self.group}"], resources: ["{self.resource}"], '
            f'verbs: ["{self.verb}"]}}'
        )


DEV_FAULTS = {
    fault.name: fault
    for fault in (
        DevFault("deny-delete", "delete", "pods", "", "delete a victim"),
        DevFault(
            "deny-patch",
            "patch",
            "pods/status",
            "",
            "nominate the preemptor or mark a victim (DisruptionTarget)",
        ),
        DevFault(
            "deny-events",
            "create",
            "events",
            "events.k8s.io",
            "record Events (Preempted, Preempting, PreemptionFailed)",
        ),
    )
}


class NamedFaults:
    """The `DEV_FAULTS` on now, kept in step with a set of names (`apply`)."""

    def __init__(self, faults: Faults) -> None:
        self._faults = faults
        self._on: dict[str, Fault] = {}

    @property
    def on(self) -> list[str]:
        return sorted(self._on)

    def apply(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """Deny what `names` names and lift the rest; (injected, lifted), each sorted.
        Names not in `DEV_FAULTS` are ignored: the caller reports them."""
        wanted = {name for name in names if name in DEV_FAULTS}
        injected = sorted(wanted - self._on.keys())
        lifted = sorted(self._on.keys() - wanted)
        for name in lifted:
            self._faults.remove(self._on.pop(name))
        for name in injected:
            fault = DEV_FAULTS[name]
            self._on[name] = self._faults.deny(fault.verb, fault.resource)
        return injected, lifted
