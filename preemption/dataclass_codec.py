"""A generic codec between frozen dataclasses (and named tuples) and JSON-able data.

Objects are encoded field by field from their dataclass definitions (fields at their default
are left out), and decoded by their type hints, so a field added later reads as its default
in data written before it. The domain's objects (`preemption.objects`) are what it is for:
each decision's recorded inputs hold some 20,000 pods and nodes, so encoding is written out
per class, as `dataclasses` writes `__init__` (`_encoder`). It knows no preemption: what it
is given is what it writes.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any


class DecodeError(ValueError):
    """Data that does not decode as the type asked for."""


_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
_NO_DEFAULT = object()
_PRIMITIVES = (str, int, float, bool, type(None))
NOT_INPUTS = frozenset({"resource_version"})
"""Fields the planner never reads (kept by the view for writes), left out of the inputs."""


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """A dataclass's init fields with their defaults (`_NO_DEFAULT` when required)."""
    found = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = _NO_DEFAULT
        found.append((field.name, default))
    return tuple(found)


def _is_primitive(hint: Any) -> bool:
    if hint in _PRIMITIVES:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return all(_is_primitive(arg) for arg in typing.get_args(hint))
    return False


def _plain_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    return value if type(value) is dict else dict(value)


def _flat(hint: Any) -> bool:
    """A primitive, or a (named) tuple of primitives and flat tuples: JSON arrays as is."""
    if _is_primitive(hint):
        return True
    if typing.get_origin(hint) is tuple:
        return all(arg is Ellipsis or _flat(arg) for arg in typing.get_args(hint))
    return False


def _named_tuples(value: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, ...]]:
    return [tuple(item) for item in value]


def _converter(hint: Any) -> Any:
    """How a field of this type becomes JSON-able data: None when it already is."""
    if _flat(hint):
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Mapping and all(_is_primitive(arg) for arg in args):
        return _plain_mapping
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        named = isinstance(item, type) and issubclass(item, tuple) and hasattr(item, "_fields")
        if named and all(_flat(h) for h in _hints(item).values()):
            return _named_tuples
    return encode


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, Any, Any], ...]:
    """How to encode each field of a dataclass: name, default, converter (None: as is)."""
    hints = _hints(cls)
    return tuple(
        (name, default, _converter(hints[name]))
        for name, default in _fields(cls)
        if name not in NOT_INPUTS
    )


def _encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    """The function that encodes a `cls`, written out field by field from its plan (as
    `dataclasses` writes `__init__`): a loop over the plan costs twice as much, and
    a decision's inputs hold some 20,000 pods and nodes."""
    found = _ENCODERS.get(cls)
    if found is None:
        plan = _plan(cls)
        constants: dict[str, Any] = {}
        lines = []
        leading = 0  # required fields before the first optional one: one dict display
        while leading < len(plan) and plan[leading][1] is _NO_DEFAULT:
            leading += 1
        shown = ", ".join(
            f"{name!r}: {_converted(f'value.{name}', index, convert, constants)}"
            for index, (name, _, convert) in enumerate(plan[:leading])
        )
        lines.append(f"    shown = {{{shown}}}")
        for index, (name, default, convert) in enumerate(plan[leading:], leading):
            item = _converted("item", index, convert, constants)
            lines.append(f"    item = value.{name}")
            if default is _NO_DEFAULT:
                lines.append(f"    shown[{name!r}] = {item}")
                continue
            constants[f"default_{index}"] = default
            lines.append(f"    if item is not default_{index} and item != default_{index}:")
            lines.append(f"        shown[{name!r}] = {item}")
        source = "def encoder(value):\n" + "\n".join(lines) + "\n    return shown\n"
        exec(source, constants)  # the source names only the class's own fields
        found = _ENCODERS[cls] = constants["encoder"]
    return found


def _converted(item: str, index: int, convert: Any, constants: dict[str, Any]) -> str:
    """The expression for one field's JSON-able value in `_encoder`'s source."""
    if convert is None:
        return item
    constants[f"convert_{index}"] = convert
    return f"convert_{index}({item})"


def encode(value: Any) -> Any:
    """JSON-able data for a domain object: a dataclass as an object of its fields not at
    their default, a named or plain tuple as an array, a set as a sorted array."""
    kind = type(value)
    if kind in _PRIMITIVES:
        return value
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if dataclasses.is_dataclass(value):
        return _encoder(kind)(value)
    if isinstance(value, frozenset | set):
        return sorted(encode(item) for item in value)
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    raise TypeError(f"cannot encode {type(value).__name__}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_T = typing.TypeVar("_T")


def decode(cls: type[_T], raw: Any) -> _T:
    """The object `encode` wrote for a `cls`."""
    return typing.cast(_T, _decode(cls, raw))


def _decode(hint: Any, raw: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        if raw is None:
            return None
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _decode(inner, raw)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item) for item in raw)
        return tuple(_decode(arg, item) for arg, item in zip(args, raw, strict=True))
    if origin is frozenset:
        (inner,) = typing.get_args(hint)
        return frozenset(_decode(inner, item) for item in raw)
    if origin is dict or origin is Mapping:
        _, inner = typing.get_args(hint)
        return {key: _decode(inner, item) for key, item in raw.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        known = {name for name, _ in _fields(hint)}
        return hint(**{k: _decode(hints[k], v) for k, v in raw.items() if k in known})
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):
        hints = _hints(hint)
        return hint(
            *(_decode(hints[name], item) for name, item in zip(hint._fields, raw, strict=False))
        )
    if hint is float:
        return None if raw is None else float(raw)
    if hint in (int, str, bool):
        if not isinstance(raw, hint):
            raise DecodeError(f"expected {hint.__name__}, found {raw!r}")
        return raw
    if hint is Any:
        return raw
    raise DecodeError(f"cannot decode {hint!r}")
