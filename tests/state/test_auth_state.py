"""etcd's users and roles as replicated state (``kraft_spark.store.auth``): applied from
``kraft.auth.op`` records by the state machine, the same after a replay from the log and after
loading a snapshot (through the snapshot file's bytes) at any point of it; failed operations
change nothing and say etcd's reason; permissions follow etcd's key, range and from-key rules;
the reserved-header rule keeps the header away from every ordinary writer."""

from __future__ import annotations

import json

import pytest

from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.state.snapshot_file import decode_snapshot, encode_snapshot
from kraft_spark.store.auth import (
    AUTH_OP_HEADER,
    READ,
    READWRITE,
    WRITE,
    Permission,
    Permissions,
    encode_op,
    hash_password,
)
from kraft_spark.store.key_range import prefix_end
from kraft_spark.store.reserved_headers import Standing, refusal

ALICE = hash_password(b"alice-pw")
BOB = hash_password(b"bob-pw")
BOB2 = hash_password(b"bob-pw-2")


def _op(op: str, name: str, **fields: object) -> Record:
    return Record(None, None, 5, ((AUTH_OP_HEADER, encode_op(op, name, **fields)),))


# One batch per step: (records, the reason the first one fails, "" when it applies).
STEPS: list[tuple[list[Record], str]] = [
    ([_op("user_add", "alice", password=ALICE.to_json())], ""),
    ([_op("role_add", "app")], ""),
    ([_op("role_grant", "app", key=b"app/", end=prefix_end(b"app/"), type=READWRITE)], ""),
    ([_op("user_grant", "alice", role="app")], ""),
    ([Record(b"app/x", b"1", 5)], ""),  # ordinary writes interleave
    ([_op("user_add", "alice", password=BOB.to_json())], "user name already exists"),
    ([_op("user_grant", "alice", role="nope")], "role name not found"),
    ([_op("role_add", "root")], "role name already exists"),
    ([_op("role_delete", "writer")], "invalid auth management"),
    ([_op("role_grant", "app", key=b"", end=b"", type=READ)], "invalid auth management"),
    ([_op("user_add", "bob", password=BOB.to_json())], ""),
    ([_op("role_add", "ro")], ""),
    ([_op("role_grant", "ro", key=b"cfg/", end=b"\0", type=READ)], ""),  # from-key
    ([_op("role_grant", "ro", key=b"one", end=b"", type=WRITE)], ""),  # a single key
    ([_op("user_grant", "bob", role="ro"), _op("user_grant", "bob", role="app")], ""),
    ([_op("user_revoke", "bob", role="nope")], "role is not granted to the user"),
    ([_op("role_revoke", "ro", key=b"zzz", end=b"")], "permission is not granted to the role"),
    ([_op("user_password", "bob", password=BOB2.to_json())], ""),
    ([_op("role_delete", "app")], ""),  # taken from alice and bob too
    ([Record(None, None, 5, ((AUTH_OP_HEADER, b'{"op": "user_add"}'),))],
     "malformed kraft.auth.op: 'name'"),
    ([_op("user_delete", "carol")], "user name not found"),
    ([_op("role_add", "app"), _op("user_grant", "alice", role="reader")], ""),
]


def _batches() -> list[Batch]:
    batches, offset = [], 0
    for records, _ in STEPS:
        batches.append(Batch(offset, 1, tuple(records)))
        offset += len(records)
    return batches


def test_operations_apply_or_fail_with_etcds_reason() -> None:
    state = KeyValueState()
    for batch, (_, reason) in zip(_batches(), STEPS, strict=True):
        before = state.auth.export()
        state.apply(batch)
        failure = state.txn_failure(batch.base_offset)
        assert (failure.reason if failure else "") == reason
        if reason:
            assert state.auth.export() == before  # a failure changes nothing
    auth = state.auth
    assert sorted(auth.users) == ["alice", "bob"] and auth.roles["app"] == ()
    assert auth.users["alice"].roles == ("reader",)
    assert auth.users["bob"].roles == ("ro",)  # app went with its deletion
    assert auth.users["bob"].password == BOB2
    assert auth.users["bob"].password.matches(b"bob-pw-2")
    assert not auth.users["bob"].password.matches(b"bob-pw")
    assert auth.revision == sum(1 for records, reason in STEPS if not reason
                                for r in records if r.headers)
    assert state.get(b"app/x") is not None
    bob = auth.permissions("bob")
    assert bob.allows(b"cfg/a", b"", write=False) and bob.allows(b"zzz", b"\0", write=False)
    assert not bob.allows(b"cfg/a", b"", write=True) and not bob.allows(b"app/", b"",
                                                                      write=False)
    assert bob.allows(b"one", b"", write=True) and not bob.allows(b"one0", b"", write=True)
    assert auth.permissions("alice").allows(b"\0", b"\0", write=False)  # the reader role
    assert not auth.permissions("nobody").allows(b"a", b"", write=False)
    stored = json.dumps(auth.export())
    assert "alice-pw" not in stored and ALICE.digest.hex() not in stored  # base64, hashed


@pytest.mark.parametrize("cut", range(len(STEPS) + 1))
def test_replay_from_a_snapshot_equals_replay_from_the_log(cut: int) -> None:
    batches = _batches()
    full, again, before = KeyValueState(), KeyValueState(), KeyValueState()
    full.apply_all(batches)
    again.apply_all(batches)
    assert again.auth.export() == full.auth.export()
    before.apply_all(batches[:cut])
    sid = OffsetAndEpoch(before.applied_offset, 1)
    since, failed, leases = before.outcomes_to_store()
    data = b"".join(encode_snapshot(sid, before.items(), before.producers.export(), 0,
                                    failed_txns=failed, leases=leases, outcomes_from=since))
    content = decode_snapshot(data, sid, "test")
    resumed = KeyValueState()
    resumed.load(content.entries, sid.offset, sid.epoch, content.producers,
                 failed_txns=content.failed_txns, leases=content.leases,
                 outcomes_from=content.outcomes_from)
    assert resumed.auth.export() == before.auth.export()
    resumed.apply_all(batches[cut:])
    assert resumed.auth.export() == full.auth.export()
    assert resumed.auth.revision == full.auth.revision
    assert dict(resumed.items()) == dict(full.items())
    assert resumed.txns_in_window() == full.txns_in_window()


def test_permissions_follow_etcds_ranges() -> None:
    perms = Permissions([Permission(READ, b"a", b"c"), Permission(READ, b"c", b"e"),
                         Permission(READWRITE, b"k", b""), Permission(WRITE, b"x", b"\0")])
    assert perms.allows(b"a", b"e", write=False)  # two touching ranges cover it
    assert not perms.allows(b"a", b"f", write=False)
    assert not perms.allows(b"a", b"\0", write=False)  # from-key is unbounded
    assert perms.allows(b"k", b"", write=True) and not perms.allows(b"k", b"k\0\0",
                                                                   write=True)
    assert perms.allows(b"x", b"\0", write=True) and perms.allows(b"zz", b"", write=True)
    assert not perms.allows(b"x", b"\0", write=False)
    assert not perms.allows(b"", b"", write=False)


def test_only_trusted_writers_may_write_the_header() -> None:
    record = _op("role_add", "r")
    assert refusal([record], Standing.TRUSTED) is None
    principal = refusal([record], Standing.PRINCIPAL, "User:bob")
    assert principal is not None and "User:bob is not trusted" in str(principal)
    http = refusal([record], Standing.HTTP_CALLER)
    assert http is not None and "etcdctl user" in str(http)
    keyed = Record(b"k", b"v", 5, record.headers)
    assert "keyless" in str(refusal([keyed], Standing.TRUSTED))
    bad = Record(None, None, 5, ((AUTH_OP_HEADER, b"[1]"),))
    assert "malformed" in str(refusal([bad], Standing.TRUSTED))
