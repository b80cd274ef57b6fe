"""etcd's own command-line client (Debian's etcdctl 3.4, unchanged) against a real
``kraft-spark local``: what it prints for put/get/del/txn/lease/watch must be what it prints
against etcd itself (Debian's etcd 3.4, started here when installed), lease ids and revisions
aside; member list and endpoint status are checked for their shape. A key written over etcd's
API reads over HTTP with ``mod_offset == mod_revision``, and the reverse.

etcdctl authenticates as etcd's clients do: ``--user <credential name>:<token>`` against
kraft-spark (Auth.Authenticate), nothing against the etcd started here (no auth enabled but
for the RBAC session, ``tests/etcd/rbac_session.py``: users, roles and permissions side by
side, and the HTTP API agreeing with a user's roles)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from kraft_spark.etcd.pb import rpc_pb2, v3lock_pb2
from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope
from kraft_spark.log.codec import decode_batch
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import control_key
from kraft_spark.state.snapshot_file import CONTROL_TYPE_SNAPSHOT_FOOTER, decode_snapshot
from tests.etcd import rbac_session
from tests.etcd.conftest import Stub
from tests.integration.harness import running
from tests.lincheck.nemesis import KvQuorum
from tests.net.helpers import free_ports

pytestmark = [
    pytest.mark.integration, pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("etcdctl") is None,
                       reason="etcdctl is not installed (Debian's etcd-client: `make test` "
                              "installs it when run as root)"),
]

ENV = {**os.environ, "ETCDCTL_API": "3"}


class Etcdctl:
    def __init__(self, endpoints: str, user: str | None = None) -> None:
        self.base = ["etcdctl", f"--endpoints={endpoints}", "--command-timeout=10s"]
        if user:
            self.base.append(f"--user={user}")

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run([*self.base, *args], input=stdin, capture_output=True,
                              text=True, env=ENV, timeout=30, check=False)
        if check:
            assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
        return done.stdout if check else done.stdout + done.stderr

    def revision(self) -> int:
        # etcdctl's JSON leaves out zero fields: a fresh quorum's revision is 0.
        return int(json.loads(self("get", "none", "-w", "json"))["header"].get("revision", 0))

    def watch(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base, "watch", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=ENV)


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvQuorum]:
    """`kraft-spark local --http-port 0`, every other setting its default: the nodes serve
    etcd's API, and the etcd front serves it beside the HTTP address."""
    with running(KvQuorum(tmp_path_factory.mktemp("etcd"), http=True)) as q:
        yield q


def _admin(quorum: KvQuorum) -> str:
    credentials = Credentials.load(str(quorum.data_dir / CREDENTIALS_FILE))
    admin = next(c for c in credentials.entries if c.scope == Scope.ADMIN)
    return f"{admin.name or admin.scope.label}:{admin.token}"


@pytest.fixture(scope="module")
def kraft(quorum: KvQuorum) -> Etcdctl:
    """etcdctl at the addresses the nodes' lines print."""
    return Etcdctl(",".join(str(n["etcd"]) for n in quorum.nodes), _admin(quorum))


@pytest.fixture(scope="module")
def front(quorum: KvQuorum) -> Etcdctl:
    """etcdctl at the one address printed beside the HTTP one (``kraft_spark.etcd_front``)."""
    return Etcdctl(str(quorum.front["etcd"]), _admin(quorum))


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcdctl | None]:
    """Debian's etcd 3.4 on loopback, for the side-by-side outputs (None if not installed)."""
    if shutil.which("etcd") is None:
        yield None
        return
    client, peer = free_ports(2)
    data = tmp_path_factory.mktemp("etcd-server")
    log = open(data / "etcd.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        ["etcd", "--data-dir", str(data / "d"), "--name", "etcd0",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"etcd0=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=log)
    ctl = Etcdctl(f"127.0.0.1:{client}")
    try:
        deadline = time.monotonic() + 20
        while ctl("endpoint", "health", check=False).find("is healthy") < 0:
            assert time.monotonic() < deadline, (data / "etcd.log").read_text()[-2000:]
            time.sleep(0.2)
        yield ctl
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _normalized(text: str) -> str:
    text = re.sub(r"lease [0-9a-f]{16}", "lease <id>", text)
    text = re.sub(r"^[0-9a-f]{16}$", "<id>", text, flags=re.M)
    return re.sub(r"remaining\(\d+s\)", "remaining(<s>)", text)


# The session both systems run, in order; each step's output is compared.
TXN_SWAP = 'value("zz/t") = "v1"\n\nput zz/t v2\n\nget zz/t\n\n'
SESSION: list[tuple[str, ...]] = [
    ("put", "zz/a", "1"), ("put", "zz/b", "2"), ("put", "zz/c", "3"),
    ("put", "zz/a", "10", "--prev-kv"),
    ("get", "zz/", "--prefix"), ("get", "zz/b", "--from-key"),
    ("get", "zz/", "--prefix", "--limit", "2"),
    ("get", "zz/", "--prefix", "--sort-by=VALUE", "--order=DESCEND"),
    ("get", "zz/", "--prefix", "--sort-by=CREATE", "--order=DESCEND", "--keys-only"),
    ("get", "zz/", "--prefix", "--print-value-only"),
    ("get", "zz/a", "zz/c"),
    ("del", "zz/a", "--prev-kv"), ("del", "zz/", "--prefix"), ("get", "zz/", "--prefix"),
    ("put", "zz/t", "v1"), ("txn", "-i"), ("txn", "-i"),
    ("txn",),  # compares on version, create, mod and value, non-interactive
    ("lease", "grant", "60"),
]
STDIN = {15: TXN_SWAP, 16: TXN_SWAP,
         # (etcdctl 3.4 panics parsing a lease compare: lease compares are in test_plan.py)
         17: 'version("zz/t") = "2"\ncreate("zz/t") > "0"\nmod("zz/none") = "0"\n'
             'value("zz/t") != "x"\n\nget zz/t\n\nput zz/never x\n\n'}


def _run_session(ctl: Etcdctl) -> list[str]:
    outputs = [ctl(*step, stdin=STDIN.get(i)) for i, step in enumerate(SESSION)]
    lease = outputs[-1].split()[1]
    for step in (("put", "zz/l", "x", f"--lease={lease}"),
                 ("lease", "timetolive", lease, "--keys"),
                 ("lease", "keep-alive", "--once", lease), ("lease", "list"),
                 ("lease", "revoke", lease), ("get", "zz/l"), ("lease", "timetolive", lease)):
        outputs.append(ctl(*step))
    return [_normalized(o) for o in outputs]


def test_etcdctl_prints_what_it_prints_against_etcd(kraft: Etcdctl,
                                                    etcd: Etcdctl | None) -> None:
    ours = _run_session(kraft)
    assert ours[3] == "OK\nzz/a\n1\n"  # --prev-kv
    assert ours[4] == "zz/a\n10\nzz/b\n2\nzz/c\n3\n"
    assert ours[6] == "zz/a\n10\nzz/b\n2\n"
    assert ours[11] == "1\nzz/a\n10\n" and ours[12] == "2\n"
    assert "SUCCESS" in ours[15] and "FAILURE" in ours[16] and "zz/t\nv2" in ours[16]
    assert ours[17] == "SUCCESS\n\nzz/t\nv2\n"
    assert ours[-3] == "lease <id> revoked\n" and ours[-1] == "lease <id> already expired\n"
    if etcd is None:
        pytest.skip("etcd (Debian's etcd-server) is not installed: outputs checked alone")
    theirs = _run_session(etcd)
    for step, mine, other in zip(SESSION + [("lease...",)] * 7, ours, theirs, strict=True):
        assert mine == other, f"etcdctl {' '.join(step)}"


def _read_lines(proc: subprocess.Popen[str], count: int) -> list[str]:
    assert proc.stdout is not None
    with proc.stdout:
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(count)]
        proc.kill()
        proc.wait()
    return lines


def _watch_session(ctl: Etcdctl) -> list[str]:
    start = ctl.revision() + 1
    ctl("put", "ww/a", "1")
    ctl("put", "other", "x")
    ctl("del", "ww/a")
    # From a past revision: the writes since, then a live one.
    proc = ctl.watch("ww/", "--prefix", f"--rev={start}")
    time.sleep(0.5)
    ctl("put", "ww/b", "2")
    return _read_lines(proc, 9)


def test_watch_from_a_revision_then_live(kraft: Etcdctl, etcd: Etcdctl | None) -> None:
    ours = _watch_session(kraft)
    assert ours == ["PUT", "ww/a", "1", "DELETE", "ww/a", "", "PUT", "ww/b", "2"]
    if etcd is not None:
        assert _watch_session(etcd) == ours


def test_members_and_status(kraft: Etcdctl, quorum: KvQuorum) -> None:
    members = kraft("member", "list").splitlines()
    assert len(members) == 3
    for node, line in zip(quorum.nodes, members, strict=True):
        fields = line.split(", ")
        assert fields[1:3] == ["started", f"node-{node['node_id']}"]
        assert fields[4] == f"http://{node['etcd']}" and fields[5] == "false"
    status = json.loads(kraft("endpoint", "status", "-w", "json"))
    assert len(status) == 3
    leaders = {s["Status"]["leader"] for s in status}
    assert len(leaders) == 1
    assert sum(s["Status"]["header"]["member_id"] == s["Status"]["leader"]
               for s in status) == 1
    assert {s["Status"]["version"] for s in status} == {"3.5.0"}


def test_without_credentials_etcdctl_is_refused(quorum: KvQuorum) -> None:
    anonymous = Etcdctl(str(quorum.nodes[0]["etcd"]))
    assert "user name is empty" in anonymous("get", "k", check=False)
    wrong = Etcdctl(str(quorum.nodes[0]["etcd"]), "admin:not-a-token")
    assert "authentication failed" in wrong("get", "k", check=False)


def test_revisions_agree_with_the_http_api(kraft: Etcdctl, quorum: KvQuorum) -> None:
    kraft("put", "x/grpc", "from-etcdctl")
    url = quorum.http_urls[1]
    with httpx.Client(headers=quorum.auth, timeout=10) as http:
        over_http = http.get(f"{url}/v1/kv/x/grpc").json()
        written = http.post(f"{url}/v1/records", json={"key": "x/http", "value": "v"})
        assert written.status_code == 200, written.text
    over_grpc = json.loads(kraft("get", "x/grpc", "-w", "json"))["kvs"][0]
    assert over_http["value"] == "from-etcdctl"
    assert over_http["mod_offset"] == over_grpc["mod_revision"]
    assert over_http["create_offset"] == over_grpc["create_revision"]
    kv = json.loads(kraft("get", "x/http", "-w", "json"))["kvs"][0]
    assert kv["mod_revision"] == written.json()["base_offset"]
    # A conditional write over HTTP is one request: both keys at its base offset over gRPC;
    # a Txn's two keys over HTTP at its revision.
    with httpx.Client(headers=quorum.auth, timeout=10) as http:
        group = http.post(f"{url}/v1/records", json={
            "conditions": [{"key": "x/cw1", "exists": False}],
            "records": [{"key": "x/cw1", "value": 1}, {"key": "x/cw2", "value": 2}]})
        assert group.status_code == 200, group.text
        assert group.json()["last_offset"] == group.json()["base_offset"] + 1
        txn = json.loads(kraft("txn", "-w", "json", stdin="\nput x/t1 a\nput x/t2 b\n\n\n"))
        over_http = [http.get(f"{url}/v1/kv/x/{k}").json() for k in ("t1", "t2")]
    kvs = json.loads(kraft("get", "x/cw", "--prefix", "-w", "json"))["kvs"]
    assert [(kv["mod_revision"], kv["create_revision"]) for kv in kvs] == [
        (group.json()["base_offset"],) * 2] * 2
    assert [(kv["mod_offset"], kv["create_offset"]) for kv in over_http] == [
        (int(txn["header"]["revision"]),) * 2] * 2
    assert bytes.fromhex(kraft("get", "x/http", "--print-value-only", "--hex").strip()
                         .replace("\\x", "")) == b'"v"'  # the HTTP API stores JSON


def _errors(text: str) -> str:
    """What etcdctl says, without clientv3's JSON retry logs."""
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("{"))


def _history_session(ctl: Etcdctl) -> list[str]:
    def put(value: str) -> int:
        return int(json.loads(ctl("put", "hh/k", value, "-w", "json"))["header"]["revision"])

    first, second = put("v1"), put("v2")
    ctl("del", "hh/k")
    put("v3")
    outputs = [ctl("get", "hh/k", f"--rev={first}"), ctl("get", "hh/k", f"--rev={second}"),
               ctl("get", "hh/", "--prefix", f"--rev={second}", "--keys-only")]
    # From a past revision with each event's previous value (none before v1, none after
    # the delete), then compaction: below it reads and watches are refused, at it not.
    outputs.append("\n".join(_read_lines(ctl.watch("hh/k", f"--rev={first}", "--prev-kv"),
                                         16)))
    outputs.append(ctl("compaction", str(second)).replace(str(second), "<second>"))
    outputs.append(_errors(ctl("get", "hh/k", f"--rev={first}", check=False)))
    done = subprocess.run([*ctl.base, "watch", "hh/k", f"--rev={first}"], capture_output=True,
                          text=True, env=ENV, timeout=30, check=False)
    outputs.append(_errors(done.stdout + done.stderr) + f"exit {done.returncode}\n")
    outputs.append(ctl("get", "hh/k", f"--rev={second}"))
    outputs.append(_errors(ctl("compaction", str(second), check=False)))
    return outputs


def test_past_revisions_prev_kv_and_compaction(kraft: Etcdctl, etcd: Etcdctl | None) -> None:
    ours = _history_session(kraft)
    assert ours[:3] == ["hh/k\nv1\n", "hh/k\nv2\n", "hh/k\n\n"]
    assert ours[3].split("\n") == ["PUT", "hh/k", "v1", "PUT", "hh/k", "v1", "hh/k", "v2",
                                   "DELETE", "hh/k", "v2", "hh/k", "", "PUT", "hh/k", "v3"]
    assert ours[4] == "compacted revision <second>\n"
    compacted = "etcdserver: mvcc: required revision has been compacted"
    assert ours[5] == f"Error: {compacted}\n"
    assert ours[6].startswith(f"watch was canceled ({compacted})\n")
    assert ours[7] == "hh/k\nv2\n" and ours[8] == f"Error: {compacted}\n"
    if etcd is not None:
        assert _history_session(etcd) == ours


def _key(kv: dict[str, Any]) -> str:
    return base64.b64decode(kv["key"]).decode()


def _shared_revision_session(ctl: Etcdctl) -> list[Any]:
    """A Txn putting two keys and deleting a third, a watch from its revision, a DeleteRange
    of the prefix: every revision relative to the Txn's or the delete's."""
    ctl("put", "tr/c", "0")
    txn = json.loads(ctl("txn", "-w", "json", stdin="\nput tr/a 1\nput tr/b 2\ndel tr/c\n\n\n"))
    r = int(txn["header"]["revision"])
    got = json.loads(ctl("get", "tr/", "--prefix", "-w", "json"))["kvs"]
    # The watch reads the Txn from the past, then sees the delete live (etcd sends every
    # past revision a watch catches up on in one response, a live one per revision).
    proc = ctl.watch("tr/", "--prefix", f"--rev={r}", "-w", "json")
    assert proc.stdout is not None
    with proc.stdout:
        responses = [json.loads(proc.stdout.readline())]
        deleted = json.loads(ctl("del", "tr/", "--prefix", "-w", "json"))
        responses.append(json.loads(proc.stdout.readline()))
        proc.kill()
        proc.wait()
    d = int(deleted["header"]["revision"])
    return [
        txn["succeeded"],
        # etcd 3.4 gives each operation of a Txn a header: the Txn's revision after a write.
        [next(iter(op["Response"].values())).get("header", {}).get("revision", 0) - r
         for op in txn["responses"]],
        [(_key(kv), kv["mod_revision"] - r, kv["create_revision"] - r, kv["version"])
         for kv in got],
        (int(deleted["deleted"]), d > r),
        [[(("PUT", "DELETE")[e.get("type", 0)], _key(e["kv"]),
           e["kv"].get("mod_revision", 0) - base) for e in response["Events"]]
         for response, base in zip(responses, (r, d), strict=True)],
        [response["Header"]["revision"] - base
         for response, base in zip(responses, (r, d), strict=True)],
    ]


def test_a_txns_and_a_delete_ranges_writes_share_one_revision(kraft: Etcdctl,
                                                              etcd: Etcdctl | None) -> None:
    """What etcdctl prints, revisions relative to the Txn's: equal mod_revisions on both
    systems, the Txn's header revision theirs, one watch response per request."""
    ours = _shared_revision_session(kraft)
    assert ours == [
        True, [0, 0, 0], [("tr/a", 0, 0, 1), ("tr/b", 0, 0, 1)], (2, True),
        [[("PUT", "tr/a", 0), ("PUT", "tr/b", 0), ("DELETE", "tr/c", 0)],
         [("DELETE", "tr/a", 0), ("DELETE", "tr/b", 0)]],
        [0, 0]]
    if etcd is not None:
        assert _shared_revision_session(etcd) == ours


def test_lock_is_exclusive_and_passes_on(kraft: Etcdctl) -> None:
    """etcdctl lock: clientv3's Mutex (a Txn that reads the key it writes, a lease kept alive
    on a KeepAlive stream, a watch for the holder's delete)."""
    first = subprocess.Popen([*kraft.base, "lock", "ll"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=ENV)
    assert first.stdout is not None
    with first.stdout:
        held = first.stdout.readline().strip()
        assert held.startswith("ll/"), held
        second = subprocess.Popen([*kraft.base, "lock", "ll"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=ENV)
        time.sleep(1.0)
        assert second.poll() is None
        first.send_signal(signal.SIGINT)  # etcdctl unlocks on ^C
        first.wait(10)
    assert second.stdout is not None
    with second.stdout:
        taken = second.stdout.readline().strip()
        second.send_signal(signal.SIGINT)
        second.wait(10)
    assert taken.startswith("ll/") and taken != held


def _elect_session(ctl: Etcdctl) -> list[str]:
    """etcdctl elect: clientv3's Election (Campaign on a session lease, Observe on a watch). A
    candidate leads, a second waits behind it, an observer started under the first leader
    sees it, then the second once the first resigns on ^C. Candidate keys (``ee/<lease>``)
    are named in order of appearance, as their lease ids differ between systems."""
    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*ctl.base, "elect", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=ENV)

    first = start("ee", "p1")
    second = observer = None
    try:
        assert first.stdout is not None
        lines = [first.stdout.readline().strip() for _ in range(2)]
        second = start("ee", "p2")
        observer = start("-l", "ee")
        assert observer.stdout is not None and second.stdout is not None
        lines += [observer.stdout.readline().strip() for _ in range(2)]
        time.sleep(1.0)
        assert second.poll() is None, "a second candidate must wait for the leader"
        first.send_signal(signal.SIGINT)  # etcdctl resigns on ^C
        first.wait(10)
        lines += [second.stdout.readline().strip() for _ in range(2)]
        lines += [observer.stdout.readline().strip() for _ in range(2)]
    finally:
        for proc in (first, second, observer):
            if proc is not None:
                proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
    names: dict[str, str] = {}
    return [names.setdefault(line, f"ee/<{len(names) + 1}>") if line.startswith("ee/")
            else line for line in lines]


def test_elect_campaigns_observes_and_passes_on(kraft: Etcdctl, etcd: Etcdctl | None) -> None:
    ours = _elect_session(kraft)
    assert ours == ["ee/<1>", "p1", "ee/<1>", "p1", "ee/<2>", "p2", "ee/<2>", "p2"]
    if etcd is not None:
        assert _elect_session(etcd) == ours


def _hashes(ctl: Etcdctl, *args: str) -> dict[str, int]:
    """``endpoint hashkv``'s lines ``<endpoint>, <hash>`` by endpoint."""
    return {ep: int(h) for ep, h in (line.split(", ") for line in
                                     ctl("endpoint", "hashkv", *args).splitlines())}


def test_maintenance_hashkv_snapshot_alarm_defrag(kraft: Etcdctl, quorum: KvQuorum,
                                                   tmp_path: Path) -> None:
    """HashKV agrees on every node, at the current and at a past revision (from the MVCC
    history), refuses compacted and future ones; snapshot save writes the node's own snapshot
    of the state (its sha256 appended, as etcd's); no alarms; defrag is a no-op; MoveLeader is
    refused, saying why."""
    kraft("put", "mm/a", "1")
    kraft("put", "mm/b", "2")
    kraft("del", "mm/a")
    before = kraft.revision()
    kraft("put", "mm/c", "3")
    deadline = time.monotonic() + 10
    while len(set((now := _hashes(kraft)).values())) != 1:  # until every node applied mm/c
        assert time.monotonic() < deadline, now
        time.sleep(0.1)
    assert len(now) == 3
    past = _hashes(kraft, f"--rev={before}")
    assert len(set(past.values())) == 1 and past != now  # mm/c is not in the past state
    kraft("put", "mm/d", "4")
    assert _hashes(kraft, f"--rev={before}") == past  # a past state does not move
    kraft("compaction", str(before))
    assert "required revision has been compacted" in _errors(
        kraft("endpoint", "hashkv", f"--rev={before - 1}", check=False))
    assert "required revision is a future revision" in _errors(
        kraft("endpoint", "hashkv", f"--rev={10**12}", check=False))

    one = Etcdctl(str(quorum.nodes[1]["etcd"]), kraft.base[-1].removeprefix("--user="))
    path = tmp_path / "snap.db"
    assert one("snapshot", "save", str(path)) == f"Snapshot saved at {path}\n"
    data = path.read_bytes()
    assert len(data) % 512 == 32 and hashlib.sha256(data[:-32]).digest() == data[-32:]
    pos, batches = 0, []
    while not batches or batches[-1].records[0].key != control_key(CONTROL_TYPE_SNAPSHOT_FOOTER):
        batch, pos = decode_batch(data, pos)
        batches.append(batch)
    assert not data[pos:-32].strip(b"\0")  # zeros up to the sha256
    content = decode_snapshot(data[:pos], OffsetAndEpoch(2**62, batches[0].epoch), str(path))
    state = {k: e.value for k, e in content.entries}
    assert state[b"mm/b"] == b"2" and state[b"mm/d"] == b"4" and b"mm/a" not in state
    assert "invalid database" in _errors(one("snapshot", "status", str(path), check=False))

    assert kraft("alarm", "list") == ""
    assert kraft("alarm", "disarm") == ""
    assert kraft("defrag").count("Finished defragmenting etcd member") == 3
    refused = _errors(kraft("move-leader", "1", check=False))  # etcdctl finds the leader
    assert "Unimplemented" in refused and "MoveLeader is not supported" in refused


# ---- etcd's RBAC (tests/etcd/rbac_session.py); last: the etcd beside it gets auth enabled
# for the session and disabled again after it.


def test_rbac_session_prints_what_etcd_prints(kraft: Etcdctl, quorum: KvQuorum,
                                              etcd: Etcdctl | None) -> None:
    endpoints = kraft.base[1].split("=", 1)[1]
    assert kraft("auth", "enable") == "Authentication Enabled\n"  # always on: OK
    ours = rbac_session.run_session(kraft, Etcdctl(endpoints, rbac_session.ALICE))
    assert ours[0] == "User alice created\n"
    assert ours[8] == ("Role app\nKV Read:\n\t[rb/app/, rb/app0) (prefix rb/app/)\n"
                       "\trb/shared\nKV Write:\n\t[rb/app/, rb/app0) (prefix rb/app/)\n"
                       "\t[rb/logs/, rb/logs0) (prefix rb/logs/)\n")
    assert ours[17] == "OK\n" and ours[18] == "Error: etcdserver: permission denied\n"
    assert ours[19] == "rb/app/x\n1\n" and ours[26] == "OK\nrb/app/x\n1\n"
    assert ours[27] == "Error: etcdserver: permission denied\n"
    assert ours[10] == "Error: etcdserver: user name already exists\n"
    assert ours[-1] == ""  # alice deleted: only the built-in users are left
    if etcd is None:
        pytest.skip("etcd (Debian's etcd-server) is not installed: outputs checked alone")
    endpoint = etcd.base[1].split("=", 1)[1]
    etcd("user", "add", "root:root-pw")
    etcd("auth", "enable")  # etcdctl adds the root role and grants it to root
    root = Etcdctl(endpoint, "root:root-pw")
    try:
        theirs = rbac_session.run_session(root, Etcdctl(endpoint, rbac_session.ALICE))
    finally:
        root("auth", "disable")
        etcd("user", "delete", "root")
        etcd("role", "delete", "root")
    for (who, args, _), mine, other in zip(rbac_session.SESSION, ours, theirs, strict=True):
        assert mine == other, f"as {who}: etcdctl {' '.join(args)}"


def test_the_credentials_users_are_not_managed_over_grpc(kraft: Etcdctl) -> None:
    for args in (("user", "delete", "admin"),
                 ("user", "passwd", "reader", "--interactive=false")):
        out = kraft(*args, stdin="new\n", check=False)
        assert "credentials file" in out and "invalid auth management" in out, out
    assert "cannot be disabled" in kraft("auth", "disable", check=False)
    assert "role name already exists" in kraft("role", "add", "writer", check=False)
    assert kraft("user", "get", "reader") == "User: reader\nRoles: reader\n"
    assert kraft("role", "get", "root") == ("Role root\nKV Read:\n\t[, <open ended> (prefix )\n"
                                            "KV Write:\n\t[, <open ended> (prefix )\n")


def _session_token(node: str, name: str, password: str) -> str:
    with grpc.insecure_channel(node) as channel:
        auth = Stub(channel, rpc_pb2.DESCRIPTOR.services_by_name["Auth"])
        return str(auth.Authenticate(rpc_pb2.AuthenticateRequest(name=name, password=password),
                                     timeout=10).token)


def test_the_http_api_agrees_with_an_etcd_users_roles(kraft: Etcdctl, quorum: KvQuorum) -> None:
    kraft("user", "add", "hana:hana-pw")
    kraft("role", "add", "ops")
    kraft("role", "grant-permission", "--prefix=true", "ops", "read", "ops/")
    kraft("user", "grant-role", "hana", "ops")
    kraft("put", "ops/a", "1")
    kraft("put", "secret", "2")
    token = _session_token(str(quorum.nodes[0]["etcd"]), "hana", "hana-pw")
    assert token.startswith("kst1.")
    basic = "Basic " + base64.b64encode(b"hana:hana-pw").decode()
    url = quorum.http_urls[1]  # another node than the one that issued the token
    with httpx.Client(timeout=10) as http:
        for auth in (f"Bearer {token}", basic):
            headers = {"Authorization": auth}
            ok = http.get(f"{url}/v1/kv/ops/a", headers=headers)
            assert ok.status_code == 200 and ok.json()["value"] == 1, ok.text
            listed = http.get(f"{url}/v1/kv", params={"prefix": "ops/"}, headers=headers)
            assert [kv["key"] for kv in listed.json()["kvs"]] == ["ops/a"]
            for refused in (http.get(f"{url}/v1/kv/secret", headers=headers),
                            http.get(f"{url}/v1/kv", params={"prefix": ""}, headers=headers),
                            http.post(f"{url}/v1/records", headers=headers,
                                      json={"records": [{"key": "ops/b", "value": 1}]})):
                assert refused.status_code == 403, refused.text
            assert "may not read 'secret'" in http.get(f"{url}/v1/kv/secret",
                                                       headers=headers).json()["error"]
        wrong = http.get(f"{url}/v1/kv/ops/a", headers={
            "Authorization": "Basic " + base64.b64encode(b"hana:nope").decode()})
        assert wrong.status_code == 401
        kraft("user", "passwd", "hana", "--interactive=false", stdin="hana-pw-2\n")
        stale = http.get(f"{url}/v1/kv/ops/a", headers={"Authorization": f"Bearer {token}"})
        assert stale.status_code == 401  # a new password voids the old session tokens
        renewed = {"Authorization": "Basic " + base64.b64encode(b"hana:hana-pw-2").decode()}
        assert http.get(f"{url}/v1/kv/ops/a", headers=renewed).status_code == 200
        kraft("user", "revoke-role", "hana", "ops")  # in force at once: after the read index
        assert http.get(f"{url}/v1/kv/ops/a", headers=renewed).status_code == 403
    assert "permission denied" in Etcdctl(str(quorum.nodes[2]["etcd"]), "hana:hana-pw-2")(
        "get", "secret", check=False)


def test_grpc_checks_every_key_a_call_touches(kraft: Etcdctl, quorum: KvQuorum) -> None:
    """Txn (compares, both branches, nested), Watch, Put and LeaseRevoke with a lease's keys,
    Lock, Compact: each judged on its keys as etcd's authApplierV3; users and roles changed
    through any node."""
    admin = kraft.base[-1].split("=", 1)[1]
    for node in quorum.nodes:  # every node appends auth operations, followers too
        Etcdctl(str(node["etcd"]), admin)("role", "add", f"r{node['node_id']}")
    kraft("user", "add", "kai:kai-pw")
    kraft("role", "grant-permission", "--prefix=true", f"r{quorum.nodes[0]['node_id']}",
          "readwrite", "k/")
    kraft("user", "grant-role", "kai", f"r{quorum.nodes[0]['node_id']}")
    node = str(quorum.nodes[2]["etcd"])
    token = _session_token(node, "kai", "kai-pw")
    meta = (("token", token),)
    with grpc.insecure_channel(node) as channel:
        services = rpc_pb2.DESCRIPTOR.services_by_name
        kv, watch, lease, maintenance = (Stub(channel, services[name]) for name in (
            "KV", "Watch", "Lease", "Maintenance"))
        lock = Stub(channel, v3lock_pb2.DESCRIPTOR.services_by_name["Lock"])

        def refused(call: Any, request: Any) -> str:
            with pytest.raises(grpc.RpcError) as caught:
                call(request, metadata=meta, timeout=10)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            return str(caught.value.details())

        put_k = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"k/1", value=b"v"))
        put_x = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"x", value=b"v"))
        inside = rpc_pb2.TxnRequest(success=[put_k])
        assert kv.Txn(inside, metadata=meta, timeout=10).succeeded
        nested = rpc_pb2.TxnRequest(success=[put_k], failure=[rpc_pb2.RequestOp(
            request_txn=rpc_pb2.TxnRequest(success=[put_x]))])
        assert refused(kv.Txn, nested) == "etcdserver: permission denied"
        compare = rpc_pb2.Compare(key=b"x", target=rpc_pb2.Compare.VERSION,
                                  result=rpc_pb2.Compare.EQUAL, version=0)
        refused(kv.Txn, rpc_pb2.TxnRequest(compare=[compare], success=[put_k]))
        refused(kv.Compact, rpc_pb2.CompactionRequest(revision=1))
        assert maintenance.Status(rpc_pb2.StatusRequest(), metadata=meta, timeout=10).version
        status = Stub(channel, services["Auth"]).AuthStatus(rpc_pb2.AuthStatusRequest(),
                                                            metadata=meta, timeout=10)
        assert status.enabled and status.authRevision >= 6  # every change so far, applied

        def first_watch_answer(key: bytes, range_end: bytes = b"") -> Any:
            create = rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
                key=key, range_end=range_end))
            stream = watch.Watch(iter([create]), metadata=meta, timeout=10)
            answer = next(stream)
            stream.cancel()
            return answer

        denied = first_watch_answer(b"x")
        assert denied.created and denied.canceled and denied.watch_id == -1
        assert denied.cancel_reason.endswith("desc = etcdserver: permission denied")
        allowed = first_watch_answer(b"k/", b"k0")
        assert allowed.created and not allowed.canceled

        granted = lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=60), metadata=meta,
                                   timeout=10).ID
        kraft("put", "x", "on-kai's-lease", f"--lease={granted:x}")
        refused(lease.LeaseRevoke, rpc_pb2.LeaseRevokeRequest(ID=granted))
        refused(kv.Put, rpc_pb2.PutRequest(key=b"k/2", value=b"v", lease=granted))
        refused(lock.Lock, v3lock_pb2.LockRequest(name=b"x/lock"))
        held = lock.Lock(v3lock_pb2.LockRequest(name=b"k/lock"), metadata=meta, timeout=10)
        assert held.key.startswith(b"k/lock/")
        lock.Unlock(v3lock_pb2.UnlockRequest(key=held.key), metadata=meta, timeout=10)
        kraft("user", "passwd", "kai", "--interactive=false", stdin="kai-pw-2\n")
        with pytest.raises(grpc.RpcError) as caught:  # clientv3 authenticates again on it
            kv.Range(rpc_pb2.RangeRequest(key=b"k/1"), metadata=meta, timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert caught.value.details() == "etcdserver: invalid auth token"


# ---- the etcd front beside --http-port's address (kraft_spark/etcd_front); after the RBAC
# session, which its node kill would disturb.


def test_the_front_forwards_unary_calls_and_streams(front: Etcdctl, kraft: Etcdctl) -> None:
    """Put/get (unary), a Watch stream from a past revision then live, and a LeaseKeepAlive
    stream, all through the front's one address; what it printed is what the nodes print."""
    assert front("put", "fr/k", "v") == "OK\n"
    assert front("get", "fr/k") == kraft("get", "fr/k") == "fr/k\nv\n"
    assert _watch_session(front) == ["PUT", "ww/a", "1", "DELETE", "ww/a", "", "PUT", "ww/b",
                                     "2"]
    lease = front("lease", "grant", "60").split()[1]
    assert front("lease", "keep-alive", "--once", lease) == f"lease {lease} keepalived with " \
                                                           "TTL(60)\n"
    assert f"lease {lease} granted with TTL(60s)" in kraft("lease", "timetolive", lease)
    assert "user name is empty" in Etcdctl(front.base[1].split("=", 1)[1])("get", "fr/k",
                                                                            check=False)


def test_the_front_fails_over_when_its_node_is_killed(front: Etcdctl, quorum: KvQuorum) -> None:
    """The front sends every call to its first node while it runs (node 0, as etcd's gRPC
    proxy keeps to one member); once that node is killed, the next calls go to another."""
    def answering_member() -> int:
        status = json.loads(front("endpoint", "status", "-w", "json"))
        return int(status[0]["Status"]["header"]["member_id"])

    names = {int(m["ID"]): m["name"]
             for m in json.loads(front("member", "list", "-w", "json"))["members"]}
    before = answering_member()
    assert names[before] == "node-0"
    os.kill(quorum.pid(0), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while quorum.alive(0):
        assert time.monotonic() < deadline, "node 0 did not die"
        time.sleep(0.05)
    try:
        assert front("put", "ff/k", "after-the-kill") == "OK\n"
        assert front("get", "ff/k") == "ff/k\nafter-the-kill\n"
        assert names[answering_member()] in ("node-1", "node-2")
    finally:
        quorum.restart_node(0)
