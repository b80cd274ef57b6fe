"""Shared builders for the storage tests."""

from __future__ import annotations

from kraft_spark.raft.records import Batch, Record


def make_batch(base_offset: int, epoch: int, count: int = 3, value_size: int = 20) -> Batch:
    """A data batch whose record contents are a function of offset and epoch only."""
    records = tuple(
        Record(
            key=f"k{base_offset + i}".encode(),
            value=bytes([(base_offset + i + epoch) % 256]) * value_size,
            timestamp_ms=1_000 + base_offset + i,
        )
        for i in range(count)
    )
    return Batch(base_offset=base_offset, epoch=epoch, records=records)


def fill(log: object, epochs: list[int], count: int = 3, value_size: int = 20) -> list[Batch]:
    """Append one batch per entry of ``epochs`` at the log end; return them."""
    from kraft_spark.log import SegmentedLog

    assert isinstance(log, SegmentedLog)
    out = []
    for epoch in epochs:
        batch = make_batch(log.end_offset(), epoch, count, value_size)
        log.append(batch)
        out.append(batch)
    return out
