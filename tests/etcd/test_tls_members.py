"""etcd's API over TLS, and membership changes, against one real ``kraft-spark local`` whose
nodes have a certificate (``ssl.*``): Debian's etcdctl 3.4 with ``--cacert --cert --key``
and ``https://`` endpoints; a plaintext client and one without a certificate get no
connection (as against etcd with ``--client-cert-auth``); python-etcd3 0.12 works over TLS.
Then ``member remove`` of a follower (it stays, fetching, as a learner), ``member promote`` of
it, ``member add`` by its peer URL (as a learner, then as a voter), and etcd's errors for
misuse, comparing ``member list`` before and after."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope
from tests.integration.harness import FAST_SETTINGS, running
from tests.lincheck.nemesis import KvQuorum

pytestmark = [
    pytest.mark.integration, pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("etcdctl") is None or shutil.which("openssl") is None,
                       reason="etcdctl or openssl is not installed (Debian's etcd-client: "
                              "`make test` installs it when run as root)"),
]

ENV = {**os.environ, "ETCDCTL_API": "3"}
ETCD3 = "etcd3==0.12.0"
SESSION = Path(__file__).with_name("etcd3_session.py")
CACHED_VENV = Path.home() / ".cache" / "kraft-spark" / "etcd3-0.12.0"


def _certificates(directory: Path) -> dict[str, Path]:
    """A private CA, the nodes' certificate (valid for 127.0.0.1: etcdctl checks the address)
    and a client's."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")  # quicker than RSA
    run("req", "-x509", *ec, "-nodes", "-days", "2", "-subj", "/CN=ca", "-keyout", "ca.key",
        "-out", "ca.pem")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("node", "client"):
        run("req", *ec, "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out",
            f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem")
        (directory / f"{name}.key").chmod(0o600)
    return {n: directory / n for n in ("ca.pem", "node.pem", "node.key", "client.pem",
                                        "client.key")}


class Ctl:
    """etcdctl over TLS with the client's certificate (``tls=False``: plaintext)."""

    def __init__(self, endpoints: list[str], user: str | None, certs: dict[str, Path], *,
                 tls: bool = True, client_cert: bool = True, dial_s: int = 2) -> None:
        scheme = "https" if tls else "http"
        self.base = ["etcdctl", "--endpoints=" + ",".join(f"{scheme}://{e}" for e in endpoints),
                     "--command-timeout=10s", f"--dial-timeout={dial_s}s"]
        if tls:
            self.base.append(f"--cacert={certs['ca.pem']}")
        if tls and client_cert:
            self.base += [f"--cert={certs['client.pem']}", f"--key={certs['client.key']}"]
        if user:
            self.base.append(f"--user={user}")

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, env=ENV,
                              timeout=60, check=False)
        if check:
            assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
            return done.stdout
        assert done.returncode != 0, done.stdout
        # Without clientv3's JSON retry logs.
        return "".join(line + "\n" for line in (done.stdout + done.stderr).splitlines()
                       if not line.startswith("{"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory,
           certs: dict[str, Path]) -> Iterator[KvQuorum]:
    settings = {**FAST_SETTINGS, "ssl.certificate.location": str(certs["node.pem"]),
                "ssl.key.location": str(certs["node.key"]),
                "ssl.ca.location": str(certs["ca.pem"])}
    with running(KvQuorum(tmp_path_factory.mktemp("etcd-tls"), settings=settings)) as q:
        yield q


def _user(quorum: KvQuorum, scope: Scope) -> str:
    credentials = Credentials.load(str(quorum.data_dir / CREDENTIALS_FILE))
    found = next(c for c in credentials.entries if c.scope == scope)
    return f"{found.name or found.scope.label}:{found.token}"


def _endpoints(quorum: KvQuorum) -> list[str]:
    return [str(n["etcd"]) for n in quorum.nodes]


def test_tls_with_client_certificates(quorum: KvQuorum, certs: dict[str, Path]) -> None:
    admin = _user(quorum, Scope.ADMIN)
    ctl = Ctl(_endpoints(quorum), admin, certs)
    assert ctl("put", "tls/k", "v") == "OK\n"
    assert ctl("get", "tls/k") == "tls/k\nv\n"
    lines = ctl("member", "list").splitlines()
    assert [line.split(", ")[4] for line in lines] == [f"https://{e}" for e in _endpoints(quorum)]
    assert [line.split(", ")[3] for line in lines] == [f"https://{n['endpoint']}"
                                                       for n in quorum.nodes]  # TLS too
    deadline = time.monotonic() + 10
    while len(hashes := {line.split(", ")[1] for line in
                         ctl("endpoint", "hashkv").splitlines()}) != 1:
        assert time.monotonic() < deadline, hashes  # until every node applied tls/k
        time.sleep(0.1)
    # Refused before any call: plaintext, or TLS without a client certificate (the
    # handshake fails; etcdctl says what it says against etcd with --client-cert-auth).
    one = _endpoints(quorum)[:1]
    for refused in (Ctl(one, admin, certs, tls=False, dial_s=1),
                    Ctl(one, admin, certs, client_cert=False, dial_s=1)):
        assert "context deadline exceeded" in refused("get", "tls/k", check=False)
    # The certificate is not a user: the calls still need the HTTP API's credentials.
    assert "user name is empty" in Ctl(one, None, certs)("get", "tls/k", check=False)


def _python_with_etcd3() -> str:
    if importlib.util.find_spec("etcd3") is not None:
        return sys.executable
    python = CACHED_VENV / "bin" / "python"
    if not python.exists():
        venv.create(CACHED_VENV, with_pip=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--timeout", "20",
                               ETCD3], capture_output=True, text=True, timeout=240,
                              check=False)
        if done.returncode != 0:
            shutil.rmtree(CACHED_VENV, ignore_errors=True)
            pytest.skip(f"etcd3 is not installed and pip could not install it: "
                        f"{done.stderr.strip()[-300:]}")
    return str(python)


def test_python_etcd3_over_tls(quorum: KvQuorum, certs: dict[str, Path]) -> None:
    python = _python_with_etcd3()
    host, port = str(quorum.nodes[0]["etcd"]).rsplit(":", 1)
    user, password = _user(quorum, Scope.ADMIN).split(":", 1)
    done = subprocess.run(
        [python, str(SESSION), host, port, str(certs["ca.pem"]), str(certs["client.pem"]),
         str(certs["client.key"]), user, password], capture_output=True, text=True,
        timeout=60, check=False,
        env={**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {
        "get": "1", "txn": [True, "2"], "lease_keys": ["p3/l"], "locked": True,
        "members": ["node-0", "node-1", "node-2"], "deleted": 2}


def _members(ctl: Ctl) -> dict[str, tuple[str, ...]]:
    """``member list`` by name: (id, peer URL, client URL, is learner)."""
    out = {}
    for line in ctl("member", "list").splitlines():
        member_id, _status, name, peer, client, learner = line.split(", ")
        out[name] = (member_id, peer, client, learner)
    return out


def _said(out: str, verb: str) -> str:
    """The member id in etcdctl's ``Member <%16x id> <verb> cluster <%16x id>`` line."""
    match = re.match(rf"Member +([0-9a-f]+) {verb} cluster +[0-9a-f]+\n", out)
    assert match is not None, out
    return match.group(1)


def _until(ctl: Ctl, *args: str) -> str:
    """``args`` until it succeeds (a promoted learner must first be in sync)."""
    deadline = time.monotonic() + 30
    while True:
        base = subprocess.run([*ctl.base, *args], capture_output=True, text=True, env=ENV,
                              timeout=60, check=False)
        if base.returncode == 0:
            return base.stdout
        assert "in sync with leader" in base.stderr and time.monotonic() < deadline, base.stderr
        time.sleep(0.3)


def test_member_remove_promote_and_add(quorum: KvQuorum, certs: dict[str, Path]) -> None:
    admin = _user(quorum, Scope.ADMIN)
    everyone = Ctl(_endpoints(quorum), admin, certs)
    before = _members(everyone)
    assert [m[3] for m in before.values()] == ["false"] * 3
    # A follower (a leader removing itself hands over first: not this test's subject).
    leader = {s["Status"]["leader"] for s in json.loads(everyone("endpoint", "status",
                                                                 "-w", "json"))}
    assert len(leader) == 1
    name = max(n for n, m in before.items() if int(m[0], 16) not in leader)
    victim, peer = before[name][0], before[name][1]
    ctl = Ctl([e for e, n in zip(_endpoints(quorum), quorum.nodes, strict=True)
               if f"node-{n['node_id']}" != name], admin, certs)
    writer = Ctl(_endpoints(quorum)[:1], _user(quorum, Scope.WRITE), certs)
    assert "etcdserver: permission denied" in writer("member", "remove", victim, check=False)

    assert _said(ctl("member", "remove", victim), "removed from") == victim
    after = _members(ctl)  # still running: it fetches as an observer, etcd's learner
    assert after == {**before, name: (*before[name][:3], "true")}
    assert "etcdserver: member not found" in ctl("member", "remove", "abc", check=False)
    assert _said(_until(ctl, "member", "promote", victim), "promoted in") == victim
    assert _members(ctl) == before
    assert "etcdserver: can only promote a learner member\n" in ctl(
        "member", "promote", victim, check=False)

    ctl("member", "remove", victim)
    added = ctl("member", "add", "again", f"--peer-urls={peer}", "--learner")
    assert _said(added, "added to") == victim
    assert _members(ctl)[name][3] == "true"
    assert _said(_until(ctl, "member", "add", "again", f"--peer-urls={peer}"),
                 "added to") == victim
    assert _members(ctl) == before
    assert "etcdserver: Peer URLs already exists" in ctl(
        "member", "add", "again", f"--peer-urls={peer}", check=False)
    assert "no observer of this quorum listens on https://127.0.0.1:9" in ctl(
        "member", "add", "n9", "--peer-urls=https://127.0.0.1:9", check=False)
    assert "FailedPrecondition" in ctl("member", "update", victim,
                                       "--peer-urls=https://127.0.0.1:9", check=False)
