"""Leases in the log: grants, revocations, expiries and checkpoints, and the keys attached to
them, applied by the state machine like every other write.

A lease operation is a keyless record (which changes nothing for a reader that ignores it)
with the header ``kraft.lease.op``: compact JSON ``{"op": "grant", "id": N, "ttl_ms": T}``,
``{"op": "revoke", "id": N}``, ``{"op": "expire", "id": N, "after": K}`` or ``{"op":
"checkpoint", "remaining": {"N": MS, ...}}``; ``{"op": "keepalive", "id": N}`` is still applied
(logs written before keep-alives left the log hold them) but no longer written. A key is
attached to a lease by writing it with the header ``kraft.lease`` (the lease id in decimal);
writing it without the header detaches it, deleting it removes it.

**Keep-alives are not in the log** (etcd's design, ``kraft_spark.store.lease_clock``): a
keep-alive reaches the leader, which refreshes its in-memory countdown once it has confirmed it
still leads. What the log holds instead is the leader's *checkpoint* of remaining TTLs: now and
then, for the leases whose countdown ran well below their TTL, ``remaining`` sets each one's
``remaining_ms``; an entry of 0 clears it, and is written by a keep-alive of a lease whose last
checkpoint set one (so at most two writes per lease per checkpoint interval). A new leader
starts a lease's countdown at its ``remaining_ms`` when one is set, else at its full TTL.

**Who decides that a lease expired, and why it is safe.** Only the leader, by its own monotonic
clock (``kraft_spark.store.lease_expiry``), and it says so in the log: ``expire`` names the
lease's ``keepalive_offset`` as the leader saw it (``after``): the offset of the last keep-alive
*the log records* (the grant, an old ``keepalive`` record, or a checkpoint entry clearing the
remaining TTL, which a keep-alive writes). Applying it deletes the lease and its keys *only if*
that is still the lease's ``keepalive_offset``: one recorded in between (a keep-alive that
cleared a checkpoint, a lease revoked and granted again under the same id) voids it. So the
outcome is a pure function of the log (every replica, every replay, every snapshot agree),
followers never expire anything by their clocks, and a deposed leader's expiry either commits
before its successor answers any keep-alive (the successor confirms its leadership, which
commits everything of earlier epochs, before it answers) or never.

A write attached to a lease that does not exist (never granted, expired or revoked) does not
apply: it fails like a conditional write whose condition failed (``FailedTxn.reason``).

**Whose lease it is.** A grant may name its ``owner`` (the HTTP credential that granted it), and
a keep-alive or revocation the credential asking (``by``). One that names a different credential
than the owner fails (``NOT_OWNER``): a lease is kept alive and revoked by whoever holds it, as a
lock must be. An operation without ``by`` (an administrator's, the leader's expiry, a server
without credentials) acts on any lease. The HTTP API fills both fields from the caller's
credential; ``kraft.lease.op`` written directly is refused to HTTP callers and to Kafka
principals the node does not trust (``store.reserved_headers``), so a caller cannot name
someone else.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Final

LEASE_OP_HEADER: Final = "kraft.lease.op"
LEASE_HEADER: Final = "kraft.lease"
# The header the Delta ``records`` table adds (not the log) to a lease revocation or expiry:
# the keys it deleted, as a JSON list (kraft_spark.delta.log_rows).
LEASE_DELETED_HEADER: Final = "kraft.lease.deleted"
MAX_TTL_MS: Final = 24 * 3600 * 1000
MIN_TTL_MS: Final = 500
MAX_NAME_CHARS: Final = 200  # an owner's or a caller's name
NOT_OWNER: Final = "belongs to"  # in the reason of an operation refused to a non-owner
# Versions of lease tables, unique across tables (a snapshot load makes a new one).
_VERSIONS = itertools.count(1)


@dataclass(slots=True)
class Lease:
    lease_id: int
    ttl_ms: int
    granted_offset: int
    # The offset of its last keep-alive the log records: the grant, an old ``keepalive``
    # record, or a checkpoint entry clearing its remaining TTL.
    keepalive_offset: int
    keys: set[bytes] = field(default_factory=set)
    owner: str = ""  # the credential that granted it ("": anyone's)
    # The remaining TTL the leader's last checkpoint set (0: none; a new leader counts the
    # full TTL).
    remaining_ms: int = 0


OPS: Final = ("grant", "keepalive", "revoke", "expire", "checkpoint")


def encode_op(op: str, lease_id: int, **fields: int | str) -> bytes:
    return json.dumps({"op": op, "id": lease_id, **fields}, separators=(",", ":")).encode()


def encode_checkpoint(remaining: dict[int, int]) -> bytes:
    """A checkpoint of remaining TTLs (lease id -> milliseconds; 0 clears the lease's)."""
    body = {"op": "checkpoint", "remaining": {str(i): ms for i, ms in sorted(remaining.items())}}
    return json.dumps(body, separators=(",", ":")).encode()


def owner_refusal(lease: Lease, caller: str | None) -> str:
    """Why ``caller`` (None: an administrator) may not keep alive or revoke ``lease``, or ""."""
    if caller is None or not lease.owner or caller == lease.owner:
        return ""
    return (f"lease {lease.lease_id} {NOT_OWNER} the credential {lease.owner!r}: only it, or a "
            "credential of scope admin, may keep it alive or revoke it")


def _checkpoint_entries(body: dict[str, Any]) -> dict[int, int]:
    entries = body.get("remaining")
    if not isinstance(entries, dict):
        raise ValueError("kraft.lease.op checkpoint needs remaining: {lease id: milliseconds}")
    out: dict[int, int] = {}
    for key, ms in entries.items():
        if not (isinstance(key, str) and key.isdigit() and len(key) <= 19) \
                or not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= MAX_TTL_MS:
            raise ValueError(f"kraft.lease.op checkpoint entries are lease id: 0..{MAX_TTL_MS} "
                             f"milliseconds, got {str(key)[:20]!r}: {str(ms)[:20]}")
        out[int(key)] = ms
    return out


def decode_op(raw: bytes | None) -> dict[str, Any]:
    """Raises ValueError naming what is wrong."""
    try:
        body = json.loads(raw or b"")
    except (ValueError, RecursionError):
        # RecursionError: JSON nested past the interpreter's depth. Any writer can send one
        # and every replica applies it: it must fail this record, not the state machine.
        raise ValueError("kraft.lease.op is not JSON (or nested too deeply)") from None
    if not isinstance(body, dict) or body.get("op") not in OPS:
        raise ValueError("kraft.lease.op needs op grant, keepalive, revoke, expire or "
                         "checkpoint")
    if body["op"] == "checkpoint":
        body["remaining"] = _checkpoint_entries(body)
        return body
    for name in ("id", *({"grant": ("ttl_ms",), "expire": ("after",)}.get(body["op"], ()))):
        value = body.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"kraft.lease.op {name} is a non-negative integer")
    for name in ("owner", "by"):
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_NAME_CHARS):
            raise ValueError(f"kraft.lease.op {name} is a name of at most {MAX_NAME_CHARS} "
                             "characters")
    return body


def lease_of(raw: bytes | None) -> int:
    """The lease id of a ``kraft.lease`` header; ValueError if malformed."""
    text = (raw or b"").decode("ascii", errors="replace")
    if not text.isdigit() or len(text) > 19:
        raise ValueError(f"kraft.lease must be a lease id, got {text[:20]!r}")
    return int(text)


class LeaseTable:
    """The leases in force, as of the state's applied offset."""

    __slots__ = ("deleted", "leases", "version")

    def __init__(self) -> None:
        self.leases: dict[int, Lease] = {}
        # Changes whenever a lease operation applies (or a snapshot loads): the leader's
        # countdowns (``lease_clock``) look at the leases again only then.
        self.version = next(_VERSIONS)
        # Offset of a revoke / expire that deleted keys -> those keys (for watches: they are
        # not records of their own); kept for the state's outcome window.
        self.deleted: dict[int, tuple[bytes, ...]] = {}

    def apply(self, body: dict[str, Any], offset: int) -> tuple[str, list[bytes]]:
        """Apply a decoded operation at ``offset``: (why it failed, or "", keys to delete)."""
        op = body["op"]
        self.version = next(_VERSIONS)
        if op == "checkpoint":
            self._checkpoint(body["remaining"], offset)
            return "", []
        lease_id = body["id"]
        lease = self.leases.get(lease_id)
        if op == "grant":
            if lease is not None:
                return f"lease {lease_id} already exists", []
            ttl = body["ttl_ms"]
            if not MIN_TTL_MS <= ttl <= MAX_TTL_MS:
                return f"ttl_ms {ttl} is outside {MIN_TTL_MS}..{MAX_TTL_MS}", []
            self.leases[lease_id] = Lease(lease_id, ttl, offset, offset,
                                          owner=body.get("owner") or "")
            return "", []
        if lease is None:
            return f"lease {lease_id} not found (expired or revoked)", []
        refused = owner_refusal(lease, body.get("by"))
        if refused:
            return refused, []
        if op == "keepalive":  # written before keep-alives left the log
            lease.keepalive_offset = offset
            lease.remaining_ms = 0
            return "", []
        if op == "expire" and body["after"] != lease.keepalive_offset:
            return f"lease {lease_id} was kept alive at {lease.keepalive_offset}", []
        del self.leases[lease_id]
        doomed = sorted(lease.keys)
        if doomed:
            self.deleted[offset] = tuple(doomed)
        return "", doomed

    def _checkpoint(self, remaining: dict[int, int], offset: int) -> None:
        """Set (or, with 0, clear) remaining TTLs; a lease gone meanwhile is skipped. A clear
        is a keep-alive the log records: it moves ``keepalive_offset`` (voiding an expiry
        decided before it)."""
        for lease_id, ms in remaining.items():
            lease = self.leases.get(lease_id)
            if lease is None:
                continue
            lease.remaining_ms = ms
            if ms == 0:
                lease.keepalive_offset = offset

    def attach(self, key: bytes, lease_id: int, previous: int) -> None:
        """``key`` is now written with ``lease_id`` (0: none), before with ``previous``."""
        if previous and previous != lease_id:
            old = self.leases.get(previous)
            if old is not None:
                old.keys.discard(key)
        if lease_id:
            self.leases[lease_id].keys.add(key)

    def deleted_at(self, offset: int) -> tuple[bytes, ...]:
        return self.deleted.get(offset, ())

    def forget_deleted_before(self, offset: int) -> None:
        if self.deleted and next(iter(self.deleted)) < offset:
            self.deleted = {o: k for o, k in self.deleted.items() if o >= offset}

    def export(self, since: int = 0) -> dict[str, Any]:
        """What a snapshot stores: the leases (``[id, ttl_ms, granted, last keep-alive]``,
        then the owner when there is one or a remaining TTL is set, then that remaining TTL
        when set) and the deletions at or after ``since`` (``[offset, [key hex, ...]]``)."""
        return {"leases": [[x.lease_id, x.ttl_ms, x.granted_offset, x.keepalive_offset,
                            *((x.owner,) if x.owner or x.remaining_ms else ()),
                            *((x.remaining_ms,) if x.remaining_ms else ())]
                           for _, x in sorted(self.leases.items())],
                "deleted": [[o, [k.hex() for k in keys]]
                            for o, keys in sorted(self.deleted.items()) if o >= since]}

    def load(self, data: dict[str, Any], keys: dict[int, set[bytes]]) -> None:
        """Raises ValueError (or TypeError) if ``data`` is malformed."""
        self.leases = {}
        self.version = next(_VERSIONS)
        for entry in data.get("leases", []):
            # No owner in snapshots written before owners, no remaining TTL before checkpoints.
            i, t, g, k, *rest = entry
            owner = rest[0] if rest else ""
            remaining = rest[1] if len(rest) > 1 else 0
            if len(rest) > 2 or not isinstance(owner, str) or not isinstance(remaining, int):
                raise ValueError(f"a lease entry of a snapshot is malformed: {entry!r}")
            self.leases[int(i)] = Lease(int(i), int(t), int(g), int(k),
                                        set(keys.get(int(i), ())), owner, remaining)
        self.deleted = {int(o): tuple(bytes.fromhex(k) for k in ks)
                        for o, ks in data.get("deleted", [])}
