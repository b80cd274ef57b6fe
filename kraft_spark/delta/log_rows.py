"""Committed Raft batches as the rows of the three Delta tables (pure: no Spark, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kraft_spark.delta.snapshot_rows import Judgement
from kraft_spark.raft.records import (
    CONTROL_TYPE_LEADER_CHANGE,
    Batch,
    control_type_of,
    decode_leader_change,
)
from kraft_spark.raft.voter_records import voters_in
from kraft_spark.raft.voter_set import directory_text
from kraft_spark.state.judged_replay import write_revisions
from kraft_spark.state.machine import FailedTxn
from kraft_spark.store.auth import AUTH_OP_HEADER
from kraft_spark.store.leases import LEASE_DELETED_HEADER, LEASE_OP_HEADER
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER


@dataclass(slots=True)
class Rows:
    records: list[tuple[Any, ...]]  # in tables.RECORDS_SCHEMA's order
    events: list[tuple[Any, ...]]
    # key -> (key, value, offset, epoch, timestamp_ms), the last change per key in the call.
    latest: dict[str, tuple[Any, ...]]


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def rows_from(batches: Sequence[Batch], start: int,
              failed_txns: Mapping[int, FailedTxn] | None = None,
              lease_deleted: Mapping[int, Sequence[bytes]] | None = None) -> Rows:
    """Rows of every table for the records at offsets >= ``start``.

    ``failed_txns``: the conditional writes among them that failed (the state machine's
    judgement, ``KeyValueState.failed_txns``, first offset -> size): their ``records`` rows
    carry the header ``kraft.txn.outcome: failed`` and they change nothing in ``snapshot``.
    Without it, a batch holding a conditional write raises ValueError rather than guess.
    ``lease_deleted``: the keys each lease revocation or expiry deleted (by its offset): its
    ``records`` row lists them in the header ``kraft.lease.deleted`` (a JSON list) and they
    leave ``snapshot``. A lease write or lease operation the state machine refused (in
    ``failed_txns`` too) is marked failed like a conditional write. Each ``records`` row ends
    with the revision of the write (``judged_replay.write_revisions``; None: it wrote no key
    or failed)."""
    rows = Rows(records=[], events=[], latest={})
    judgement = Judgement(failed_txns or {})
    revisions = write_revisions(batches, start, judgement.failed_size)
    for batch in batches:
        if batch.next_offset <= start:
            continue
        failed_until = -1  # offsets below this belong to a failed conditional write
        for index, record in enumerate(batch.records):
            offset = batch.base_offset + index
            if offset < start:
                continue
            if batch.is_control:
                voters = voters_in(batch)
                if voters is not None:
                    # KIP-853: a voter-set change; no leader is named (-1), nobody granted.
                    rows.events.append((offset, batch.epoch, -1, list(voters.ids()), [],
                                        record.timestamp_ms,
                                        [directory_text(v.directory_id) for v in voters.voters],
                                        None))
                    continue
                if control_type_of(record.key) != CONTROL_TYPE_LEADER_CHANGE:
                    continue  # other control records (kraft.version) carry no rows
                if record.value is None:
                    raise ValueError(f"LeaderChange record at offset {offset} has no value")
                change = decode_leader_change(record.value)
                rows.events.append(
                    (
                        offset,
                        batch.epoch,
                        change.leader_id,
                        list(change.voters),
                        list(change.granting_voters),
                        record.timestamp_ms,
                        None,
                        None,
                    )
                )
                continue
            key = _text(record.key)
            value = _text(record.value)
            headers = {name: _text(data) for name, data in record.headers}
            if TXN_HEADER in headers and failed_txns is None:
                raise ValueError(f"offset {offset} starts a conditional write: materializing "
                                 "it needs the state machine's outcomes (failed_txns)")
            # A failed group starts at a record with headers: a conditional write's first, or a
            # lone lease write or lease operation the state machine refused.
            failure = failed_txns.get(offset) if failed_txns and record.headers else None
            if failure is not None:
                failed_until = offset + failure.size
            if offset < failed_until:
                headers[OUTCOME_HEADER] = "failed"
            deleted = lease_deleted.get(offset, ()) if lease_deleted and key is None else ()
            if deleted:
                names = [_text(k) or "" for k in deleted]
                headers[LEASE_DELETED_HEADER] = json.dumps(names, separators=(",", ":"))
                for name in names:
                    rows.latest[name] = (name, None, offset, batch.epoch, record.timestamp_ms)
            rows.records.append((offset, batch.epoch, record.timestamp_ms, key, value, headers,
                                 revisions.get(offset)))
            if (key is not None and offset >= failed_until and LEASE_OP_HEADER not in headers
                    and AUTH_OP_HEADER not in headers):  # an operation writes no key
                rows.latest[key] = (key, value, offset, batch.epoch, record.timestamp_ms)
    return rows
