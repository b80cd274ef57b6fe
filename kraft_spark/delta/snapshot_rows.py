"""The ``snapshot`` table's rows with etcd's view of each key (``create_revision``,
``mod_revision``, ``version``, ``lease``), made by the state machine's own code
(``kraft_spark.state.judged_replay``): the table can never disagree with what the etcd API's
Range and the HTTP API answer for the same offset.

A commit of ``snapshot`` for the range ``[start, end)`` reads the table's rows of the keys the
range changes (the state as of ``start``: the table holds everything below it), seeds a
``JudgedReplay`` with them, replays the range with the observer's judgement of it and writes
each key's resulting ``Entry``. A row written before the revision columns existed (null
``create_revision`` / ``version``) seeds an entry of unknown creation: the key's new row keeps
them null until the key is created again (``mod_revision`` and ``lease`` are exact from its
first write on); docs/concepts/delta-tables.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.judged_replay import UNKNOWN_CREATE, JudgedReplay
from kraft_spark.state.machine import Entry
from kraft_spark.state.outcomes import FailedTxn
from kraft_spark.store.leases import LEASE_DELETED_HEADER
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER, decode_header

# The snapshot columns a seed is read from (older tables hold nulls in the last four).
SEED_COLUMNS = ("key", "offset", "create_revision", "mod_revision", "version", "lease")


def text_key(raw: bytes) -> bytes:
    """A key as the tables hold it (UTF-8 text; undecodable bytes become U+FFFD), as bytes: the
    replay's key space, so the table's rows seed exactly the keys the log's records write."""
    return raw.decode("utf-8", errors="replace").encode()


@dataclass(frozen=True, slots=True)
class Judgement:
    """The full state machine's judgement of a range: failed groups by first offset, and the
    keys each lease revocation or expiry deleted (``KeyValueState.known_outcomes``)."""

    failed: Mapping[int, FailedTxn] = field(default_factory=dict)
    deleted: Mapping[int, Sequence[bytes]] = field(default_factory=dict)

    def failed_size(self, offset: int) -> int:
        failure = self.failed.get(offset)
        return 0 if failure is None else failure.size

    def deleted_by(self, offset: int) -> list[bytes]:
        return [text_key(k) for k in self.deleted.get(offset, ())]


def seed_entry(offset: int, create_revision: int | None, mod_revision: int | None,
               version: int | None, lease: int | None) -> Entry:
    """A ``snapshot`` row as the entry it was made from (only the revisions matter: every key
    the replay writes gets a new value, epoch and timestamp)."""
    mod = offset if mod_revision is None else mod_revision
    if create_revision is None or version is None:
        return Entry(b"", mod, 0, 0, UNKNOWN_CREATE, 0, lease or 0)
    return Entry(b"", mod, 0, 0, create_revision, version, lease or 0)


def snapshot_rows(batches: Sequence[Batch], start: int,
                  latest: Mapping[str, tuple[Any, ...]],
                  prior: Mapping[str, Entry], judgement: Judgement) -> list[tuple[Any, ...]]:
    """Rows for the MERGE of ``snapshot`` (``arrow_rows.MERGE_SOURCE_SCHEMA``, timestamps in
    epoch milliseconds, a null value deleting the key) for the keys of ``latest`` (the last
    change per key at offsets >= ``start``: ``log_rows.Rows.latest``), ``prior`` their entries
    as of ``start`` (``seed_entry``; a key absent there did not exist). A key deleted that
    ``prior`` does not hold (created and deleted since) has no row. Raises RuntimeError if
    the replay and ``latest`` disagree on whether a key is live (a bug, never guessed)."""
    if not latest:
        return []
    replay = JudgedReplay(((k.encode(), e) for k, e in prior.items()),
                          judgement.failed_size, judgement.deleted_by)
    replay.replay(_in_text_keys(batches, start), start)
    out = []
    for key, change in latest.items():
        _key, value, offset, epoch, timestamp_ms = change[:5]
        entry = replay.get(key.encode())
        if (entry is None) != (value is None):
            raise RuntimeError(
                f"snapshot row of {key!r} at offset {offset}: the state machine's replay from "
                f"{start} says {'absent' if entry is None else 'live'}")
        if entry is None:
            if key in prior:  # a key absent from the table too changes nothing (and a MERGE
                # that changes nothing makes no commit in delta-rs: the offsets would not move)
                out.append((key, None, offset, epoch, timestamp_ms, None, None, None, None))
        else:
            out.append(entry_row(key, value, offset, entry))
    return out


def entry_row(key: str, value: str, offset: int, entry: Entry) -> tuple[Any, ...]:
    """The ``snapshot`` row of a live key: ``offset`` the log offset of the record that last
    wrote it, the rest its ``Entry``."""
    unknown = entry.create_offset == UNKNOWN_CREATE
    return (key, value, offset, entry.epoch, entry.timestamp_ms,
            None if unknown else entry.create_offset, entry.offset,
            None if unknown else entry.version, entry.lease)


def _in_text_keys(batches: Iterable[Batch], start: int) -> list[Batch]:
    """``batches`` from ``start`` on with each key as the tables hold it (``text_key``)."""
    out = []
    for batch in batches:
        if batch.next_offset <= start or batch.is_control:
            continue
        records = tuple(
            r if r.key is None or r.key.isascii()
            else Record(text_key(r.key), r.value, r.timestamp_ms, r.headers)
            for r in batch.records)
        out.append(Batch(batch.base_offset, batch.epoch, records))
    return out


def prior_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, Entry]:
    """``prior`` for ``snapshot_rows`` from the table's rows (``SEED_COLUMNS``; absent
    columns of a table not yet given them read as null)."""
    return {row["key"]: seed_entry(row["offset"], row.get("create_revision"),
                                   row.get("mod_revision"), row.get("version"),
                                   row.get("lease"))
            for row in rows}


def read_prior_rs(delta: Any, keys: Sequence[str]) -> dict[str, Entry]:
    """``prior`` from the delta-rs ``snapshot`` table ``delta`` (``rs_merge.open_table``)."""
    if not keys:
        return {}
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    names = {f.name for f in delta.schema().fields}
    columns = [c for c in SEED_COLUMNS if c in names]
    # Filtered here, not in the scan: a scan filter on the key column trips over delta-rs's
    # string_view columns against the files' string statistics (deltalake 1.6, pyarrow 26).
    # Only the key and revision columns are read, never the values.
    table = delta.to_pyarrow_table(columns=columns)
    table = table.filter(pc.is_in(table.column("key").cast(pa.string()),
                                  value_set=pa.array(list(keys), pa.string())))
    return prior_from_rows(table.to_pylist())


def read_prior_spark(spark: Any, path: str, keys: Sequence[str]) -> dict[str, Entry]:
    """``prior`` from the ``snapshot`` table at ``path``, read with Spark."""
    from pyspark.sql import functions as F

    if not keys:
        return {}
    frame = spark.read.format("delta").load(path)
    columns = [c for c in SEED_COLUMNS if c in frame.columns]
    rows = frame.where(F.col("key").isin(list(keys))).select(*columns).collect()
    return prior_from_rows(r.asDict() for r in rows)


def log_from_records(rows: Iterable[tuple[int, int, int, str | None, str | None,
                                          Mapping[str, str | None]]],
                     ) -> tuple[list[Batch], Judgement]:
    """The log and its judgement back from ``records`` rows (offset, epoch, timestamp_ms, key,
    value, headers), in offset order: runs of consecutive offsets of one epoch as batches (a
    group never spans batches, so none is cut), the failures from ``kraft.txn.outcome``, the
    lease deletions from ``kraft.lease.deleted``."""
    batches: list[Batch] = []
    run: list[Record] = []
    run_start = run_epoch = -1
    failed: dict[int, FailedTxn] = {}
    deleted: dict[int, list[bytes]] = {}
    for offset, epoch, timestamp_ms, key, value, headers in rows:
        if offset != run_start + len(run) or epoch != run_epoch:
            if run:
                batches.append(Batch(run_start, run_epoch, tuple(run)))
            run, run_start, run_epoch = [], offset, epoch
        if headers.get(OUTCOME_HEADER) is not None:
            failed[offset] = FailedTxn(_group_size(headers.get(TXN_HEADER)), (),
                                       "failed (records)")
        gone = headers.get(LEASE_DELETED_HEADER)
        if gone is not None:
            deleted[offset] = [k.encode() for k in json.loads(gone)]
        kept = tuple((k, None if v is None else v.encode()) for k, v in sorted(headers.items())
                     if k not in (OUTCOME_HEADER, LEASE_DELETED_HEADER))
        run.append(Record(None if key is None else key.encode(),
                          None if value is None else value.encode(), timestamp_ms, kept))
    if run:
        batches.append(Batch(run_start, run_epoch, tuple(run)))
    return batches, Judgement(failed, deleted)


def _group_size(raw: str | None) -> int:
    """The size of the failed group a row starts: its ``kraft.txn`` header's, or 1 (a lone
    lease write or operation, or a malformed header, which fails alone)."""
    if raw is None:
        return 1
    try:
        return decode_header(raw.encode())[0]
    except ValueError:
        return 1
