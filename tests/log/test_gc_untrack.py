"""``gc_untrack``: the tail cache's batches leave the cyclic collector's lists, but only the
objects that cannot be part of a reference cycle; the C extension must be built (CI proves it)."""

from __future__ import annotations

import gc

from kraft_spark.log import gc_untrack
from kraft_spark.log.gc_untrack import untrack_batch
from kraft_spark.log.tail_cache import TailCache
from kraft_spark.raft.records import Batch, Record


def batch(base: int, *records: Record) -> Batch:
    return Batch(base_offset=base, epoch=3, records=records)


def test_the_extension_is_built() -> None:
    assert gc_untrack.AVAILABLE


def test_plain_records_and_their_batch_are_untracked() -> None:
    value = b"abc"
    headers = (("trace", value), ("empty", None))  # built at run time: tracked
    b = batch(0, Record(b"k", b"v", 5, headers), Record(None, None, 6))
    assert gc.is_tracked(b) and gc.is_tracked(b.records[0])
    assert untrack_batch(b) >= 4
    assert not gc.is_tracked(b)
    assert not gc.is_tracked(b.records)
    assert all(not gc.is_tracked(r) for r in b.records)
    assert not gc.is_tracked(b.records[0].headers)
    assert untrack_batch(b) == 0  # already done


class Mutable:
    pass


def test_a_record_holding_anything_else_keeps_itself_and_its_batch_tracked() -> None:
    odd = Record(b"k", Mutable(), 5)  # type: ignore[arg-type]
    fine = Record(b"k", b"v", 5)
    b = batch(0, fine, odd)
    untrack_batch(b)
    assert gc.is_tracked(odd)
    assert not gc.is_tracked(fine)
    # The containers stay tracked: they reach an object that could close a cycle.
    assert gc.is_tracked(b.records) and gc.is_tracked(b)


def test_a_header_that_is_not_a_str_bytes_pair_keeps_the_record_tracked() -> None:
    r = Record(b"k", b"v", 5, (("h", [1, 2]),))  # type: ignore[arg-type]
    b = batch(0, r)
    untrack_batch(b)
    assert gc.is_tracked(r) and gc.is_tracked(b)


def test_a_batch_of_another_type_is_left_alone() -> None:
    class Other:
        __slots__ = ("records",)

        def __init__(self) -> None:
            self.records = (Record(b"k", b"v", 5),)

    other = Other()
    assert untrack_batch(other) == 0  # type: ignore[arg-type]
    assert gc.is_tracked(other.records[0])


def test_the_tail_cache_untracks_what_it_keeps_and_the_values_survive() -> None:
    cache = TailCache(1 << 20)
    batches = [batch(i * 2, Record(b"k%d" % i, b"v" * 50, i), Record(None, b"w", i))
               for i in range(100)]
    for b in batches:
        cache.add(b, b.size_estimate())
    gc.collect()
    out = cache.read(0, 1 << 20)
    assert out == batches
    assert all(not gc.is_tracked(b) and not gc.is_tracked(b.records[0]) for b in out)
    assert out[42].records[0].key == b"k42"
