"""etcd's Lock and Election services against a real ``kraft-spark local``, through gRPC stubs
built from the generated descriptors, authenticated with the admin credential."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from kraft_spark.etcd.pb import rpc_pb2, v3election_pb2, v3lock_pb2
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
