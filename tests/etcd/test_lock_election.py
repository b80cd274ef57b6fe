"""etcd's Lock and Election services, and the one revision of a Txn's or a DeleteRange's
writes, against a real ``kraft-spark local``, through gRPC stubs built from the generated
descriptors, authenticated with the admin credential; and, on the same quorum, the Delta rows of
writes made over gRPC and over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kraft_spark.etcd.pb import kv_pb2, rpc_pb2, v3election_pb2, v3lock_pb2
from kraft_spark.log.codec import decode_batch, read_header
from kraft_spark.log.dump import segment_files
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.raft.records import Batch
from tests.etcd.conftest import Stub
from tests.lincheck.nemesis import KvQuorum

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
E = v3election_pb2


class Etcd:
    def __init__(self, channel: grpc.Channel, token: str) -> None:
        self.md = (("token", token),)
        self.kv = Stub(channel, rpc_pb2.DESCRIPTOR.services_by_name["KV"])
        self.lease = Stub(channel, rpc_pb2.DESCRIPTOR.services_by_name["Lease"])
        self.lock = Stub(channel, v3lock_pb2.DESCRIPTOR.services_by_name["Lock"])
        self.election = Stub(channel, E.DESCRIPTOR.services_by_name["Election"])
        self.watch = Stub(channel, rpc_pb2.DESCRIPTOR.services_by_name["Watch"])

    def __call__(self, method: Any, request: Any, **kwargs: Any) -> Any:
        return method(request, metadata=self.md, timeout=kwargs.pop("timeout", 10), **kwargs)

    def grant(self, ttl: int = 30) -> int:
        return int(self(self.lease.LeaseGrant, rpc_pb2.LeaseGrantRequest(TTL=ttl)).ID)


@pytest.fixture(scope="module")
def etcd(etcd_quorum: KvQuorum, etcd_admin: tuple[str, str]) -> Iterator[Etcd]:
    address = str(etcd_quorum.nodes[0]["etcd"])
    with grpc.insecure_channel(address) as channel:
        auth = Stub(channel, rpc_pb2.DESCRIPTOR.services_by_name["Auth"])
        user, password = etcd_admin
        token = auth.Authenticate(rpc_pb2.AuthenticateRequest(name=user, password=password),
                                  timeout=10).token
        yield Etcd(channel, token)


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except grpc.RpcError as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_two_lockers_fifo_unlock_and_revoke(etcd: Etcd) -> None:
    first, second, third = etcd.grant(), etcd.grant(), etcd.grant()
    got = etcd(etcd.lock.Lock, v3lock_pb2.LockRequest(name=b"lk", lease=first))
    assert got.key == b"lk/%x" % first
    waits = []
    for lease in (second, third):  # queued in create-revision order
        waits.append(_in_thread(lambda lease=lease: etcd(
            etcd.lock.Lock, v3lock_pb2.LockRequest(name=b"lk", lease=lease), timeout=30)))
        time.sleep(0.3)
    assert all(not out for _, out in waits)
    etcd(etcd.lock.Unlock, v3lock_pb2.UnlockRequest(key=got.key))
    waits[0][0].join(10)
    assert waits[0][1][0].key == b"lk/%x" % second
    assert not waits[1][1]  # the third still waits for the second
    etcd(etcd.lease.LeaseRevoke, rpc_pb2.LeaseRevokeRequest(ID=second))  # its key goes too
    waits[1][0].join(10)
    third_key = waits[1][1][0].key
    assert third_key == b"lk/%x" % third
    keys = etcd(etcd.kv.Range, rpc_pb2.RangeRequest(key=b"lk/", range_end=b"lk0")).kvs
    assert [kv.key for kv in keys] == [third_key]
    etcd(etcd.lock.Unlock, v3lock_pb2.UnlockRequest(key=third_key))


def test_lock_errors(etcd: Etcd) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        etcd(etcd.lock.Lock, v3lock_pb2.LockRequest(name=b"lk2", lease=12345))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == "etcdserver: requested lease not found"
    # lease 0: the server grants its session a lease of 60 s, as etcd's does
    got = etcd(etcd.lock.Lock, v3lock_pb2.LockRequest(name=b"lk2"))
    lease = int(got.key.split(b"/")[1], 16)
    ttl = etcd(etcd.lease.LeaseTimeToLive, rpc_pb2.LeaseTimeToLiveRequest(ID=lease))
    assert ttl.grantedTTL == 60
    etcd(etcd.lease.LeaseRevoke, rpc_pb2.LeaseRevokeRequest(ID=lease))


def test_campaign_leader_proclaim_observe_resign(etcd: Etcd) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        etcd(etcd.election.Leader, E.LeaderRequest(name=b"el"))
    assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.UNKNOWN,
                                                             "election: no leader")
    observed = etcd(etcd.election.Observe, E.LeaderRequest(name=b"el"), timeout=30)
    a, b = etcd.grant(), etcd.grant()
    won = etcd(etcd.election.Campaign, E.CampaignRequest(name=b"el", lease=a, value=b"a1"))
    leader = won.leader
    assert (leader.name, leader.key, leader.lease) == (b"el", b"el/%x" % a, a)
    waiting, out = _in_thread(lambda: etcd(etcd.election.Campaign, E.CampaignRequest(
        name=b"el", lease=b, value=b"b1"), timeout=30))
    assert etcd(etcd.election.Leader, E.LeaderRequest(name=b"el")).kv.value == b"a1"
    etcd(etcd.election.Proclaim, E.ProclaimRequest(leader=leader, value=b"a2"))
    assert etcd(etcd.election.Leader, E.LeaderRequest(name=b"el")).kv.value == b"a2"
    time.sleep(0.3)
    assert not out
    stale = E.LeaderKey(name=b"el", key=leader.key, rev=leader.rev + 1, lease=a)
    with pytest.raises(grpc.RpcError) as caught:
        etcd(etcd.election.Proclaim, E.ProclaimRequest(leader=stale, value=b"x"))
    assert caught.value.details() == "election: not leader"
    etcd(etcd.election.Resign, E.ResignRequest(leader=leader))
    waiting.join(10)
    assert out[0].leader.key == b"el/%x" % b
    assert etcd(etcd.election.Leader, E.LeaderRequest(name=b"el")).kv.value == b"b1"
    values = [next(observed).kv.value for _ in range(3)]
    observed.cancel()
    assert values == [b"a1", b"a2", b"b1"]
    with pytest.raises(grpc.RpcError) as caught:
        etcd(etcd.election.Resign, E.ResignRequest())
    assert caught.value.details() == '"leader" field must be provided'
    etcd(etcd.election.Resign, E.ResignRequest(leader=out[0].leader))


def _watched(etcd: Etcd, create: rpc_pb2.WatchCreateRequest,
             responses: int) -> list[rpc_pb2.WatchResponse]:
    """The first ``responses`` WatchResponses with events of a watch (its stream open)."""
    done = threading.Event()

    def requests() -> Iterator[rpc_pb2.WatchRequest]:
        yield rpc_pb2.WatchRequest(create_request=create)
        done.wait(20)

    call = etcd(etcd.watch.Watch, requests(), timeout=20)
    out: list[rpc_pb2.WatchResponse] = []
    try:
        for response in call:
            assert not response.canceled, response.cancel_reason
            if response.events:
                out.append(response)
                if len(out) == responses:
                    break
    finally:
        done.set()
        call.cancel()
    return out


def _events(response: rpc_pb2.WatchResponse) -> list[tuple[int, bytes, int]]:
    return [(e.type, e.kv.key, e.kv.mod_revision) for e in response.events]


def test_a_txns_writes_share_one_revision_read_and_watched(etcd: Etcd) -> None:
    """etcd's revisions: one Txn putting two keys and deleting a third is one revision, its
    header's; Range shows it on both keys, a Range just below it none of the Txn, and a watch
    from it gets the three events in one response; a watch from the next revision none."""
    put, delete = kv_pb2.Event.PUT, kv_pb2.Event.DELETE
    etcd(etcd.kv.Put, rpc_pb2.PutRequest(key=b"rv/c", value=b"0"))
    txn = etcd(etcd.kv.Txn, rpc_pb2.TxnRequest(success=[
        rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"rv/a", value=b"1")),
        rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"rv/b", value=b"2")),
        rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"rv/c"))]))
    revision = txn.header.revision
    prefix = {"key": b"rv/", "range_end": b"rv0"}
    now = etcd(etcd.kv.Range, rpc_pb2.RangeRequest(**prefix))
    assert [(kv.key, kv.mod_revision, kv.create_revision) for kv in now.kvs] == [
        (b"rv/a", revision, revision), (b"rv/b", revision, revision)]
    before = etcd(etcd.kv.Range, rpc_pb2.RangeRequest(**prefix, revision=revision - 1))
    assert [kv.key for kv in before.kvs] == [b"rv/c"]
    at = etcd(etcd.kv.Range, rpc_pb2.RangeRequest(**prefix, revision=revision))
    assert [kv.key for kv in at.kvs] == [b"rv/a", b"rv/b"]
    etcd(etcd.kv.Put, rpc_pb2.PutRequest(key=b"rv/z", value=b"3"))
    watched = _watched(etcd, rpc_pb2.WatchCreateRequest(**prefix, start_revision=revision), 1)
    assert watched[0].header.revision == revision
    assert _events(watched[0]) == [(put, b"rv/a", revision), (put, b"rv/b", revision),
                                   (delete, b"rv/c", revision)]
    # From the next revision (inside the group's log offsets): the later put only.
    later = _watched(etcd, rpc_pb2.WatchCreateRequest(**prefix, start_revision=revision + 1), 1)
    assert [e[1] for e in _events(later[0])] == [b"rv/z"]


def test_a_delete_ranges_deletes_share_one_revision(etcd: Etcd) -> None:
    for key in (b"rd/1", b"rd/2", b"rd/3"):
        etcd(etcd.kv.Put, rpc_pb2.PutRequest(key=key, value=b"v"))
    deleted = etcd(etcd.kv.DeleteRange, rpc_pb2.DeleteRangeRequest(key=b"rd/", range_end=b"rd0"))
    revision = deleted.header.revision
    assert deleted.deleted == 3
    watched = _watched(etcd, rpc_pb2.WatchCreateRequest(
        key=b"rd/", range_end=b"rd0", start_revision=revision, prev_kv=True), 1)
    assert _events(watched[0]) == [(kv_pb2.Event.DELETE, k, revision)
                                   for k in (b"rd/1", b"rd/2", b"rd/3")]
    assert [e.prev_kv.value for e in watched[0].events] == [b"v"] * 3


# ---- the Delta view of etcd's writes (kraft_spark.delta.snapshot_rows)


def _log_of(quorum: KvQuorum, node_id: int, end: int) -> list[Batch]:
    """The batches below ``end`` of node ``node_id``'s log, read from its segment files as
    ``kraft-spark dump-log`` reads them (read-only, beside the running node)."""
    batches: list[Batch] = []
    for path in segment_files(str(quorum.log_dir(node_id))):
        data = Path(path).read_bytes() if path.endswith(".log") else b""
        position = 0
        while position < len(data):
            try:
                header = read_header(data, position)
                batch, _ = decode_batch(data, position)
            except CorruptRecordError:
                break  # the tail being written
            if batch.next_offset > end:
                return batches
            batches.append(batch)
            position += header.size
    return batches


def test_grpc_and_http_writes_have_the_same_delta_rows(etcd: Etcd, etcd_quorum: KvQuorum,
                                                       tmp_path: Path) -> None:
    """The same writes over etcd's gRPC API (keys g/...) and over HTTP (h/...): a Put with a
    lease, a conditional write that holds and one that fails, a delete of two keys. The
    committed log materialized by the in-process path: each ``snapshot`` row equals what
    etcd's Range answers for its key (create_revision, mod_revision, version, lease) and what
    ``GET /v1/kv`` answers, and the gRPC and HTTP keys' rows are alike."""
    from kraft_spark.delta import DeltaMaterializer
    from kraft_spark.state.machine import KeyValueState
    from tests.lincheck.nemesis import NodeConnection, leader_of

    kv, rpc = etcd.kv, rpc_pb2
    lease = etcd.grant(60)
    put = lambda key, value, **kw: rpc.RequestOp(  # noqa: E731
        request_put=rpc.PutRequest(key=key, value=value, **kw))
    revision = etcd(kv.Put, rpc.PutRequest(key=b"g/lease", value=b'"v"', lease=lease)
                    ).header.revision
    etcd(kv.Put, rpc.PutRequest(key=b"g/a", value=b"1"))
    etcd(kv.Put, rpc.PutRequest(key=b"g/d1", value=b"1"))
    etcd(kv.Put, rpc.PutRequest(key=b"g/d2", value=b"1"))
    held = etcd(kv.Txn, rpc.TxnRequest(
        compare=[rpc.Compare(key=b"g/a", target=rpc.Compare.VERSION, version=1)],
        success=[put(b"g/a", b"2"), put(b"g/b", b"1")]))
    failed = etcd(kv.Txn, rpc.TxnRequest(
        compare=[rpc.Compare(key=b"g/a", target=rpc.Compare.VERSION, version=1)],
        success=[put(b"g/a", b"3")]))
    assert held.succeeded and not failed.succeeded
    gone = etcd(kv.DeleteRange, rpc.DeleteRangeRequest(key=b"g/d", range_end=b"g/e"))
    assert gone.deleted == 2

    http = NodeConnection(etcd_quorum.http_urls[0], token=etcd_quorum.token)
    status, granted = http.call("POST", "/v1/leases", {"ttl_ms": 60_000})
    assert status == 200, granted
    writes: list[tuple[dict[str, Any], int]] = [
        ({"lease_id": granted["lease_id"], "records": [{"key": "h/lease", "value": "v"}]}, 200),
        ({"records": [{"key": "h/a", "value": 1}]}, 200),
        ({"records": [{"key": "h/d1", "value": 1}]}, 200),
        ({"records": [{"key": "h/d2", "value": 1}]}, 200),
        ({"conditions": [{"key": "h/a", "version": 1}],
          "records": [{"key": "h/a", "value": 2}, {"key": "h/b", "value": 1}]}, 200),
        ({"conditions": [{"key": "h/a", "version": 1}],
          "records": [{"key": "h/a", "value": 3}]}, 409),
        ({"records": [{"key": "h/d1", "value": None}, {"key": "h/d2", "value": None}]}, 200),
    ]
    for body, expected in writes:
        status, answer = http.call("POST", "/v1/records", body)
        assert status == expected, answer
        revision = max(revision, int(answer["last_offset"]))
    ranged = {kv_.key.decode(): kv_ for prefix in (b"g/", b"h/") for kv_ in etcd(
        kv.Range, rpc.RangeRequest(key=prefix, range_end=prefix[:-1] + b"0")).kvs}
    assert sorted(ranged) == ["g/a", "g/b", "g/lease", "h/a", "h/b", "h/lease"]
    got = {key: http.call("GET", f"/v1/kv/{key}")[1] for key in ranged}
    http.close()

    leader = leader_of(etcd_quorum)
    assert leader is not None
    batches = _log_of(etcd_quorum, leader, revision + 1)
    assert batches and batches[0].base_offset == 0, "the leader's log no longer starts at 0"
    state = KeyValueState()  # the judgement every replica made of the same log
    state.apply_all(batches)
    assert state.failed_txns  # the refused conditional write is in the log, judged failed
    materializer = DeltaMaterializer(None, str(tmp_path))
    half = len(batches) // 2  # two commits: the second seeded from the first's rows
    for part in (batches[:half], batches):
        materializer.write(part, part[-1].next_offset, failed_txns=state.failed_txns,
                           lease_deleted=state.leases.deleted)
    from deltalake import DeltaTable

    rows = {r["key"]: r for r in DeltaTable(str(tmp_path / "snapshot")).to_pyarrow_table()
            .to_pylist() if r["key"][:2] in ("g/", "h/")}
    assert sorted(rows) == sorted(ranged)
    records = {r["offset"]: r["revision"] for r in DeltaTable(str(tmp_path / "records"))
               .to_pyarrow_table(columns=["offset", "revision"]).to_pylist()}
    for key, row in rows.items():
        answer = ranged[key]
        assert (row["value"], row["create_revision"], row["mod_revision"], row["version"],
                row["lease"]) == (answer.value.decode(), answer.create_revision,
                                  answer.mod_revision, answer.version, answer.lease), key
        assert (got[key]["create_offset"], got[key]["mod_offset"], got[key]["version"]) == (
            row["create_revision"], row["mod_revision"], row["version"]), key
        assert records[row["offset"]] == row["mod_revision"], key
    alike = lambda r: (r["value"], r["version"], r["lease"] != 0)  # noqa: E731
    assert {k[2:]: alike(r) for k, r in rows.items() if k[0] == "g"} == {
        k[2:]: alike(r) for k, r in rows.items() if k[0] == "h"} == {
        "a": ("2", 2, False), "b": ("1", 1, False), "lease": ('"v"', 1, True)}
