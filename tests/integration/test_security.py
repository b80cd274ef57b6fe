"""Nobody gets in where they don't belong, tried against real processes with the defaults of
``kraft-spark local``: every HTTP route without a credential, with a wrong one and with one of
too small a scope (on the sidecar and on a node's own API), a credentials file others can read
(`local` and the application), HTTP and Kafka-protocol listeners beyond loopback without
authentication (a node, `local`, the application on a cluster master), and a search of every
log, command line and answer for the secrets. Every attempt is refused with a clear error and
nothing is changed. The Kafka-protocol listeners (SASL/PLAIN by default): every request without
credentials or with a wrong password, voter changes by a principal not in ``super.users``, and
the password nowhere but in its two files. Under mutual TLS (Kafka's production setting): no
answer without a client certificate, voter changes refused to a certificate whose principal
``super.users`` does not list. (Spark Connect without its token, every route of the
application's HTTP APIs, and the secrets in the application's log, Delta tables and command
lines: tests/spark/test_application.py.)"""

from __future__ import annotations

import asyncio
import json
import ssl
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.client import AsyncQuorumClient, AuthenticationError
from kraft_spark.client.errors import ClientError
from kraft_spark.client.security import ClientSecurity
from kraft_spark.client.voter_changes import VoterChangeError
from kraft_spark.http_auth import Credentials, Scope
from kraft_spark.log.meta import format_log_dir
from kraft_spark.protocol import ApiKey, ErrorCode, decode_response, encode_request
from kraft_spark.protocol.sasl_plain import PlainCredentials
from kraft_spark.quorum_auth import USERS_FILE
from tests.net.helpers import free_run, make_certs, make_client_cert, send_raw

from .harness import FAST_SETTINGS, LocalQuorum, running
from .http_guard import assert_every_route_guarded, call

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _voter_set(quorum: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """Who the voters are: ids and endpoints. Not their directory ids: in a quorum started
    with static voters the leader learns one from the voter's first Fetch, which on a loaded
    machine may come after the first DescribeQuorum (a CI run saw None, then the id)."""
    return sorted((v["id"], v["endpoints"]) for v in quorum["currentVoters"])


def test_every_http_route_refuses_missing_wrong_and_too_small_credentials(
    tmp_path: Path,
) -> None:
    quorum = LocalQuorum(tmp_path / "data", http=True, node_http=True)
    with running(quorum):
        path = tmp_path / "data" / "http-credentials"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
        credentials = Credentials.load(str(path))
        tokens = {scope: credentials.token_of(scope) for scope in Scope}
        assert all(tokens.values())
        admin = tokens[Scope.ADMIN]
        assert admin is not None
        status, before, _ = call(f"{quorum.http_url}/v1/records?limit=1000", token=admin)
        assert status == 200
        voters_before = _voter_set(call(f"{quorum.http_url}/v1/quorum", token=admin)[1])
        for base in (quorum.http_url, quorum.http_urls[1]):  # the sidecar, a node's own API
            tried = assert_every_route_guarded(base, {s: t for s, t in tokens.items() if t})
            assert ("POST", "/v1/records") in tried and ("POST", "/v1/quorum/voters") in tried
        # Nothing was appended and the voters are the same.
        after = call(f"{quorum.http_url}/v1/records?limit=1000", token=admin)[1]
        assert after["records"] == before["records"]
        assert _voter_set(call(f"{quorum.http_url}/v1/quorum", token=admin)[1]) == voters_before
        # The right scope gets in: a writer appends, a reader reads it back.
        status, appended, _ = call(f"{quorum.http_url}/v1/records", "POST",
                                    tokens[Scope.WRITE], {"key": "ok", "value": 1})
        assert status == 200, appended
        status, read, _ = call(f"{quorum.http_url}/v1/records?from_offset="
                                f"{appended['base_offset']}", token=tokens[Scope.READ])
        assert status == 200 and read["records"][0]["key"] == "ok"
        # No secret in a command line (ps), a log, a properties file or an answer.
        pids = [quorum.proc.pid] if quorum.proc else []
        pids += [int(str(n["pid"])) for n in quorum.nodes]
        command_lines = b"".join(Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pids)
        texts = [command_lines.decode(errors="replace")]
        texts += [p.read_text(errors="replace") for p in (tmp_path / "data").rglob("*")
                  if p.is_file() and p.suffix in (".log", ".properties")]
        texts.append(json.dumps(call(f"{quorum.http_url}/v1/quorum", token=admin)[1]))
        texts.append(json.dumps(call(f"{quorum.http_url}/openapi.json", token=admin)[1]))
        texts.append(call(f"{quorum.http_url}/metrics", token=admin)[1]["text"])
        for token in tokens.values():
            assert token is not None
            assert not any(token in text for text in texts)


def test_a_credentials_file_others_can_read_is_refused_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    credentials = data / "http-credentials"
    credentials.write_text("admin some-long-admin-token ops\n")
    credentials.chmod(0o644)
    done = subprocess.run(
        [sys.executable, "-m", "kraft_spark", "local", "--voters", "1", "--data-dir", str(data),
         "--http-port", "0", "--base-port", str(free_run(2))],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "are too open" in done.stderr and f"chmod 600 {credentials}" in done.stderr
    assert "some-long-admin-token" not in done.stderr + done.stdout


@pytest.mark.parametrize("setting,why", [
    ("kraft.http.listener=0.0.0.0:0", "kraft.http.credentials.file"),
    ("listeners=0.0.0.0:0", "kraft.listener.plaintext.allowed=true"),
])
def test_a_node_refuses_to_listen_beyond_loopback_without_authentication(
    tmp_path: Path, setting: str, why: str,
) -> None:
    log_dir = tmp_path / "node-0"
    format_log_dir(str(log_dir), cluster_id="securitytest-cluster1", node_id=0)
    conf = tmp_path / "node.properties"
    conf.write_text(f"node.id=0\nlog.dirs={log_dir}\ncontroller.quorum.voters=0@127.0.0.1:1\n"
                    f"{setting}\n")
    done = subprocess.run([sys.executable, "-m", "kraft_spark", "node", "--config", str(conf)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert why in done.stderr, done.stderr[-2000:]
    assert "0.0.0.0" in done.stderr


async def _refusals(quorum: LocalQuorum) -> None:
    """Without credentials and with a wrong password: no request of any kind gets through."""
    boot = quorum.bootstrap
    admin = ClientSecurity.from_file(quorum.command_config).sasl
    assert admin is not None and admin.username == "admin"
    for sasl in (None, PlainCredentials("admin", admin.password[:-1] + "x")):
        client = AsyncQuorumClient(boot, sasl=sasl, retry_budget_s=5.0)
        try:
            for attempt in (client.describe_quorum(), client.read(0, 10),
                            client.remove_voter(2, uuid.uuid4(), timeout_s=3)):
                with pytest.raises(AuthenticationError) as refused:
                    await attempt
                assert ("Invalid username or password" if sasl else "no credentials") in str(
                    refused.value)
                assert admin.password not in str(refused.value)
        finally:
            await client.close()
    # A raw AddRaftVoter, as any local process could send it: ILLEGAL_SASL_STATE, then closed.
    frame = encode_request(ApiKey.ADD_RAFT_VOTER, 0, 9, "intruder", {
        "cluster_id": None, "timeout_ms": 1000, "voter_id": 7,
        "voter_directory_id": uuid.uuid4(), "listeners": [
            {"name": "CONTROLLER", "host": "127.0.0.1", "port": 1}]})
    for endpoint in boot:
        raw = await send_raw(int(endpoint.rsplit(":", 1)[1]), frame)
        _, body = decode_response(ApiKey.ADD_RAFT_VOTER, 0, raw[4:])
        assert body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE, body
        assert "SASL/PLAIN" in body["error_message"]


def test_the_kafka_port_refuses_everyone_without_the_quorums_credentials(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with running(LocalQuorum(data)) as quorum:
        for name in (USERS_FILE, "admin.properties"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600
        with quorum.client() as client:
            voters_before = sorted(v.replica_id for v in client.describe_quorum().voters)
        asyncio.run(_refusals(quorum))
        with quorum.client() as client:  # the administrator gets in; nothing changed
            assert sorted(v.replica_id for v in client.describe_quorum().voters) == voters_before
        # The password is in its two files only: not in a command line, a log, a node's
        # properties or an answer.
        password = (data / USERS_FILE).read_text().split()[1]
        pids = [quorum.proc.pid] if quorum.proc else []
        pids += [int(str(n["pid"])) for n in quorum.nodes]
        texts = [Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                 for pid in pids]
        texts += [p.read_text(errors="replace") for p in data.rglob("*")
                  if p.is_file() and p.suffix in (".log", ".properties")
                  and p.name != "admin.properties"]
        assert texts and not any(password in text for text in texts)


def test_voter_changes_need_a_principal_in_super_users(tmp_path: Path) -> None:
    """An authenticated principal that ``super.users`` does not list (here the nodes' own
    ``admin``, with ``super.users=User:ops``) may read, but not change the voters."""
    quorum = LocalQuorum(tmp_path / "data",
                         settings={**FAST_SETTINGS, "super.users": "User:ops"})
    with running(quorum), quorum.client(retry_budget_s=10.0) as client:
        # Authorization comes first: the directory id is not even looked at.
        with pytest.raises(VoterChangeError) as refused:
            client.remove_voter(2, uuid.uuid4(), timeout_s=3)
        assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert "User:admin is not in super.users" in str(refused.value)
        assert sorted(v.replica_id for v in client.describe_quorum().voters) == [0, 1, 2]


def test_voter_changes_over_mutual_tls_need_a_certificate_and_an_allowed_principal(
    tmp_path: Path,
) -> None:
    """Kafka's production setting on real processes: `kraft-spark local` with mutual TLS (the
    nodes' certificate, CN=node) and ``super.users`` naming the administrator's certificate.
    A client without a certificate gets no answer at all; one whose certificate is the nodes'
    is refused both voter changes (CLUSTER_AUTHORIZATION_FAILED); the administrator's passes
    the authorizer. The voters never change."""
    node, _ = make_certs(tmp_path)
    admin = make_client_cert(tmp_path, "admin", "/OU=ops/CN=admin")
    settings = {**FAST_SETTINGS, "ssl.certificate.location": node.certfile,
                "ssl.key.location": node.keyfile, "ssl.ca.location": node.cafile,
                "super.users": "User:CN=admin,OU=ops"}
    quorum = LocalQuorum(tmp_path / "data", settings=settings, args=["--quorum-insecure"])

    async def tries(boot: list[str]) -> None:
        no_certificate = ssl.create_default_context(cafile=node.cafile)
        no_certificate.check_hostname = False
        anonymous = AsyncQuorumClient(boot, ssl_context=no_certificate, retry_budget_s=3.0)
        try:
            for attempt in (anonymous.describe_quorum(),
                            anonymous.add_voter(7, uuid.uuid4(), (), timeout_s=2),
                            anonymous.remove_voter(2, uuid.uuid4(), timeout_s=2)):
                with pytest.raises(ClientError):
                    await attempt
        finally:
            await anonymous.close()
        peer = AsyncQuorumClient(boot, ssl_context=node.client_context())
        try:
            for change in (peer.add_voter(7, uuid.uuid4(), (), timeout_s=2),
                           peer.remove_voter(2, uuid.uuid4(), timeout_s=2)):
                with pytest.raises(VoterChangeError) as refused:
                    await change
                assert refused.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                assert "User:CN=node is not in super.users" in str(refused.value)
            assert sorted(v.replica_id for v in (await peer.describe_quorum()).voters) == [
                0, 1, 2]
        finally:
            await peer.close()
        boss = AsyncQuorumClient(boot, ssl_context=admin.client_context())
        try:  # past the authorizer: the leader judges the change (no voter 9 to remove)
            with pytest.raises(VoterChangeError) as judged:
                await boss.remove_voter(9, uuid.uuid4(), timeout_s=2)
            assert judged.value.code == ErrorCode.VOTER_NOT_FOUND, judged.value
            assert sorted(v.replica_id for v in (await boss.describe_quorum()).voters) == [
                0, 1, 2]
        finally:
            await boss.close()

    with running(quorum):
        asyncio.run(tries(quorum.bootstrap))


def test_local_refuses_a_plaintext_quorum_beyond_loopback_before_starting(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "kraft_spark", "local", "--voters", "1", "--data-dir", str(data),
         "--host", "0.0.0.0", "--base-port", str(free_run(2))],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--host 0.0.0.0" in done.stderr
    assert "kraft.listener.plaintext.allowed=true" in done.stderr
    assert not data.exists()  # nothing written, nothing started


@pytest.mark.parametrize("case", ["cluster master without TLS", "credentials others can read"])
def test_the_application_refuses_an_open_setting_before_spark_starts(
    tmp_path: Path, case: str,
) -> None:
    """Refused in a second or two, before any JVM: a cluster master whose voters would listen
    in plaintext on every interface of their hosts, and an HTTP credentials file others can
    read (as ssh refuses such a key)."""
    conf = tmp_path / "app.properties"
    args = ["--http-port", "0", "--sql-port", "0"]
    if case == "cluster master without TLS":
        conf.write_text("")
        args += ["--master", "spark://10.9.9.9:7077"]
        why = "set kraft.listener.plaintext.allowed=true"
    else:
        credentials = tmp_path / "credentials"
        credentials.write_text("admin some-long-admin-token ops\n")
        credentials.chmod(0o644)
        conf.write_text(f"kraft.http.credentials.file={credentials}\n")
        why = f"chmod 600 {credentials}"
    done = subprocess.run(
        [sys.executable, "-m", "kraft_spark", "run", "--data-dir", str(tmp_path / "data"),
         "--config", str(conf), *args],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert why in done.stderr, done.stderr[-2000:]
    assert "starting Spark" not in done.stderr
    assert "some-long-admin-token" not in done.stderr + done.stdout
