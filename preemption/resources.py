"""A pod's effective resource request and QoS class, from its spec as upstream computes them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from preemptctl.preemption.errors import QuantityError
from preemptctl.preemption.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    QOS_BEST_EFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    Resources,
)
from preemptctl.preemption.quantity import MAX_VALUE, parse_quantity, to_milli_value, to_value

_Amounts = dict[str, int]


def is_scalar_resource(name: str) -> bool:
    """`IsScalarResourceName`: extended (`vendor/x`), prefixed native, and hugepages resources."""
    return "/" in name or name.startswith("hugepages-")


# (is cpu, quantity text) → amount: the same few strings fill a whole cluster's pod specs.
_amount_cache: dict[tuple[bool, str], int] = {}


def resource_amount(name: str, quantity: Any) -> int:
    """One requested amount in the scheduler's units; negative amounts are refused."""
    is_cpu = name == CPU
    if isinstance(quantity, str):
        cached = _amount_cache.get((is_cpu, quantity))
        if cached is not None:
            return cached
    try:
        value = parse_quantity(quantity)
    except QuantityError as error:
        raise QuantityError(f"{error} ({name})") from None
    if value < 0:
        raise QuantityError(f"negative request {quantity!r} ({name})")
    amount = to_milli_value(value) if is_cpu else to_value(value)
    if amount > MAX_VALUE:
        raise QuantityError(f"quantity {quantity!r} is out of range ({name})")
    if isinstance(quantity, str) and len(_amount_cache) < 65_536:
        _amount_cache[(is_cpu, quantity)] = amount
    return amount


def resource_amounts(resource_list: Mapping[str, Any] | None) -> _Amounts:
    if not resource_list:
        return {}
    amounts: _Amounts = {}
    for name, quantity in resource_list.items():
        if name == PODS:
            continue
        if name in (CPU, MEMORY, EPHEMERAL_STORAGE) or is_scalar_resource(name):
            amounts[name] = resource_amount(name, quantity)
    return amounts


def container_requests(container: Mapping[str, Any]) -> _Amounts:
    """A container's requests, defaulted from its limits where unset (as the API server does)."""
    resources = container.get("resources") or {}
    requests = resource_amounts(resources.get("requests"))
    limits = resources.get("limits")
    if limits:
        for name, amount in resource_amounts(limits).items():
            requests.setdefault(name, amount)
    return requests


def _add(into: _Amounts, amounts: _Amounts) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0) + amount


def _max(into: _Amounts, amounts: _Amounts) -> None:
    for name, amount in amounts.items():
        if amount > into.get(name, 0):
            into[name] = amount


# Most pods are one container with the same few request/limit maps (their workload's
# template): the effective request of such a pod is computed once per distinct map.
_single_container_cache: dict[tuple[Any, ...], Resources] = {}


def _single_container_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    containers = spec.get("containers")
    if (
        not isinstance(containers, list)
        or len(containers) != 1
        or spec.get("initContainers")
        or spec.get("overhead")
    ):
        return None
    first = containers[0]
    # `type(...) is dict` first: the ABC check costs ~5% of decoding a pod at 150,000 pods.
    resources = (
        first.get("resources") if type(first) is dict or isinstance(first, Mapping) else None
    )
    if not resources:
        return ()
    try:
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        return (tuple(requests.items()), tuple(limits.items()))
    except (AttributeError, TypeError):
        return None  # malformed: let the full path report it


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """`resourcehelper.PodRequests`: max(containers + sidecars, each init step) plus overhead.

    Restartable init containers (sidecars, `restartPolicy: Always`) keep running, so they
    add to the containers' sum and to every later init step, as KEP-753 specifies.
    """
    key = _single_container_key(spec)
    if key is not None:
        try:
            cached = _single_container_cache.get(key)
        except TypeError:  # an unhashable value in the maps: take the full path
            cached, key = None, None
        if cached is not None:
            return cached
    computed = _pod_requests(spec)
    if key is not None and len(_single_container_cache) < 65_536:
        _single_container_cache[key] = computed
    return computed


def _pod_requests(spec: Mapping[str, Any]) -> Resources:
    total: _Amounts = {}
    for container in spec.get("containers") or ():
        _add(total, container_requests(container))
    sidecars: _Amounts = {}
    init_peak: _Amounts = {}
    for container in spec.get("initContainers") or ():
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            step = dict(sidecars)
        else:
            step = dict(requests)
            _add(step, sidecars)
        _max(init_peak, step)
    _max(total, init_peak)
    _add(total, resource_amounts(spec.get("overhead")))
    for name, amount in total.items():
        if amount > MAX_VALUE:
            # Each amount is within int64 (the parser refuses others); their sum may not be.
            # Upstream's arithmetic saturates at the largest int64 instead of failing, so a
            # pod asking for more than any node has simply fits nowhere: never an error
            # that would take its node, or the whole snapshot, out of every decision.
            total[name] = MAX_VALUE
    return to_resources(total)


def to_resources(amounts: Mapping[str, int]) -> Resources:
    """Pack a name → amount map into the fixed resource vector."""
    scalars = tuple(
        sorted(
            (name, amount)
            for name, amount in amounts.items()
            if name not in (CPU, MEMORY, EPHEMERAL_STORAGE)
        )
    )
    return Resources(
        amounts.get(CPU, 0), amounts.get(MEMORY, 0), amounts.get(EPHEMERAL_STORAGE, 0), scalars
    )


def _qos_parts(containers: Iterable[Mapping[str, Any]]) -> tuple[_Amounts, _Amounts, bool]:
    requests: _Amounts = {}
    limits: _Amounts = {}
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        for name, amount in container_requests(container).items():
            if name in (CPU, MEMORY) and amount:
                requests[name] = requests.get(name, 0) + amount
        limit_names: set[str] = set()
        for name, amount in resource_amounts(resources.get("limits")).items():
            if name in (CPU, MEMORY) and amount:
                limits[name] = limits.get(name, 0) + amount
                limit_names.add(name)
        if limit_names != {CPU, MEMORY}:
            guaranteed = False
    return requests, limits, guaranteed


def qos_class(spec: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> str:
    """`qos.GetPodQOS`: the API server's `status.qosClass` when present, else computed."""
    if status and status.get("qosClass") in (QOS_GUARANTEED, QOS_BURSTABLE, QOS_BEST_EFFORT):
        return str(status["qosClass"])
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    requests, limits, guaranteed = _qos_parts(containers)
    if not requests and not limits:
        return QOS_BEST_EFFORT
    if (
        guaranteed
        and requests.keys() == limits.keys()
        and all(limits[name] == amount for name, amount in requests.items())
    ):
        return QOS_GUARANTEED
    return QOS_BURSTABLE
