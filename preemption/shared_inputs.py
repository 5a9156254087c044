"""Decision inputs stored once per object: the shared layout, the packer that writes it after
each decision, and the resolver that reads it back.

A decision reads the whole view (`preemption.recorded_inputs`), but between two decisions
little of it changes. So each object (pod, node, PDB, Namespace, PodGroup, CompositePodGroup,
storage object) is stored once per distinct content (its JSON's digest), and a decision
stores only what is its own plus a small tree of references over the shared objects:

    root (the decision's row)   per collection, BUCKETS references (None: an empty bucket)
      node bucket               the references of its nodes' entries (nodes by name's CRC)
        node entry              its name, a reference to its Node, to each of its pods
          Node, Pod             the objects themselves
      other bucket              the references of its objects (pending pods by UID, PDBs,
                                Namespaces, (Composite)PodGroups, storage objects by
                                their key)

Every part of the tree is content-addressed too: a node entry's digest is that of its Node's
and pods' digests, a bucket's that of its members' digests. A decision after which k nodes
changed therefore stores k entries, at most k buckets, the changed objects and its root: a
few KiB, where a flat list of references to 150,000 pods would be 2 MiB on its own. Why
two levels of 64 buckets: the root then names 64 buckets per collection (about 1 KiB) and a
bucket of a 5,000-node cluster about 80 entries (about 1 KiB), so neither dominates.

New blobs are appended in packs (a JSON array per pack, compressed whole by the ledger: a pod
compressed alone takes 5 times the bytes and 8 times the CPU of one compressed with its
neighbours); a reference is `[pack id, index]`. Objects go in leaf packs, entries and buckets
in structure packs, so a reader walks the small structure first and reads each leaf pack once.

Retention: a blob is referenced only while its bucket is current, and each bucket is renewed
(its blobs stored again, in new packs) every `RENEW_SECONDS`, staggered over the buckets so
that no decision pays for more than a bucket's share. A pack says until when a decision may
reference it (`Pack.referenced_until`, its buckets' next renewal); pruning removes a pack only
once every decision recorded before that is older than the retention, so a kept decision
never loses what it references, and nothing lives longer than the retention plus a day.

The packer keeps, between decisions, each node's last entry and each bucket's stored blobs
(digests only: a few tens of MiB at 150,000 pods); what changed is found by identity, the view
replacing a changed object or list rather than mutating it. No I/O here: pack ids come from
the caller, packs are written by `ledger.inputs`, read back through the `PackLoader` given to
`resolve`.
"""

from __future__ import annotations

import hashlib
import operator
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import orjson

from preemptctl.preemption.dataclass_codec import encode
from preemptctl.preemption.inputs_replay import MAX_OBJECTS, RecordedInputsError
from preemptctl.preemption.objects import Node, Pod
from preemptctl.preemption.recorded_inputs import STORAGE_KINDS, Captured, header

BUCKETS = 64
PACK_BYTES = 4 * 1024 * 1024
"""A pack is closed once its JSON reaches this (an object larger than that alone is the
only thing bigger); the reader refuses packs past `MAX_PACK_BYTES`."""
MAX_PACK_BYTES = 16 * 1024 * 1024
RENEW_SECONDS = 86_400.0
"""How long a bucket's blobs are referenced before they are stored again."""

Ref = tuple[int, int] | list[int]
"""[pack id, index in the pack]: a tuple where the packer makes one, a list where JSON was read
(both are the same JSON array). A tuple because the packer keeps one per object it stored,
150,000 and more for as long as it runs: a tuple of two ints leaves the cyclic collector's
view at its first collection, where as many lists would be traversed by every full one (about
100 ms each, at 5,000 nodes, in the process that decides)."""

# Collections of the root besides "nodes": their objects' key and their tag for `resolve`.
_KEYS: dict[str, Callable[[Any], str]] = {
    "pending": operator.attrgetter("uid"),
    "pdbs": operator.attrgetter("key"),
    "namespaces": operator.attrgetter("name"),
    "podGroups": operator.attrgetter("key"),
    "compositePodGroups": operator.attrgetter("key"),
    **{kind: operator.attrgetter(key) for kind, (_, key) in STORAGE_KINDS.items()},
}
COLLECTIONS = ("nodes", *_KEYS)
"""The root's collections, in the order `resolve` walks them."""
_TAGS = {"pending": "pods", **{name: name for name in _KEYS if name != "pending"}}


def digest(kind: bytes, payload: bytes) -> bytes:
    """A blob's content address: 128 bits of BLAKE2b over its kind and JSON."""
    return hashlib.blake2b(payload, digest_size=16, person=kind).digest()


def bucket_of(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % BUCKETS


def _json(obj: Any) -> bytes:
    return orjson.dumps(encode(obj))


@dataclass(slots=True)
class Pack:
    """Blobs appended together: a JSON array once `body()` joins them."""

    id: int
    leaf: bool
    blobs: list[bytes] = field(default_factory=list)
    size: int = 2
    referenced_until: float = 0.0
    """Wall-clock seconds: no decision recorded later references this pack."""

    def body(self) -> bytes:
        return b"[" + b",".join(self.blobs) + b"]"


@dataclass(frozen=True, slots=True)
class Shared:
    """One decision written out for the shared layout: its root (the decision's own part
    and the references) and the packs of blobs no earlier decision stored."""

    document: dict[str, Any]
    packs: list[Pack]

    @property
    def blobs(self) -> int:
        return sum(len(pack.blobs) for pack in self.packs)


@dataclass(slots=True)
class _NodeState:
    node: Node | None
    pods: Sequence[Pod]
    node_digest: bytes
    # A tuple: of bytes only, so the cyclic collector stops tracking it (5,000 lists of 30
    # digests would be traversed by each of its full passes).
    pod_digests: tuple[bytes, ...]
    entry: bytes


@dataclass(slots=True)
class _CollectionState:
    objs: list[Any]
    digests: list[bytes]
    buckets: list[bytes | None]  # each bucket's digest
    refs: list[Ref | None]


class InputsPacker:
    """What a recorder has stored, kept between its decisions; `shared` writes one decision
    out. One thread at a time (the recorder's). After a failed append, `reset`: what the
    packer believes stored is then only what the ledger holds."""

    def __init__(
        self,
        new_pack_id: Callable[[], int],
        *,
        renew_seconds: float = RENEW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._new_pack_id = new_pack_id
        self._renew_seconds = renew_seconds
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Forget everything stored: the next decision stores all it references."""
        self._started = self._now = self._clock()
        self._stored: dict[tuple[str, int], dict[bytes, Ref]] = {}
        self._renew_at: dict[tuple[str, int], float] = {}
        self._nodes: dict[str, _NodeState] = {}
        self._entries: list[dict[str, bytes]] = [{} for _ in range(BUCKETS)]
        self._node_buckets: list[bytes | None] = [None] * BUCKETS
        self._node_refs: list[Ref | None] = [None] * BUCKETS
        self._previous: tuple[list[str], list[Node | None], list[Sequence[Pod]]] | None = None
        self._collections: dict[str, _CollectionState] = {}
        self._packs: list[Pack] = []
        self._open: dict[bool, Pack] = {}

    # -- one decision ------------------------------------------------------------------------

    def shared(self, captured: Captured) -> Shared:
        """The decision's root and the packs of blobs not stored before (`Shared`)."""
        now = self._now = self._clock()
        self._packs, self._open = [], {}
        renewed = self._renew(now)
        objects: dict[str, Any] = {"nodes": self._nodes_refs(captured, renewed)}
        for name in _KEYS:
            if name == "pending":
                objs = captured.pending
            elif name in STORAGE_KINDS:
                objs = captured.storage.get(name, [])
            else:
                objs = getattr(captured, _ATTRS[name])
            objects[name] = self._collection_refs(name, objs, renewed)
        document = header(captured)
        document["objects"] = objects
        packs = [pack for pack in self._packs if pack.blobs]
        self._packs, self._open = [], {}
        return Shared(document, packs)

    def _renew(self, now: float) -> set[tuple[str, int]]:
        """Buckets whose time is up: forgotten, to be stored again."""
        due = {key for key, at in self._renew_at.items() if at <= now}
        for key in due:
            self._stored.pop(key, None)
            self._renew_at[key] = now + self._renew_seconds
        return due

    def _renew_time(self, key: tuple[str, int], now: float) -> float:
        """When the bucket's blobs are next stored again: always after `now` (a decision
        recorded now may reference them until then)."""
        at = self._renew_at.get(key)
        if at is None:  # staggered: bucket b renews (b+1)/BUCKETS of a period after a start
            period = self._renew_seconds
            at = self._started + period * (key[1] + 1) / BUCKETS
            if at <= now:
                at += period * ((now - at) // period + 1)
            self._renew_at[key] = at
        return at

    def _put(self, key: tuple[str, int], blob_digest: bytes, blob: bytes, leaf: bool) -> Ref:
        """Append a blob to this decision's open pack of its sort; its reference."""
        pack = self._open.get(leaf)
        if pack is None or (pack.blobs and pack.size + len(blob) > PACK_BYTES):
            pack = self._open[leaf] = Pack(self._new_pack_id(), leaf)
            self._packs.append(pack)
        ref = (pack.id, len(pack.blobs))
        pack.blobs.append(blob)
        pack.size += len(blob) + 1
        pack.referenced_until = max(pack.referenced_until, self._renew_time(key, self._now))
        stored = self._stored.get(key)
        if stored is None:
            stored = self._stored[key] = {}
        stored[blob_digest] = ref
        return ref

    def _stored_ref(self, key: tuple[str, int], blob_digest: bytes) -> Ref | None:
        stored = self._stored.get(key)
        return None if stored is None else stored.get(blob_digest)

    # -- nodes -------------------------------------------------------------------------------

    def _nodes_refs(self, captured: Captured, renewed: set[tuple[str, int]]) -> list[Ref | None]:
        names, nodes, pods = captured.node_names, captured.nodes, captured.node_pods
        previous = self._previous
        dirty = {bucket for collection, bucket in renewed if collection == "nodes"}
        if previous is not None and previous[0] == names:
            # The same nodes in the same order: the changed ones, found by identity.
            changed = compress(
                range(len(names)),
                map(
                    operator.or_,
                    map(operator.is_not, previous[1], nodes),
                    map(operator.is_not, previous[2], pods),
                ),
            )
            for index in changed:
                dirty.update(self._node_changed(names[index], nodes[index], pods[index]))
        else:
            for name, node, node_pods in zip(names, nodes, pods, strict=True):
                state = self._nodes.get(name)
                if state is None or state.node is not node or state.pods is not node_pods:
                    dirty.update(self._node_changed(name, node, node_pods))
            for name in set(self._nodes).difference(names):
                del self._nodes[name]
                bucket = bucket_of(name)
                del self._entries[bucket][name]
                dirty.add(bucket)
        self._previous = (names, nodes, pods)
        for bucket in dirty:
            self._node_refs[bucket] = self._node_bucket_ref(bucket)
        return list(self._node_refs)

    def _node_changed(self, name: str, node: Node | None, pods: Sequence[Pod]) -> set[int]:
        """A node's entry again; its bucket, unless the node's content is the same."""
        state = self._nodes.get(name)
        if state is not None and state.node is node and state.pods == pods:
            state.pods = pods  # the same pods in a new list (a claim hid and gave back)
            return set()
        if state is not None and state.node is node:
            node_digest = state.node_digest
        else:
            node_digest = b"" if node is None else digest(b"Node", _json(node))
        known = (
            {} if state is None else dict(zip(map(id, state.pods), state.pod_digests, strict=True))
        )
        pod_digests = tuple([known.get(id(pod)) or digest(b"Pod", _json(pod)) for pod in pods])
        content = name.encode() + b"\0" + node_digest + b"".join(sorted(pod_digests))
        entry = digest(b"Entry", content)
        self._nodes[name] = _NodeState(node, pods, node_digest, pod_digests, entry)
        bucket = bucket_of(name)
        if self._entries[bucket].get(name) == entry:
            return set()
        self._entries[bucket][name] = entry
        return {bucket}

    def _node_bucket_ref(self, bucket: int) -> Ref | None:
        entries = self._entries[bucket]
        if not entries:
            self._node_buckets[bucket] = None
            return None
        key = ("nodes", bucket)
        bucket_digest = digest(b"Bucket", b"".join(sorted(entries.values())))
        self._node_buckets[bucket] = bucket_digest
        ref = self._stored_ref(key, bucket_digest)
        if ref is None:
            body = [self._entry_ref(key, name) for name in sorted(entries)]
            ref = self._put(key, bucket_digest, orjson.dumps(body), leaf=False)
        return ref

    def _entry_ref(self, key: tuple[str, int], name: str) -> Ref:
        state = self._nodes[name]
        ref = self._stored_ref(key, state.entry)
        if ref is not None:
            return ref
        node_ref = None
        if state.node is not None:
            node_ref = self._stored_ref(key, state.node_digest)
            if node_ref is None:
                node_ref = self._put(key, state.node_digest, _json(state.node), leaf=True)
        pod_refs = []
        for pod, pod_digest in zip(state.pods, state.pod_digests, strict=True):
            pod_ref = self._stored_ref(key, pod_digest)
            if pod_ref is None:
                pod_ref = self._put(key, pod_digest, _json(pod), leaf=True)
            pod_refs.append(pod_ref)
        entry = orjson.dumps({"name": name, "node": node_ref, "pods": pod_refs})
        return self._put(key, state.entry, entry, leaf=False)

    # -- the other collections ---------------------------------------------------------------

    def _collection_refs(
        self, name: str, objs: list[Any], renewed: set[tuple[str, int]]
    ) -> list[Ref | None]:
        state = self._collections.get(name)
        due = {bucket for collection, bucket in renewed if collection == name}
        if state is not None and not due and state.objs == objs:
            return state.refs
        kind = name.encode()
        known = {} if state is None else dict(zip(map(id, state.objs), state.digests, strict=True))
        digests = [known.get(id(obj)) or digest(kind, _json(obj)) for obj in objs]
        members: list[list[tuple[bytes, Any]]] = [[] for _ in range(BUCKETS)]
        key_of = _KEYS[name]
        for obj, obj_digest in zip(objs, digests, strict=True):
            members[bucket_of(key_of(obj))].append((obj_digest, obj))
        buckets: list[bytes | None] = []
        refs: list[Ref | None] = []
        for bucket, found in enumerate(members):
            if not found:
                buckets.append(None)
                refs.append(None)
                continue
            found.sort(key=_FIRST)
            bucket_digest = digest(b"Bucket", b"".join(d for d, _ in found))
            buckets.append(bucket_digest)
            previous = state.refs[bucket] if state is not None else None
            same = state is not None and state.buckets[bucket] == bucket_digest
            if same and bucket not in due and previous is not None:
                refs.append(previous)
                continue
            key = (name, bucket)
            ref = self._stored_ref(key, bucket_digest)
            if ref is None:
                body = []
                for obj_digest, obj in found:
                    obj_ref = self._stored_ref(key, obj_digest)
                    if obj_ref is None:
                        obj_ref = self._put(key, obj_digest, _json(obj), leaf=True)
                    body.append(obj_ref)
                ref = self._put(key, bucket_digest, orjson.dumps(body), leaf=False)
            refs.append(ref)
        self._collections[name] = _CollectionState(list(objs), digests, buckets, refs)
        return refs


_FIRST = operator.itemgetter(0)
_ATTRS = {
    "pdbs": "pdbs",
    "namespaces": "namespaces",
    "podGroups": "pod_groups",
    "compositePodGroups": "composite_pod_groups",
}


# -- reading it back ----------------------------------------------------------------------------

PackLoader = Callable[[Iterable[int]], Iterator[tuple[int, Sequence[Any]]]]
"""Given pack ids, yields each pack's id with its blobs (its JSON array), one pack at a time;
raises `RecordedInputsError` for a pack that is missing or unreadable."""


def is_shared(document: Mapping[str, Any]) -> bool:
    """The root of a decision written for the shared layout (not the inline form)."""
    return "objects" in document


def resolve(document: Mapping[str, Any], load: PackLoader) -> Iterator[tuple[str, Any]]:
    """Every object the root references, as (tag, JSON) with the inline form's tags
    ("nodes", "pods", "pdbs", ...): structure first, then each leaf pack read once. Checks
    each reference and each blob's shape; `RecordedInputsError` for what is not one."""
    objects = document["objects"]
    if not isinstance(objects, Mapping):
        raise RecordedInputsError("recorded inputs unreadable: 'objects' is not an object")
    # 1) buckets of each collection
    wanted: dict[str, list[Ref]] = {}
    for name in COLLECTIONS:
        refs = objects.get(name, [])
        if not isinstance(refs, list) or len(refs) > BUCKETS:
            raise RecordedInputsError(
                f"recorded inputs unreadable: {name} is not {BUCKETS} buckets"
            )
        wanted[name] = [_checked_ref(ref, name) for ref in refs if ref is not None]
    buckets = _blobs(load, [(name, ref) for name, refs in wanted.items() for ref in refs])
    leaves: list[tuple[str, Ref]] = []
    entries: list[tuple[str, Ref]] = []
    for (name, _), body in buckets:
        if not isinstance(body, list):
            raise RecordedInputsError(f"recorded inputs unreadable: a {name} bucket is no list")
        target = entries if name == "nodes" else leaves
        tag = "entry" if name == "nodes" else _TAGS[name]
        target.extend((tag, _checked_ref(ref, name)) for ref in body)
        _cap(len(leaves) + len(entries))
    # 2) node entries: each node's Node and pods
    for _, entry in _blobs(load, entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("pods"), list):
            raise RecordedInputsError("recorded inputs unreadable: a node entry is no entry")
        if entry.get("node") is not None:
            leaves.append(("nodes", _checked_ref(entry["node"], "node")))
        leaves.extend(("pods", _checked_ref(ref, "pod")) for ref in entry["pods"])
        _cap(len(leaves))
    # 3) the objects, each leaf pack read once
    for (tag, _), blob in _blobs(load, leaves):
        yield tag, blob


def _cap(count: int) -> None:
    if count > MAX_OBJECTS:
        raise RecordedInputsError(
            f"recorded inputs reference more than {MAX_OBJECTS:,} objects; refused"
        )


def _checked_ref(ref: Any, what: str) -> Ref:
    if (
        not isinstance(ref, list | tuple)
        or len(ref) != 2
        or not all(type(part) is int and part >= 0 for part in ref)
    ):
        raise RecordedInputsError(f"recorded inputs unreadable: a {what} reference is {ref!r:.60}")
    return ref


def _blobs(load: PackLoader, refs: list[tuple[str, Ref]]) -> Iterator[tuple[tuple[str, Ref], Any]]:
    """Each reference's blob, pack by pack (in pack order)."""
    by_pack: dict[int, list[tuple[str, Ref]]] = {}
    for tagged in refs:
        by_pack.setdefault(tagged[1][0], []).append(tagged)
    for pack_id, blobs in load(sorted(by_pack)):
        for tagged in by_pack.pop(pack_id, ()):
            index = tagged[1][1]
            if index >= len(blobs):
                raise RecordedInputsError(
                    f"recorded inputs unreadable: pack {pack_id} has no blob {index}"
                )
            yield tagged, blobs[index]
    if by_pack:
        missing = ", ".join(map(str, sorted(by_pack)[:5]))
        raise RecordedInputsError(f"recorded inputs incomplete: pack(s) {missing} not found")
