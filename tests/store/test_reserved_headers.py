"""The rule on the store's reserved record headers (``kraft_spark.store.reserved_headers``):
who may write ``kraft.txn``, ``kraft.lease`` and ``kraft.lease.op``, and that a refusal names
the record, the header and the fix."""

from __future__ import annotations

import pytest

from kraft_spark.raft.records import Record
from kraft_spark.store.history_feed import COMPACT_HEADER, compact_header
from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER, encode_op
from kraft_spark.store.reserved_headers import Standing, refusal
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header

pytestmark = pytest.mark.loop_free

TXN = (TXN_HEADER, encode_header(2, [Condition(b"k", version=0)]))
LEASE = (LEASE_HEADER, b"42")
REVOKE = (LEASE_OP_HEADER, encode_op("revoke", 42))


def rec(key: bytes | None = b"k", value: bytes | None = b"v",
        *headers: tuple[str, bytes | None]) -> Record:
    return Record(key, value, 0, tuple(headers))


def test_plain_records_and_other_headers_pass_for_everyone() -> None:
    batch = [rec(), rec(b"a", None, ("source", b"x")), rec(None, None)]
    for standing in Standing:
        assert refusal(batch, standing) is None


def test_trusted_callers_write_every_reserved_header_well_formed() -> None:
    batch = [rec(b"a", b"1", TXN, LEASE), rec(b"b", b"2", LEASE), rec(None, None, REVOKE)]
    assert refusal(batch, Standing.TRUSTED) is None


def test_a_principal_may_not_write_lease_operations_but_may_write_conditions() -> None:
    assert refusal([rec(b"a", b"1", TXN), rec(b"b", b"2", LEASE)], Standing.PRINCIPAL) is None
    refused = refusal([rec(), rec(None, None, REVOKE)], Standing.PRINCIPAL, "User:guest")
    assert refused is not None and (refused.index, refused.header) == (1, LEASE_OP_HEADER)
    text = str(refused)
    assert text.startswith("records[1].headers: kraft.lease.op is reserved")
    assert "User:guest" in text and "/v1/leases" in text and "super.users" in text
    for op in ("grant", "keepalive", "expire"):
        fields = {"ttl_ms": 1000} if op == "grant" else {"after": 3} if op == "expire" else {}
        header = (LEASE_OP_HEADER, encode_op(op, 42, **fields))
        assert refusal([rec(None, None, header)], Standing.PRINCIPAL) is not None


@pytest.mark.parametrize("header, fix", [
    (TXN, '"conditions"'), (LEASE, '"lease_id"'), (REVOKE, "/v1/leases")])
def test_an_http_caller_is_pointed_to_the_field_that_writes_each_header(
        header: tuple[str, bytes], fix: str) -> None:
    refused = refusal([rec(b"a", b"1"), rec(b"b", b"2", ("x", b"y"), header)],
                      Standing.HTTP_CALLER)
    assert refused is not None and (refused.index, refused.header) == (1, header[0])
    assert f"{header[0]} is reserved" in str(refused) and fix in str(refused)


@pytest.mark.parametrize("record, header, why", [
    (rec(b"a", b"1", (TXN_HEADER, b"{nope")), TXN_HEADER, "is malformed (kraft.txn is not JSON"),
    (rec(b"a", b"1", (TXN_HEADER, None)), TXN_HEADER, "is malformed"),
    # A group of 2 that starts at the batch's last record.
    (rec(b"a", b"1", TXN), TXN_HEADER, "runs past the batch's end (1 records from here)"),
    (rec(b"a", b"1", (LEASE_HEADER, b"-1")), LEASE_HEADER, "must be a lease id"),
    (rec(None, None, (LEASE_OP_HEADER, b'{"op":"steal","id":1}')), LEASE_OP_HEADER,
     "needs op grant"),
    (rec(b"k", b"v", REVOKE), LEASE_OP_HEADER, "keyless record without a value"),
    (rec(None, None, REVOKE, REVOKE), LEASE_OP_HEADER, "appears twice"),
    (rec(None, None, REVOKE, LEASE), LEASE_HEADER, "would be ignored"),
])
def test_malformed_headers_are_refused_even_from_a_trusted_caller(
        record: Record, header: str, why: str) -> None:
    for standing in (Standing.TRUSTED, Standing.PRINCIPAL):
        if standing is Standing.PRINCIPAL and any(n == LEASE_OP_HEADER
                                                  for n, _ in record.headers):
            continue  # refused anyway, for who it is
        refused = refusal([rec(), record], standing)
        assert refused is not None and (refused.index, refused.header) == (1, header), refused
        assert why in str(refused), str(refused)


@pytest.mark.parametrize("name", ["kraft.txn.outcome", "kraft.lease.deleted"])
def test_headers_only_the_delta_tables_carry_are_refused_to_everyone(name: str) -> None:
    # The snapshot table as of an offset skips rows marked failed and deletes the keys a row
    # lists as deleted: written by hand, they would hide a write or delete any key there.
    for standing in Standing:
        refused = refusal([rec(b"k", b"v", (name, b'["victim"]'))], standing)
        assert refused is not None and refused.header == name, standing
        assert "never written to the log" in str(refused)


def test_only_a_trusted_caller_compacts_every_nodes_history() -> None:
    compact = rec(None, None, compact_header(7))
    assert refusal([compact], Standing.TRUSTED) is None
    for standing in (Standing.PRINCIPAL, Standing.HTTP_CALLER):
        refused = refusal([rec(), compact], standing, "User:guest")
        assert refused is not None and (refused.index, refused.header) == (1, COMPACT_HEADER)
        assert "KV.Compact" in str(refused)
    for bad, why in ((rec(None, None, (COMPACT_HEADER, b"x7")), "a revision in decimal"),
                     (rec(b"k", None, compact_header(7)), "keyless record")):
        refused = refusal([bad], Standing.TRUSTED)
        assert refused is not None and why in str(refused)
