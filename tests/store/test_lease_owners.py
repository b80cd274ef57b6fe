"""Whose lease it is (``kraft_spark.store.leases``): a lease granted by a credential is kept
alive and revoked by that credential only; an operation naming nobody (an administrator's, the
leader's expiry) acts on any; the owner survives a snapshot, and snapshots written before owners
existed still load."""

from __future__ import annotations

import pytest

from kraft_spark.store.leases import NOT_OWNER, LeaseTable, decode_op, encode_op


def apply(table: LeaseTable, offset: int, op: str, lease_id: int,
          **fields: int | str) -> str:
    reason, _ = table.apply(decode_op(encode_op(op, lease_id, **fields)), offset)
    return reason


def test_only_the_owner_keeps_alive_or_revokes_its_lease() -> None:
    table = LeaseTable()
    assert apply(table, 1, "grant", 7, ttl_ms=1000, owner="alice") == ""
    refused = apply(table, 2, "keepalive", 7, by="bob")
    assert NOT_OWNER in refused and "'alice'" in refused and "admin" in refused
    assert table.leases[7].keepalive_offset == 1  # nothing changed
    assert NOT_OWNER in apply(table, 3, "revoke", 7, by="bob")
    assert 7 in table.leases
    assert apply(table, 4, "keepalive", 7, by="alice") == ""
    assert table.leases[7].keepalive_offset == 4
    assert apply(table, 5, "revoke", 7) == ""  # named nobody: an administrator's
    assert 7 not in table.leases


def test_a_lease_granted_without_an_owner_is_anyones() -> None:
    table = LeaseTable()
    assert apply(table, 1, "grant", 3, ttl_ms=1000) == ""
    assert apply(table, 2, "keepalive", 3, by="bob") == ""
    assert apply(table, 3, "revoke", 3, by="carol") == ""


def test_the_leaders_expiry_is_not_refused_for_want_of_an_owner() -> None:
    table = LeaseTable()
    apply(table, 1, "grant", 5, ttl_ms=1000, owner="alice")
    assert apply(table, 2, "expire", 5, after=1) == ""
    assert 5 not in table.leases


def test_the_owner_survives_a_snapshot_and_old_snapshots_load() -> None:
    table = LeaseTable()
    apply(table, 1, "grant", 1, ttl_ms=1000, owner="alice")
    apply(table, 2, "grant", 2, ttl_ms=2000)
    exported = table.export()
    assert exported["leases"] == [[1, 1000, 1, 1, "alice"], [2, 2000, 2, 2]]
    loaded = LeaseTable()
    loaded.load(exported, {})
    assert loaded.leases[1].owner == "alice" and loaded.leases[2].owner == ""
    old = LeaseTable()
    old.load({"leases": [[9, 1000, 4, 6]], "deleted": []}, {9: {b"k"}})
    assert old.leases[9].owner == "" and old.leases[9].keys == {b"k"}
    with pytest.raises(ValueError, match="malformed"):
        LeaseTable().load({"leases": [[9, 1000, 4, 6, 7]]}, {})


@pytest.mark.parametrize("field", ["owner", "by"])
def test_a_name_that_is_not_a_short_string_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} is a name"):
        decode_op(encode_op("grant", 1, ttl_ms=1000, **{field: "x" * 201}))
    with pytest.raises(ValueError, match=f"{field} is a name"):
        decode_op(b'{"op":"keepalive","id":1,"%s":5}' % field.encode())
