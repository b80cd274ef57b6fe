"""A small committed log and its replay, built from the core's own Batch/Record values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kraft_spark.raft.records import Batch, LeaderChange, Record, leader_change_batch

T0 = 1_700_000_000_000  # ms


def data(base: int, epoch: int, *changes: tuple[str | None, str | None]) -> Batch:
    """A data batch; each change is (key, value), value None for a tombstone."""
    records = tuple(
        Record(
            key=None if key is None else key.encode(),
            value=None if value is None else value.encode(),
            timestamp_ms=T0 + 10 * (base + i),
            headers=(("source", b"test"), ("n", str(base + i).encode()), ("none", None)),
        )
        for i, (key, value) in enumerate(changes)
    )
    return Batch(base_offset=base, epoch=epoch, records=records)


def leader(base: int, epoch: int, leader_id: int, granting: tuple[int, ...]) -> Batch:
    change = LeaderChange(leader_id=leader_id, voters=(0, 1, 2), granting_voters=granting)
    return leader_change_batch(base, epoch, change, T0 + 10 * base)


def log() -> list[Batch]:
    """Inserts, updates, deletes (null value), a null key, non-ASCII text, two leader changes."""
    return [
        leader(0, 1, 0, (0, 1)),
        data(1, 1, ("a", '{"v":1}'), ("b", '{"v":1}'), ("c", '"x"'), ("a", '{"v":2}')),
        data(5, 1, ("b", None), ("d", '{"name":"日本"}'), (None, '"no key"')),
        leader(8, 2, 1, (1, 2)),
        data(9, 2, ("a", None), ("b", '{"v":3}'), ("c", '"y"')),
        data(12, 2, ("d", None), ("e", "[1, 2]"), ("z", None)),
        data(15, 2, ("e", "[3]"),),
    ]


def end(batches: Sequence[Batch]) -> int:
    return batches[-1].next_offset


def record_rows(batches: Sequence[Batch]) -> list[tuple[Any, ...]]:
    """Expected ``records`` rows: (offset, epoch, timestamp_ms, key, value, headers)."""
    out = []
    for batch in batches:
        if batch.is_control:
            continue
        for i, r in enumerate(batch.records):
            out.append(
                (
                    batch.base_offset + i,
                    batch.epoch,
                    r.timestamp_ms,
                    None if r.key is None else r.key.decode(),
                    None if r.value is None else r.value.decode(),
                    {k: None if v is None else v.decode() for k, v in r.headers},
                )
            )
    return out


def event_rows(batches: Sequence[Batch]) -> list[tuple[Any, ...]]:
    """Expected ``quorum_events`` rows: (offset, epoch, leader, voters, granting, timestamp_ms)."""
    from kraft_spark.raft.records import (
        CONTROL_TYPE_LEADER_CHANGE,
        control_type_of,
        decode_leader_change,
    )

    out = []
    for batch in batches:
        if batch.is_control:
            r = batch.records[0]
            assert r.value is not None
            if control_type_of(r.key) != CONTROL_TYPE_LEADER_CHANGE:
                continue
            lc = decode_leader_change(r.value)
            out.append(
                (
                    batch.base_offset,
                    batch.epoch,
                    lc.leader_id,
                    list(lc.voters),
                    list(lc.granting_voters),
                    r.timestamp_ms,
                )
            )
    return out


def replay(batches: Sequence[Batch], upto: int | None = None) -> dict[str, tuple[Any, ...]]:
    """The key-value state after every record at offset <= upto: key -> (value, offset, epoch,
    timestamp_ms)."""
    state: dict[str, tuple[Any, ...]] = {}
    for offset, epoch, ts, key, value, _headers in record_rows(batches):
        if upto is not None and offset > upto:
            break
        if key is None:
            continue
        if value is None:
            state.pop(key, None)
        else:
            state[key] = (value, offset, epoch, ts)
    return state
