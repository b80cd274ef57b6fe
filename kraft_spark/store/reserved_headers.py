"""Who may put the store's reserved record headers into the log: one rule, checked at every
way in.

The store keeps its state in three record headers, applied by every replica's state machine
(``kraft_spark.state.machine``): ``kraft.txn`` (a conditional write, ``store.txn``),
``kraft.lease`` (a key attached to a lease) and ``kraft.lease.op`` (grant, keep-alive,
revocation or expiry of a lease, naming its ``owner`` and the caller, ``by``:
``store.leases``). What a record's headers may hold depends on who sends it (``Standing``):

==================  ======================  =======================  =========================
header              ``TRUSTED``             ``PRINCIPAL``            ``HTTP_CALLER``
==================  ======================  =======================  =========================
``kraft.lease.op``  well-formed, keyless    refused                  refused: ``/v1/leases``
``kraft.txn``       well-formed group       well-formed group        refused: ``"conditions"``
``kraft.lease``     a lease id              a lease id               refused: ``"lease_id"``
==================  ======================  =======================  =========================

* ``TRUSTED``: a Kafka-protocol principal the node trusts to have filled ``by`` and
  ``owner`` itself: one in ``super.users``, the quorum's own identity (a follower's or the
  sidecar's HTTP API forwarding a lease operation it built for its caller), or anyone on a
  listener that authenticates no one (Kafka without an authorizer). The node's own code (its
  HTTP API after this check, the lease expirer) hands records to its core directly and builds
  the headers with the encoders of ``store.txn`` and ``store.leases``.
* ``PRINCIPAL``: any other authenticated Kafka-protocol principal. ``kraft.lease.op`` is
  refused, because its ``by`` is a claim the node cannot check: whoever may write it may keep
  alive, revoke or expire any lease (the state machine's owner check trusts ``by``).
  ``kraft.txn`` and ``kraft.lease`` stay allowed: neither acts on anything a plain write could
  not (any principal may write any key; attaching a key to a lease puts only that key at the
  lease's mercy), and a Produce answers offsets, never outcomes, by Kafka's contract
  (docs/limits.md: read the keys or the ``records`` row's ``kraft.txn.outcome``).
* ``HTTP_CALLER``: the records of ``POST /v1/records`` as the caller wrote them, before the
  API adds its own headers. All three are refused, each pointing to the field that writes it:
  those fields are judged after the commit and answered with the real outcome (409, 404),
  where a header slipped in by hand would be answered 200 whatever the state machine made of
  it.

``kraft.etcd.compact`` (etcd's Compact, ``store.history_feed``: every replica's MVCC history
compacts where it lands) is ``TRUSTED`` only, keyless and valueless with a decimal revision:
it changes no key, but whoever writes it takes every node's past revisions away, so it comes
from etcd's KV.Compact (a caller with write scope, through the node's own code) or from a
principal the node trusts; refused to a ``PRINCIPAL`` and to an ``HTTP_CALLER``.

``kraft.auth.op`` (etcd's users and roles, ``store.auth``) is ``TRUSTED`` only the same way,
keyless and valueless with a JSON object naming its operation: whoever writes it adds users,
grants roles and sets passwords, so it comes from etcd's Auth service (a caller with etcd's
root role, through the node's own code) or from a principal the node trusts.

Two more names are refused to everyone, ``kraft.txn.outcome`` and ``kraft.lease.deleted``:
the Delta materializer adds them to ``records`` rows (a failed conditional write, the keys a
lease's end deleted), and the ``snapshot`` table as of an offset reads them back to skip rows
and delete keys (``kraft_spark.delta.snapshot``). Written into the log by hand, they would make
that table disagree with the state machine: hide a write that applied, delete any key.

A header that may be written must be well-formed; a malformed one is refused at the door
instead of landing in the log as a write that silently does nothing. A refusal names the
record, the header and the fix, and refuses the whole batch: nothing of it is appended.

Pure: no I/O, no clock. ``refusal`` checks a batch, cheap for records without headers (the
Produce path calls it on every batch); ``record_refusal`` one record, for a caller that already
visits only the records with headers (the HTTP API, while it encodes them).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from kraft_spark.store.auth import AUTH_OP_HEADER
from kraft_spark.store.history_feed import COMPACT_HEADER
from kraft_spark.store.leases import (
    LEASE_DELETED_HEADER,
    LEASE_HEADER,
    LEASE_OP_HEADER,
    decode_op,
    lease_of,
)
from kraft_spark.store.txn import OUTCOME_HEADER, TXN_HEADER, decode_header

# Written by the Delta materializer into rows, never into the log (see the module's text).
DERIVED: Final = frozenset((OUTCOME_HEADER, LEASE_DELETED_HEADER))
RESERVED: Final = frozenset((TXN_HEADER, LEASE_HEADER, LEASE_OP_HEADER, COMPACT_HEADER,
                            AUTH_OP_HEADER)) | DERIVED

# What an HTTP caller uses instead of writing each header by hand.
HTTP_FIELDS: Final = {
    LEASE_OP_HEADER: "grant, keep alive and revoke leases with /v1/leases",
    TXN_HEADER: 'give the conditions in the "conditions" field beside "records" (answered '
                "409 when one fails)",
    LEASE_HEADER: 'give "lease_id" beside "records" (answered 404 when the lease does not '
                  "exist)",
    COMPACT_HEADER: "compact with etcd's KV.Compact (etcdctl compaction)",
    AUTH_OP_HEADER: "manage users and roles with etcd's Auth service (etcdctl user, etcdctl "
                    "role) as a user with the root role",
}


class Standing(enum.Enum):
    """Who is asking (see the module's table)."""

    TRUSTED = "trusted"
    PRINCIPAL = "principal"
    HTTP_CALLER = "http caller"


class RecordLike(Protocol):
    """What the rule reads of a record (``Record``, ``NewRecord``)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]: ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a batch may not be appended: the record, the header, and what to do instead."""

    index: int
    header: str
    reason: str

    def __str__(self) -> str:
        return f"records[{self.index}].headers: {self.header} {self.reason}"


def refusal(records: Sequence[RecordLike], standing: Standing,
            who: str = "") -> Refusal | None:
    """The first reason ``records`` (one batch, in order) may not be appended for a caller of
    ``standing`` (``who``: its name, for the message), or None."""
    count = len(records)
    for index, record in enumerate(records):
        if record.headers:
            found = record_refusal(index, record, count - index, standing, who)
            if found is not None:
                return found
    return None


def record_refusal(index: int, record: RecordLike, remaining: int, standing: Standing,
                   who: str = "") -> Refusal | None:
    """Why record ``index`` of a batch may not be appended, or None. ``remaining``: records
    from this one to the batch's end (a conditional group must fit in it)."""
    seen: set[str] = set()
    for name, raw in record.headers:
        if name not in RESERVED:
            continue
        if name in DERIVED:
            return Refusal(index, name, "is reserved: the Delta materializer adds it to the "
                                        "records table, it is never written to the log; name "
                                        "the header otherwise")
        if standing is Standing.HTTP_CALLER:
            return Refusal(index, name, f"is reserved: {HTTP_FIELDS[name]}")
        if name == LEASE_OP_HEADER and standing is Standing.PRINCIPAL:
            return Refusal(index, name, (
                f"is reserved for the store's lease API: {who or 'this principal'} is not "
                "trusted to name who acts on a lease (only super.users and the quorum's own "
                "nodes are); grant, keep alive and revoke leases through the HTTP API's "
                "/v1/leases, which names the caller from its credential"))
        if name == COMPACT_HEADER and standing is Standing.PRINCIPAL:
            return Refusal(index, name, (
                f"is reserved for etcd's KV.Compact: {who or 'this principal'} is not trusted "
                "to compact every node's history (only super.users and the quorum's own nodes "
                "are); compact with etcd's KV.Compact (etcdctl compaction)"))
        if name == AUTH_OP_HEADER and standing is Standing.PRINCIPAL:
            return Refusal(index, name, (
                f"is reserved for etcd's Auth service: {who or 'this principal'} is not "
                "trusted to change users and roles (only super.users and the quorum's own "
                "nodes are); use etcdctl user / etcdctl role as a user with the root role"))
        if name in seen:
            return Refusal(index, name, "appears twice: the state machine would read only "
                                        "the first; send it once")
        seen.add(name)
        problem = _malformed(name, raw, record, remaining)
        if problem:
            return Refusal(index, name, problem)
    if LEASE_OP_HEADER in seen and LEASE_HEADER in seen:
        return Refusal(index, LEASE_HEADER, f"beside {LEASE_OP_HEADER} would be ignored: a "
                                            "lease operation writes no key")
    return None


def _malformed(name: str, raw: bytes | None, record: RecordLike, remaining: int) -> str:
    """What is wrong with reserved header ``name`` (value ``raw``) of ``record``, or ""."""
    try:
        if name == TXN_HEADER:
            size, _ = decode_header(raw)
            if size > remaining:
                return (f"is malformed: its group of {size} records runs past the batch's end "
                        f"({remaining} records from here): send the whole group in one batch")
        elif name == LEASE_HEADER:
            lease_of(raw)
        elif name == AUTH_OP_HEADER:
            try:
                op = json.loads(raw or b"")
            except RecursionError:
                return "is malformed (JSON nested too deeply): fix the header"
            if not isinstance(op, dict) or not isinstance(op.get("op"), str):
                return "is malformed (a JSON object naming its op): fix the header"
            if record.key is not None or record.value is not None:
                return ("is on a record with a key or a value: an auth operation is a keyless "
                        "record without a value")
        elif name == COMPACT_HEADER:
            text = (raw or b"").decode("ascii", errors="replace")
            if not text.isdigit() or len(text) > 19:
                return f"is malformed (a revision in decimal, got {text[:20]!r}): fix the header"
            if record.key is not None or record.value is not None:
                return ("is on a record with a key or a value: a compaction is a keyless "
                        "record without a value")
        else:
            decode_op(raw)
            if record.key is not None or record.value is not None:
                return ("is on a record with a key or a value: a lease operation is a keyless "
                        "record without a value (its key and value would be dropped)")
    except ValueError as exc:
        return f"is malformed ({exc}): fix the header"
    return ""


__all__ = ["DERIVED", "HTTP_FIELDS", "RESERVED", "Refusal", "Standing", "record_refusal", "refusal"]
