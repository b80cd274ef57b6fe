"""Who may change the voters over the Kafka protocol (Kafka's ALTER on CLUSTER, granted by
``super.users``): principals from client certificates under mutual TLS, refusals answered
CLUSTER_AUTHORIZATION_FAILED with nothing changed, and plaintext listeners kept on loopback."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kraft_spark.client import AsyncQuorumClient
from kraft_spark.client.voter_changes import VoterChangeError
from kraft_spark.net.cluster_acl import ClusterAcl, check_listener
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.node import RaftNode
from kraft_spark.net.principal import ANONYMOUS, dn_of
from kraft_spark.protocol import ErrorCode
from kraft_spark.raft.config import ConfigError
from kraft_spark.tls_config import TlsConfig

from .helpers import make_certs, make_client_cert, run_quorum

ADMIN = "User:CN=admin,OU=ops"


def test_the_principal_is_the_certificates_subject_most_specific_first() -> None:
    subject = ((("countryName", "NL"),), (("organizationName", "Example, Inc"),),
               (("organizationalUnitName", "ops"),), (("commonName", "admin"),))
    assert dn_of(subject) == "CN=admin,OU=ops,O=Example\\, Inc,C=NL"
    assert dn_of(()) == ""


def test_super_users_grant_voter_changes_and_tls_enforces_them() -> None:
    open_plaintext = ClusterAcl.configure(None, tls=False)  # Kafka without an authorizer
    assert open_plaintext.may_alter_cluster(ANONYMOUS)
    tls_without_list = ClusterAcl.configure(None, tls=True)
    assert not tls_without_list.may_alter_cluster(ADMIN)
    assert tls_without_list.may_act_as_voter("User:CN=node")  # UpdateRaftVoter: any peer
    listed = ClusterAcl.configure(f" {ADMIN} ; User:CN=ops2", tls=False)
    assert listed.may_alter_cluster(ADMIN) and listed.may_alter_cluster("User:CN=ops2")
    assert not listed.may_alter_cluster(ANONYMOUS)
    assert not listed.may_act_as_voter(ANONYMOUS)
    with pytest.raises(ConfigError, match="not a principal"):
        ClusterAcl.configure("CN=admin", tls=True)


def test_a_plaintext_listener_beyond_loopback_is_refused_unless_allowed() -> None:
    check_listener("127.0.0.1", tls=False, plaintext_allowed=False)
    check_listener("::1", tls=False, plaintext_allowed=False)
    check_listener("0.0.0.0", tls=True, plaintext_allowed=False)
    check_listener("10.0.0.5", tls=False, plaintext_allowed=True)
    for host in ("0.0.0.0", "10.0.0.5", ""):
        with pytest.raises(ConfigError, match=r"kraft\.listener\.plaintext\.allowed=true"):
            check_listener(host, tls=False, plaintext_allowed=False)
    base = {"node.id": "0", "log.dirs": "/tmp/x", "controller.quorum.voters": "0@10.1.1.1:9093"}
    with pytest.raises(ConfigError, match=r"plaintext connections on 10\.1\.1\.1"):
        NodeConfig.from_properties(base)
    allowed = NodeConfig.from_properties({**base, "kraft.listener.plaintext.allowed": "true",
                                          "super.users": ADMIN})
    assert allowed.acl.super_users == frozenset({ADMIN}) and allowed.acl.enforced


async def _remove_voter_2(nodes: list[RaftNode], client: AsyncQuorumClient) -> None:
    info = await client.describe_quorum()
    directory = next(v.directory_id for v in info.voters if v.replica_id == 2)
    await client.remove_voter(2, uuid.UUID(int=0) if directory is None else _uuid(directory),
                              timeout_s=3)


def _uuid(text: str) -> uuid.UUID:
    import base64
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def test_mutual_tls_voter_changes_need_a_super_user_certificate(tmp_path: Path) -> None:
    good, _ = make_certs(tmp_path)
    admin = make_client_cert(tmp_path, "admin", "/OU=ops/CN=admin")
    acl = ClusterAcl.configure(ADMIN, tls=True)

    async def body(nodes: list[RaftNode]) -> None:
        bootstrap = [f"127.0.0.1:{n.port}" for n in nodes]
        # The voters' own certificate (CN=node) authenticates, but is not a super user.
        peer = AsyncQuorumClient(bootstrap, ssl_context=good.client_context())
        with pytest.raises(VoterChangeError) as refused:
            await _remove_voter_2(nodes, peer)
        assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert "User:CN=node is not in super.users" in str(refused.value)
        assert sorted(v.replica_id for v in (await peer.describe_quorum()).voters) == [0, 1, 2]
        await peer.close()
        # The administrator's certificate passes the authorizer: the leader judges the change
        # itself (a static voter set cannot change: a refusal of another kind, not 31).
        boss = AsyncQuorumClient(bootstrap, ssl_context=admin.client_context())
        try:
            await _remove_voter_2(nodes, boss)
        except VoterChangeError as exc:
            assert exc.code != ErrorCode.CLUSTER_AUTHORIZATION_FAILED, exc
        await boss.close()

    asyncio.run(run_quorum(tmp_path / "q", body, tls=good, acl=acl))


def test_plaintext_with_super_users_refuses_anonymous_voter_changes(tmp_path: Path) -> None:
    acl = ClusterAcl.configure(ADMIN, tls=False)

    async def body(nodes: list[RaftNode]) -> None:
        client = AsyncQuorumClient([f"127.0.0.1:{n.port}" for n in nodes])
        with pytest.raises(VoterChangeError) as refused:
            await _remove_voter_2(nodes, client)
        assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert ANONYMOUS in str(refused.value)
        await client.close()

    asyncio.run(run_quorum(tmp_path, body, acl=acl))


def test_a_tls_key_others_can_read_is_refused_at_start(tmp_path: Path) -> None:
    node, _ = make_certs(tmp_path)
    props = {"ssl.certificate.location": node.certfile, "ssl.key.location": node.keyfile,
             "ssl.ca.location": node.cafile}
    assert TlsConfig.from_properties(props) == node  # openssl writes keys 0600
    Path(node.keyfile).chmod(0o644)
    with pytest.raises(ConfigError, match=r"ssl\.key\.location: .* too open .*chmod 600"):
        TlsConfig.from_properties(props)
