"""The reserved-header rule on the Kafka-protocol listener (``kraft_spark.net.produce_gate``),
on a real SASL quorum on loopback with an HTTP API on every node: a principal that is neither
in ``super.users`` nor the quorum's own identity cannot revoke or expire someone else's lease
by writing ``kraft.lease.op`` in a Produce (INVALID_RECORD naming the header; the lease
survives), while the lease API of a follower, which forwards the operation to the leader as
the nodes' own identity, keeps working, and an administrator may still act on any lease."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from api.node_http import serve_node_http
from kraft_spark.client import AsyncQuorumClient, NewRecord
from kraft_spark.client.errors import InvalidRecordError
from kraft_spark.client.lease_countdown import lease_countdown
from kraft_spark.http_auth import Credential, Credentials, Scope
from kraft_spark.net.cluster_acl import ClusterAcl
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.net.node import RaftNode
from kraft_spark.net.produce_gate import ProduceGate
from kraft_spark.protocol.sasl_plain import PlainCredentials, PlainUsers, SaslServerConfig
from kraft_spark.store.lease_clock import CountdownRequest, CountdownStatus
from kraft_spark.store.leases import LEASE_OP_HEADER, encode_op
from kraft_spark.store.reserved_headers import Standing
from kraft_spark.store.txn import TXN_HEADER, Condition, encode_header

from .helpers import STEADY, make_certs, make_nodes, the_leader
from .test_leases_http import run_nodes  # with the voters' lease expirers
from .test_node_http import http, url_of

pytestmark = pytest.mark.timeout(60)

USERS = PlainUsers({"admin": "node-pw", "guest": "guest-pw", "ops": "ops-pw"})
NODE = PlainCredentials("admin", "node-pw")  # what the nodes authenticate as to each other
GUEST = PlainCredentials("guest", "guest-pw")
OPS = PlainCredentials("ops", "ops-pw")
ALICE = {"Authorization": "Bearer alice-token"}
ROOT = {"Authorization": "Bearer root-token"}


def lease_op(op: str, lease_id: int, **fields: int | str) -> NewRecord:
    return NewRecord(None, None, ((LEASE_OP_HEADER, encode_op(op, lease_id, **fields)),))


def test_a_principal_cannot_end_anothers_lease_over_produce(tmp_path: Path) -> None:
    credentials = Credentials([Credential(Scope.WRITE, "alice-token", "alice"),
                               Credential(Scope.ADMIN, "root-token", "root")])
    # super.users names ops only: the nodes' own admin is trusted as the quorum's identity.
    nodes = [RaftNode(replace(n.config, http_listener=("127.0.0.1", 0),
                              http_credentials=credentials), http=serve_node_http)
             for n in make_nodes(tmp_path, quorum=STEADY, sasl=SaslServerConfig(USERS, NODE),
                                 acl=ClusterAcl.configure("User:ops", tls=False))]

    async def leases(url: str) -> list[tuple[int, str]]:
        status, listed = await http(url, "GET", "/v1/leases", headers=ROOT)
        assert status == 200, listed
        return [(x["lease_id"], x["owner"]) for x in listed["leases"]]

    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        follower = url_of(next(n for n in nodes if n is not leader))
        # Alice's lease, granted through a follower (forwarded over Produce) and kept alive
        # (forwarded as LeaseCountdown, as the node's own identity).
        status, granted = await http(follower, "POST", "/v1/leases", {"ttl_ms": 60_000},
                                     headers=ALICE)
        assert status == 200, granted
        lease = granted["lease_id"]
        status, kept = await http(follower, "POST", f"/v1/leases/{lease}/keepalive",
                                  headers=ALICE)
        assert status == 200, kept
        bootstrap = [f"127.0.0.1:{n.port}" for n in nodes]
        guest = AsyncQuorumClient(bootstrap, sasl=GUEST, retry_budget_s=5.0)
        ops = AsyncQuorumClient(bootstrap, sasl=OPS, retry_budget_s=5.0)
        try:
            for record in (lease_op("revoke", lease), lease_op("expire", lease, after=0),
                           lease_op("keepalive", lease, by="alice")):
                with pytest.raises(InvalidRecordError) as refused:
                    await guest.append([NewRecord(b"k", b"v"), record], timeout_s=5)
                text = str(refused.value)
                assert "records[1].headers: kraft.lease.op is reserved" in text, text
                assert "User:guest" in text and "/v1/leases" in text, text
            # Nor may it keep someone's lease alive by naming them in a LeaseCountdown.
            answer = await lease_countdown(guest, CountdownRequest(lease, True, by="alice"))
            assert answer.status is CountdownStatus.NOT_OWNER, answer
            assert "super user" in answer.message, answer
            assert await leases(url_of(leader)) == [(lease, "alice")]
            # Conditional writes stay open to every principal; a malformed one is refused.
            header = encode_header(1, [Condition(b"guest/k", version=0)])
            await guest.append([NewRecord(b"guest/k", b"1", ((TXN_HEADER, header),))],
                               timeout_s=5)
            with pytest.raises(InvalidRecordError, match=r"kraft\.txn is malformed"):
                await guest.append([NewRecord(b"guest/k", b"2", ((TXN_HEADER, b"{"),))],
                                   timeout_s=5)
            # An administrator (super.users) acts on any lease.
            await ops.append([lease_op("revoke", lease)], timeout_s=5)
            deadline = asyncio.get_running_loop().time() + 10
            while await leases(url_of(leader)):
                assert asyncio.get_running_loop().time() < deadline, "the revoke never applied"
                await asyncio.sleep(0.05)
        finally:
            await guest.close()
            await ops.close()

    asyncio.run(run_nodes(nodes, body))


def test_who_is_trusted_by_configuration(tmp_path: Path) -> None:
    """super.users and the node's own identity; over mutual TLS without SASL the identity is
    the node's certificate itself; without SASL or TLS nobody is told apart, all trusted."""
    node_tls, rogue_tls = make_certs(tmp_path)

    def conn(principal: str, certificate: bytes | None = None) -> ServerConnection:
        return cast(ServerConnection, SimpleNamespace(principal=principal,
                                                      certificate=certificate))

    def der(path: str) -> bytes:
        return ssl.PEM_cert_to_DER_cert(Path(path).read_text())

    base = make_nodes(tmp_path / "cfg", count=1)[0].config
    sasl = ProduceGate(replace(base, sasl=SaslServerConfig(USERS, NODE),
                               acl=ClusterAcl.configure("User:ops", tls=False)))
    assert [sasl.standing(conn(p)) for p in ("User:admin", "User:ops", "User:guest",
                                             "User:ANONYMOUS")] == [
        Standing.TRUSTED, Standing.TRUSTED, Standing.PRINCIPAL, Standing.PRINCIPAL]
    tls = ProduceGate(replace(base, tls=node_tls,
                              acl=ClusterAcl.configure("User:CN=admin", tls=True)))
    assert tls.standing(conn("User:CN=node", der(node_tls.certfile))) is Standing.TRUSTED
    assert tls.standing(conn("User:CN=rogue", der(rogue_tls.certfile))) is Standing.PRINCIPAL
    assert tls.standing(conn("User:CN=admin", b"other")) is Standing.TRUSTED
    assert ProduceGate(base).standing(conn("User:ANONYMOUS")) is Standing.TRUSTED
