"""SASL/PLAIN on the Kafka-protocol listener, with real sockets: nothing reaches a node
before a connection authenticates, a wrong password or a missing handshake closes the
connection with Kafka's error codes, the principal is ``User:<username>``, a quorum whose nodes
authenticate to each other elects and commits, and only ``super.users`` change the voters."""

from __future__ import annotations

import asyncio
import os
import stat
import struct
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.client import AsyncQuorumClient, NewRecord
from kraft_spark.client.security import ClientSecurity, admin_properties
from kraft_spark.client.voter_changes import VoterChangeError
from kraft_spark.net.cluster_acl import ClusterAcl
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import FrameServer, ServerConnection
from kraft_spark.net.node import RaftNode
from kraft_spark.net.sasl_server import SaslGate
from kraft_spark.protocol import ApiKey, ErrorCode, RequestHeader, decode_response, encode_request
from kraft_spark.protocol.sasl_plain import PlainCredentials, PlainUsers, SaslServerConfig
from kraft_spark.protocol.wire import error_response_body
from kraft_spark.quorum_auth import ensure_quorum_auth
from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import SecretFileError
from kraft_spark.transport import Connection, TransportError

from .helpers import run_quorum, send_raw
from .test_cluster_acl import _remove_voter_2

pytestmark = pytest.mark.timeout(60)

USERS = PlainUsers({"admin": "s3cret-admin", "guest": "guest-pw"})
ADMIN = PlainCredentials("admin", "s3cret-admin")
GUEST = PlainCredentials("guest", "guest-pw")


def test_users_file_lines_and_errors_never_quote_a_password() -> None:
    users = PlainUsers.parse("# who may connect\nadmin pw-one\n\nops pw-two\n", "f")
    assert users.authenticate(b"\0admin\0pw-one") == "admin"
    assert users.authenticate(b"admin\0admin\0pw-one") == "admin"  # authzid = username
    assert users.authenticate(b"ops\0admin\0pw-one") is None  # acting as someone else
    assert users.authenticate(b"\0admin\0pw-two") is None
    assert users.authenticate(b"\0nobody\0pw-one") is None
    assert users.authenticate(b"no separators") is None
    assert "pw-one" not in repr(users) and "pw-one" not in repr(users.credentials("admin", "f"))
    for text, why in (("admin pw extra\n", "is not '<username> <password>'"),
                      ("admin pw\nadmin pw2\n", "listed twice"), ("# none\n", "no users")):
        with pytest.raises(SecretFileError, match=why) as exc:
            PlainUsers.parse(text, "f")
        assert "pw" not in str(exc.value).replace("password", "")
    with pytest.raises(SecretFileError, match=r"has no user 'voter'"):
        users.credentials("voter", "f")


def test_node_config_reads_the_users_file_and_refuses_a_readable_one(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("admin pw\n")
    users.chmod(0o600)
    base = {"node.id": "0", "log.dirs": str(tmp_path / "log"),
            "controller.quorum.voters": "0@127.0.0.1:9093"}
    cfg = NodeConfig.from_properties({**base, "kraft.sasl.plain.users.file": str(users),
                                      "listeners": "SASL_PLAINTEXT://127.0.0.1:9093"})
    assert cfg.client_sasl == PlainCredentials("admin", "pw")
    assert cfg.acl.enforced and not cfg.acl.may_alter_cluster("User:admin")  # no super.users
    with pytest.raises(ConfigError, match=r"needs kraft\.sasl\.plain\.users\.file"):
        NodeConfig.from_properties({**base, "listeners": "SASL_PLAINTEXT://127.0.0.1:9093"})
    users.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        NodeConfig.from_properties({**base, "kraft.sasl.plain.users.file": str(users)})


def test_client_properties_with_kafkas_names(tmp_path: Path) -> None:
    path = tmp_path / "admin.properties"
    path.write_text(admin_properties(PlainCredentials("admin", 'p"w')))
    path.chmod(0o600)
    assert ClientSecurity.from_file(str(path)).sasl == PlainCredentials("admin", 'p"w')
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="too open"):
        ClientSecurity.from_file(str(path))
    plain = ClientSecurity.from_properties({"security.protocol": "PLAINTEXT"}, "f")
    assert plain == ClientSecurity()
    with pytest.raises(ConfigError, match=r"sasl\.mechanism=PLAIN"):
        ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT"}, "f")
    with pytest.raises(ConfigError, match="not one of"):
        ClientSecurity.from_properties({"security.protocol": "KERBEROS"}, "f")


def test_default_quorum_credentials_are_made_once_and_private(tmp_path: Path) -> None:
    first = ensure_quorum_auth(str(tmp_path))
    again = ensure_quorum_auth(str(tmp_path))
    assert first.created and not again.created
    assert first.sasl.client == again.sasl.client and first.sasl.client.username == "admin"
    for path in (first.users_file, first.admin_properties):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ClientSecurity.from_file(first.admin_properties).sasl == first.sasl.client


class _Echo:
    """A FrameServer handler that records who sent what and answers with an empty error body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def __call__(self, conn: ServerConnection, header: RequestHeader, body: Any) -> None:
        self.seen.append((conn.principal, header.api_key))
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     error_response_body(header.api_key, ErrorCode.NONE))


async def _serve(users: PlainUsers | None) -> tuple[FrameServer, _Echo]:
    echo = _Echo()
    server = FrameServer("127.0.0.1", 0, echo, name="test",
                         sasl_gate=SaslGate(users, "test", error_response_body))
    await server.start()
    return server, echo


async def _describe(conn: Connection) -> dict[str, Any]:
    return await conn.request(ApiKey.DESCRIBE_QUORUM, 1, {"topics": []}, 2.0)


def test_nothing_reaches_the_node_before_authentication() -> None:
    async def main() -> None:
        server, echo = await _serve(USERS)
        try:
            good = Connection("127.0.0.1", server.port, sasl=ADMIN)
            assert (await _describe(good))["error_code"] == ErrorCode.NONE
            await good.close()
            assert echo.seen == [("User:admin", ApiKey.DESCRIBE_QUORUM)]

            anonymous = Connection("127.0.0.1", server.port)
            answer = await _describe(anonymous)
            assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
            await asyncio.sleep(0.05)
            assert not anonymous.connected  # and the listener closed the connection
            await anonymous.close()

            wrong = Connection("127.0.0.1", server.port, sasl=PlainCredentials("admin", "nope"))
            with pytest.raises(TransportError, match="Invalid username or password") as exc:
                await _describe(wrong)
            assert "nope" not in str(exc.value) and not exc.value.sent
            await wrong.close()

            # SaslAuthenticate without a handshake first: refused, connection closed.
            frame = encode_request(ApiKey.SASL_AUTHENTICATE, 2, 7, "raw",
                                   {"auth_bytes": ADMIN.token()})
            raw = await send_raw(server.port, frame)
            assert raw != b"(open)"
            _, body = decode_response(ApiKey.SASL_AUTHENTICATE, 2, raw[4:])
            assert body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
            assert echo.seen == [("User:admin", ApiKey.DESCRIBE_QUORUM)]
        finally:
            await server.close()

    asyncio.run(main())


def test_a_listener_without_sasl_says_so() -> None:
    async def main() -> None:
        server, echo = await _serve(None)
        try:
            conn = Connection("127.0.0.1", server.port, sasl=ADMIN)
            with pytest.raises(TransportError, match="does not take SASL/PLAIN"):
                await _describe(conn)
            await conn.close()
            plain = Connection("127.0.0.1", server.port)
            assert (await _describe(plain))["error_code"] == ErrorCode.NONE
            await plain.close()
            assert echo.seen == [("User:ANONYMOUS", ApiKey.DESCRIBE_QUORUM)]
        finally:
            await server.close()

    asyncio.run(main())


def test_handshake_v0_and_other_mechanisms_are_refused() -> None:
    async def main() -> None:
        server, _ = await _serve(USERS)
        try:
            for version, mechanism in ((1, "SCRAM-SHA-256"), (0, "PLAIN")):
                raw = await send_raw(server.port, encode_request(
                    ApiKey.SASL_HANDSHAKE, version, 1, "raw", {"mechanism": mechanism}))
                _, body = decode_response(ApiKey.SASL_HANDSHAKE, version, raw[4:])
                assert body == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                "mechanisms": ["PLAIN"]}
            # A frame that is not a request at all still only closes that connection.
            assert await send_raw(server.port, struct.pack(">i", 3) + b"abc") == b""
        finally:
            await server.close()

    asyncio.run(main())


def test_a_sasl_quorum_commits_and_only_super_users_change_voters(tmp_path: Path) -> None:
    sasl = SaslServerConfig(USERS, ADMIN)
    acl = ClusterAcl.configure("User:admin", tls=True)

    async def body(nodes: list[RaftNode]) -> None:
        bootstrap = [f"127.0.0.1:{n.port}" for n in nodes]
        admin = AsyncQuorumClient(bootstrap, sasl=ADMIN)
        result = await admin.append([NewRecord(b"k", b"v")])
        assert result.last_offset >= result.base_offset >= 0
        guest = AsyncQuorumClient(bootstrap, sasl=GUEST)
        with pytest.raises(VoterChangeError) as refused:
            await _remove_voter_2(nodes, guest)
        assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert "User:guest is not in super.users" in str(refused.value)
        assert sorted(v.replica_id for v in (await admin.describe_quorum()).voters) == [0, 1, 2]
        await guest.close()
        await admin.close()

    asyncio.run(run_quorum(tmp_path, body, sasl=sasl, acl=acl))
