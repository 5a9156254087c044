"""A list's pages are bounded in bytes as well as in objects (issue 20, finding 2).

The API server's `limit` counts objects; a tenant decides how large each one is. The
reflector asks each page for as many objects as the pages before it say fit in the target
bytes (`PageSize`), and a page longer than the most it reads is dropped and asked for again,
from the same continue token, with fewer.

Scenarios (`PageSize`, exact values):
- it starts at `page_size`, and a page of small objects keeps it there;
- a page of large objects shrinks it to what fits in the target at that page's bytes per
  object, never below one;
- it grows back at most twofold per page;
- a page refused with its length declared shrinks it to what that length says fits, at most
  to half; refused without a length, to an eighth;
- a page of one object is read whole, whatever its length;
- an empty page changes nothing; a page size below one is refused.

Scenarios (the reflector, over a scripted API server that pages by limit/continue and
refuses what its client would refuse):
- ordinary objects are listed in pages of `page_size`, as before;
- a page too large is asked for again from the same continue token, with fewer objects;
- no page read is longer than the most allowed, except a page of one object; every object
  reaches the sink once, in order;
- after the large objects the page size grows back twofold per page;
- an object longer than the most allowed is read alone, and the list completes;
- a relist starts from the page size the last list learned.

Scenario (the reflector over the emulator, through the real client): pods of 40 KB among
small ones are listed a few at a time, every page under the most allowed, and the list holds
every pod.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from preemptctl.emulator import Emulator
from preemptctl.emulator.resources import PODS
from preemptctl.kube.client import KubeClient, ListPage, PageTooLarge
from preemptctl.kube.reflector import (
    POD,
    Backoff,
    Kind,
    Obj,
    PageSize,
    Reflector,
    Sink,
)
from tests.support.emulator import as_list, node, pod

KB = 1000
MiB = 1 << 20

# -- PageSize ------------------------------------------------------------------------------


def test_it_starts_at_the_page_size_and_small_objects_keep_it_there() -> None:
    sizes = PageSize(500)
    assert sizes.limit == 500
    sizes.read(500, 500 * 4 * KB)
    assert sizes.limit == 500


def test_large_objects_shrink_it_to_what_fits_in_the_target() -> None:
    sizes = PageSize(500)
    sizes.read(500, 500 * 1_350_000)  # 8 MiB at 1.35 MB an object: 6
    assert sizes.limit == 6


def test_it_never_shrinks_below_one() -> None:
    sizes = PageSize(500, target_bytes=1 * MiB)
    sizes.read(1, 3 * MiB)
    assert sizes.limit == 1


def test_it_grows_back_at_most_twofold_per_page() -> None:
    sizes = PageSize(500, limit=6)
    sizes.read(6, 6 * 4 * KB)
    assert sizes.limit == 12
    sizes.read(12, 12 * 4 * KB)
    assert sizes.limit == 24


def test_a_page_refused_with_its_length_shrinks_to_what_that_length_says_fits() -> None:
    sizes = PageSize(500)
    sizes.refused(PageTooLarge(32 * MiB, 0, 500 * 1_350_000))
    assert sizes.limit == 6


def test_a_page_refused_with_its_length_shrinks_at_least_to_half() -> None:
    sizes = PageSize(500, target_bytes=8 * MiB, max_bytes=32 * MiB)
    sizes.refused(PageTooLarge(32 * MiB, 0, 33 * MiB))  # 121 would fit, if the page was full
    assert sizes.limit == 121
    sizes = PageSize(500, target_bytes=8 * MiB, max_bytes=32 * MiB, limit=100)
    sizes.refused(PageTooLarge(32 * MiB, 0, 33 * MiB))  # 24 fit; half is 50
    assert sizes.limit == 24
    sizes = PageSize(500, target_bytes=20 * MiB, max_bytes=32 * MiB, limit=100)
    sizes.refused(PageTooLarge(32 * MiB, 0, 33 * MiB))  # 60 would fit: half is the most
    assert sizes.limit == 50


def test_a_page_refused_without_its_length_shrinks_to_an_eighth() -> None:
    sizes = PageSize(500)
    sizes.refused(PageTooLarge(32 * MiB, 32 * MiB + 1, None))
    assert sizes.limit == 62
    sizes.refused(PageTooLarge(32 * MiB, 32 * MiB + 1, None))
    assert sizes.limit == 7
    sizes.refused(PageTooLarge(32 * MiB, 32 * MiB + 1, None))
    assert sizes.limit == 1


def test_a_page_of_one_object_is_read_whole() -> None:
    assert PageSize(500).byte_limit == 32 * MiB
    assert PageSize(500, max_bytes=1 * MiB, limit=2).byte_limit == 1 * MiB
    assert PageSize(500, limit=1).byte_limit is None


def test_an_empty_page_changes_nothing() -> None:
    sizes = PageSize(500, limit=6)
    sizes.read(0, 120)
    assert sizes.limit == 6


def test_a_page_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one object, not 0"):
        PageSize(0)


# -- the reflector over a scripted API server ----------------------------------------------


def sized(name: str, size: int) -> Obj:
    """A pod whose JSON, as the scripted server counts it, is `size` bytes."""
    return {
        "metadata": {"name": name, "namespace": "t", "uid": name, "resourceVersion": "1"},
        "size": size,
    }


@dataclass
class Asked:
    offset: int
    limit: int
    max_bytes: int | None
    size: int | None  # None: refused


class _PagedServer:
    """Serves `objects` by limit/continue (the continue token is the offset); a page whose
    length (the sum of its objects' `size`) passes `max_bytes` is refused as the client
    refuses a declared length. The watch that follows the list stops the reflector."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.asked: list[Asked] = []
        self.reflector: Reflector | None = None

    def read_list(
        self, path: str, query: dict[str, str], *, max_bytes: int | None = None
    ) -> ListPage:
        offset = int(query.get("continue") or 0)
        limit = int(query["limit"])
        items = self.objects[offset : offset + limit]
        size = sum(obj["size"] for obj in items)
        if max_bytes is not None and size > max_bytes:
            self.asked.append(Asked(offset, limit, max_bytes, None))
            raise PageTooLarge(max_bytes, 0, size)
        self.asked.append(Asked(offset, limit, max_bytes, size))
        end = offset + limit
        meta = {"resourceVersion": "7"}
        if end < len(self.objects):
            meta["continue"] = str(end)
        return ListPage({"metadata": meta, "items": items}, size)

    def stream(self, path: str, query: dict[str, str], read_timeout: float) -> Any:
        assert self.reflector is not None
        self.reflector.stop()
        return _Closed()


class _Closed:
    def __iter__(self) -> Iterator[bytes]:
        return iter(())

    def release_conn(self) -> None:
        pass


class _Sink(Sink):
    def __init__(self) -> None:
        self.listed: list[str] = []

    def replace_page(self, kind: Kind, objects: list[Obj]) -> None:
        self.listed.extend(obj["metadata"]["name"] for obj in objects)

    def finish_relist(self, kind: Kind, seen: set[str]) -> None:
        pass

    def known_version(self, kind: Kind, key: str) -> str | None:
        return None

    def reject(self, kind: Kind, obj: Any, error: Exception) -> None:
        raise AssertionError(f"rejected {obj}: {error}")


def listed(
    objects: list[Obj], sizes: PageSize, sink: _Sink | None = None
) -> tuple[_PagedServer, _Sink, Reflector]:
    """One list of `objects` by a reflector paging with `sizes`."""
    server = _PagedServer(objects)
    sink = sink or _Sink()
    reflector = Reflector(cast(KubeClient, server), POD, sink, backoff=Backoff(0.001, 0.001))
    reflector.page_size = sizes
    server.reflector = reflector
    reflector.run()
    return server, sink, reflector


def small(prefix: str, count: int) -> list[Obj]:
    return [sized(f"{prefix}-{index:02d}", 1 * KB) for index in range(count)]


def mixed() -> list[Obj]:
    """30 objects of 1 KB, 10 of 30 KB, 30 of 1 KB."""
    large = [sized(f"b-{index:02d}", 30 * KB) for index in range(10)]
    return small("a", 30) + large + small("c", 30)


def bounded() -> PageSize:
    """20 objects a page at most, aiming at 40 KB, never reading past 100 KB."""
    return PageSize(20, target_bytes=40 * KB, max_bytes=100 * KB)


def test_ordinary_objects_are_listed_in_pages_of_the_page_size() -> None:
    server, sink, _ = listed(small("a", 70), bounded())
    assert [(a.offset, a.limit) for a in server.asked] == [(0, 20), (20, 20), (40, 20), (60, 20)]
    assert len(sink.listed) == 70


def test_a_page_too_large_is_asked_for_again_from_the_same_token_with_fewer() -> None:
    server, _, reflector = listed(mixed(), bounded())
    # 10 of 1 KB and 10 of 30 KB: 310 KB declared; 40 KB * 20 / 310 KB: 2 fit
    assert server.asked[1] == Asked(20, 20, 100 * KB, None)
    assert server.asked[2] == Asked(20, 2, 100 * KB, 2 * KB)
    assert reflector.stats.pages_too_large == 2


def test_no_page_read_passes_the_most_allowed_and_every_object_arrives_once() -> None:
    objects = mixed()
    server, sink, _ = listed(objects, bounded())
    read = [a for a in server.asked if a.size is not None]
    assert all(a.size <= 100 * KB for a in read if a.limit > 1)
    assert sink.listed == [obj["metadata"]["name"] for obj in objects]


def test_after_the_large_objects_the_page_size_grows_back_twofold_per_page() -> None:
    server, _, _ = listed(mixed(), bounded())
    after = [(a.offset, a.limit) for a in server.asked if a.offset >= 40]
    assert after == [(40, 1), (41, 2), (43, 4), (47, 8), (55, 16)]


def test_an_object_longer_than_the_most_allowed_is_read_alone() -> None:
    objects = [sized("a-00", 1 * KB), sized("huge", 150 * KB), sized("c-00", 1 * KB)]
    server, sink, _ = listed(objects, bounded())
    assert [(a.offset, a.limit, a.max_bytes, a.size) for a in server.asked] == [
        (0, 20, 100 * KB, None),  # 152 KB declared: 40 KB * 20 / 152 KB = 5; half is 10
        (0, 5, 100 * KB, None),  # 152 KB again: 1
        (0, 1, None, 1 * KB),
        (1, 2, 100 * KB, None),  # the huge one and the next: 151 KB: 0 fit, so 1
        (1, 1, None, 150 * KB),  # read whole
        (2, 1, None, 1 * KB),
    ]
    assert sink.listed == ["a-00", "huge", "c-00"]


def test_a_relist_starts_from_the_page_size_the_last_list_learned() -> None:
    objects = [sized(f"b-{index:02d}", 30 * KB) for index in range(4)]
    sizes = bounded()
    listed(objects, sizes)
    assert sizes.limit == 1
    server, _, _ = listed(objects, sizes)
    assert server.asked[0] == Asked(0, 1, None, 30 * KB)


# -- the reflector over the emulator, through the real client ------------------------------


class _Recording:
    """The real client, recording each list page it was asked for: its limit, and its
    length in bytes (None: refused)."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self.pages: list[tuple[int, int | None]] = []

    def read_list(
        self, path: str, query: dict[str, str], *, max_bytes: int | None = None
    ) -> ListPage:
        try:
            page = self._kube.read_list(path, query, max_bytes=max_bytes)
        except PageTooLarge:
            self.pages.append((int(query["limit"]), None))
            raise
        self.pages.append((int(query["limit"]), page.size))
        return page

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


def test_large_pods_among_small_ones_are_listed_a_few_at_a_time(
    emulator: Emulator, kube: KubeClient
) -> None:
    heavy = []
    for index in range(12):
        made = pod(f"heavy-{index:02d}", "b", node_name="n1")
        made["metadata"]["annotations"] = {"blob": "x" * 40_000}
        heavy.append(made)
    emulator.load(
        as_list(
            node("n1"),
            *[pod(f"light-{index:02d}", "a", node_name="n1") for index in range(30)],
            *heavy,
            *[pod(f"light-{index:02d}", "c", node_name="n1") for index in range(30)],
        )
    )
    recording = _Recording(kube)
    sink = _Sink()
    synced = threading.Event()
    reflector = Reflector(
        cast(KubeClient, recording), POD, sink, on_synced=lambda kind: synced.set()
    )
    reflector.page_size = PageSize(50, target_bytes=60_000, max_bytes=150_000)
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    try:
        assert synced.wait(10)
    finally:
        reflector.stop()
        thread.join(5)
    assert recording.pages[0] == (50, None)  # some 500 KB: refused, never read
    read = [(limit, size) for limit, size in recording.pages if size is not None]
    assert all(size <= 150_000 for limit, size in read if limit > 1)
    assert min(limit for limit, _ in read) == 1  # the heavy pods, one at a time
    stored = [p["metadata"]["name"] for p in emulator.store.objects(PODS)]
    assert sorted(sink.listed) == sorted(stored)
    assert len(sink.listed) == 72
