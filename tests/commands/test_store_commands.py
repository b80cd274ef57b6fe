"""The store's everyday commands (``kv get --from-key/--keys-only/--count-only``, ``kv del
--prefix``, ``kv put --lease``, ``lease timetolive/keep-alive``, ``elect``) as real processes
against one real ``kraft-spark local``, and, where the flag is etcdctl's, beside Debian's
etcdctl 3.4 run against the same nodes (their etcd API serves the same state): both must print
the same lines."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope
from tests.integration.harness import running, store_ready
from tests.lincheck.nemesis import KvQuorum
from tests.net.helpers import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

needs_etcdctl = pytest.mark.skipif(shutil.which("etcdctl") is None,
                                   reason="etcdctl is not installed (Debian's etcd-client)")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvQuorum]:
    with running(KvQuorum(tmp_path_factory.mktemp("store-commands"))) as q:
        store_ready(q)
        yield q


def _env(quorum: KvQuorum) -> dict[str, str]:
    return {**os.environ, "KRAFT_SPARK_HTTP": ",".join(quorum.http_urls),
            "KRAFT_SPARK_HTTP_TOKEN": quorum.token or "", "ETCDCTL_API": "3"}


def kraft(quorum: KvQuorum, *args: str, code: int = 0) -> str:
    """``kraft-spark args`` (its endpoints and token from the environment): its stdout, or its
    stderr when it is to fail with ``code``."""
    done = subprocess.run([sys.executable, "-m", "kraft_spark", *args], env=_env(quorum),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == code, f"kraft-spark {' '.join(args)}: {done.stderr}"
    return done.stdout if code == 0 else done.stderr


def etcdctl(quorum: KvQuorum, *args: str) -> str:
    credentials = Credentials.load(str(quorum.data_dir / CREDENTIALS_FILE))
    admin = next(c for c in credentials.entries if c.scope == Scope.ADMIN)
    endpoints = ",".join(str(n["etcd"]) for n in quorum.nodes)
    done = subprocess.run(["etcdctl", f"--endpoints={endpoints}", "--command-timeout=10s",
                           f"--user={admin.name or admin.scope.label}:{admin.token}", *args],
                          env=_env(quorum), capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
    return done.stdout


@needs_etcdctl
def test_get_prints_what_etcdctl_prints(quorum: KvQuorum) -> None:
    for key in ("g/a", "g/b", "g/c", "h"):
        kraft(quorum, "kv", "put", key, "1")
    for flags in (["g/", "--prefix", "--keys-only"], ["g/b", "--from-key", "--keys-only"],
                  ["g/", "--prefix", "--limit", "2"], ["g/b", "--from-key"],
                  ["g/", "--prefix", "--print-value-only"], ["g/a"], ["missing"]):
        assert kraft(quorum, "kv", "get", *flags) == etcdctl(quorum, "get", *flags), flags
    assert kraft(quorum, "kv", "get", "g/b", "--from-key", "--keys-only") == \
        "g/b\n\ng/c\n\nh\n\n"
    # etcdctl 3.4 has no --count-only (3.5's prints the count with -w fields/json only)
    assert kraft(quorum, "kv", "get", "g/", "--prefix", "--count-only") == "3\n"
    everything = json.loads(etcdctl(quorum, "get", "", "--from-key", "--keys-only", "-w",
                                    "json"))
    assert json.loads(kraft(quorum, "kv", "get", "", "--from-key", "--count-only",
                            "-w", "json")) == {"count": everything["count"]}
    assert json.loads(kraft(quorum, "kv", "get", "g/", "--prefix", "--keys-only", "-w",
                            "json").splitlines()[0])["key"] == "g/a"


@needs_etcdctl
def test_del_prefix_prints_the_count_as_etcdctl_does(quorum: KvQuorum) -> None:
    def fill() -> None:
        for key in ("d/1", "d/2", "d/3", "d"):
            kraft(quorum, "kv", "put", key, '"x"')

    fill()
    assert kraft(quorum, "kv", "del", "d/", "--prefix") == "3\n"
    assert kraft(quorum, "kv", "get", "d", "--print-value-only") == "x\n"  # not under d/
    assert kraft(quorum, "kv", "del", "d/", "--prefix") == "0\n"
    fill()
    assert etcdctl(quorum, "del", "d/", "--prefix") == "3\n"
    assert etcdctl(quorum, "del", "d/", "--prefix") == "0\n"
    fill()
    assert json.loads(kraft(quorum, "kv", "delete", "d/", "--prefix", "-w", "json")) == {
        "deleted": 3}
    err = kraft(quorum, "kv", "del", "d/", "--prefix", "--if-version", "1", code=2)
    assert "--prefix takes no --if-version" in err


def test_put_null_is_refused_and_deleting_is_del(quorum: KvQuorum) -> None:
    kraft(quorum, "kv", "put", "n", "1")
    err = kraft(quorum, "kv", "put", "n", "null", code=2)
    assert "null deletes a key" in err and "kv del" in err
    assert kraft(quorum, "kv", "get", "n", "--print-value-only") == "1\n"  # untouched
    kraft(quorum, "kv", "put", "n", '"null"')  # the string is a value like any other
    assert kraft(quorum, "kv", "get", "n", "-w", "json").count('"value": "null"') == 1
    assert kraft(quorum, "kv", "del", "n").startswith("OK (offset ")
    assert kraft(quorum, "kv", "get", "n") == ""


def test_a_key_put_on_a_lease_goes_with_it(quorum: KvQuorum) -> None:
    granted = kraft(quorum, "lease", "grant", "60000")
    lease = re.fullmatch(r"lease (\d+) granted with TTL 60000 ms\n", granted)
    assert lease is not None, granted
    lease_id = lease.group(1)
    assert kraft(quorum, "kv", "put", "l/k", "1", "--lease", lease_id).startswith("OK")
    shown = kraft(quorum, "lease", "timetolive", lease_id, "--keys")
    left = re.fullmatch(rf"lease {lease_id} granted with TTL 60000 ms, remaining (\d+) ms, "
                        r"attached keys\(\['l/k'\]\)\n", shown)
    assert left is not None and 0 < int(left.group(1)) <= 60000, shown  # the leader's countdown
    assert kraft(quorum, "lease", "keep-alive", lease_id, "--once") == \
        f"lease {lease_id} kept alive with TTL 60000 ms\n"
    listed = json.loads(kraft(quorum, "lease", "timetolive", lease_id, "--keys", "-w", "json"))
    assert listed["keys"] == ["l/k"] and listed["ttl_ms"] == 60000
    assert 0 < listed["remaining_ms"] <= 60000
    assert kraft(quorum, "lease", "revoke", lease_id) == f"lease {lease_id} revoked\n"
    assert kraft(quorum, "kv", "get", "l/k") == ""
    assert kraft(quorum, "lease", "timetolive", lease_id) == \
        f"lease {lease_id} already expired\n"  # etcdctl's words
    err = kraft(quorum, "kv", "put", "l/k", "1", "--lease", lease_id, code=1)
    assert "HTTP 4" in err and lease_id in err, err


def _line(proc: subprocess.Popen[str], timeout_s: float = 30.0) -> str:
    """The next line ``proc`` prints (fails after ``timeout_s``)."""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            return line.rstrip("\n")
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no line from {proc.args} (exit {proc.poll()})")


def test_elect_campaigns_holds_and_hands_over(quorum: KvQuorum) -> None:
    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "kraft_spark", "elect", *args],
                                env=_env(quorum), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)

    listener = start("e", "--listen")
    first = start("e", "one")
    second = None
    try:
        first_key = _line(first)
        assert first_key.startswith("e/") and _line(first) == "one"
        assert (_line(listener), _line(listener)) == (first_key, "one")
        second = start("e", '{"n": 2}')
        time.sleep(1.0)  # it waits behind the leader: nothing printed
        assert second.poll() is None
        first.send_signal(signal.SIGINT)  # resigns: its key is deleted, the next one leads
        assert first.wait(30) == 0
        second_key = _line(second)
        assert second_key != first_key and _line(second) == '{"n":2}'
        assert (_line(listener), _line(listener)) == (second_key, '{"n":2}')
    finally:
        for proc in (first, second, listener):
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()
    err = kraft(quorum, "elect", "e", code=2)
    assert "give a PROPOSAL to campaign, or --listen" in err


def _offset(written: str) -> int:
    found = re.fullmatch(r"OK \(offset (\d+), epoch \d+\)\n", written)
    assert found is not None, written
    return int(found.group(1))


@needs_etcdctl
def test_get_rev_reads_the_past_as_etcdctl_does(quorum: KvQuorum) -> None:
    first = _offset(kraft(quorum, "kv", "put", "r/a", "1"))
    kraft(quorum, "kv", "put", "r/b", '[3]')  # a number, a list: JSON etcdctl prints alike
    second = _offset(kraft(quorum, "kv", "put", "r/a", "2"))
    kraft(quorum, "kv", "del", "r/a")
    for flags in (["r/a", "--rev", str(first)], ["r/", "--prefix", "--rev", str(first)],
                  ["r/", "--prefix", "--rev", str(second)], ["r/a"],
                  ["r/", "--from-key", "--keys-only", "--rev", str(second)]):
        assert kraft(quorum, "kv", "get", *flags) == etcdctl(quorum, "get", *flags), flags
    assert kraft(quorum, "kv", "get", "r/a", "--rev", str(second)) == "r/a\n2\n"
    err = kraft(quorum, "kv", "get", "r/a", "--rev", "100000000", code=1)
    assert "HTTP 422: revision 100000000 is a future revision" in err, err


def test_watch_prev_kv_prints_each_keys_previous_value(quorum: KvQuorum) -> None:
    first = _offset(kraft(quorum, "kv", "put", "w/a", "1"))
    kraft(quorum, "kv", "put", "w/a", "2")
    kraft(quorum, "kv", "del", "w/a")
    kraft(quorum, "kv", "put", "w/b", "3")
    watch = subprocess.Popen(
        [sys.executable, "-m", "kraft_spark", "kv", "watch", "w/", "--prefix", "--prev-kv",
         "--from-offset", str(first), "-w", "json"],
        env=_env(quorum), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        events = [json.loads(_line(watch)) for _ in range(4)]
    finally:
        watch.terminate()
        watch.wait(30)
        assert watch.stdout is not None
        watch.stdout.close()
    assert [(e["type"], e["key"], e["value"], e["prev"] and e["prev"]["value"])
            for e in events] == [("put", "w/a", 1, None), ("put", "w/a", 2, 1),
                                 ("delete", "w/a", None, 2), ("put", "w/b", 3, None)]
    assert events[1]["prev"]["mod_offset"] == first


def test_a_dead_endpoint_first_is_passed_over(quorum: KvQuorum) -> None:
    """``store_http`` moves on as ``KvClient`` does: a refused connection sent nothing, so a
    read and a write alike go on to the next endpoint; with none left the command says which
    address it could not reach."""
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    endpoints = ",".join([dead, *quorum.http_urls])
    assert kraft(quorum, "kv", "put", "f/a", "1", "--endpoint", endpoints).startswith("OK")
    assert kraft(quorum, "kv", "get", "f/a", "--endpoint", endpoints) == "f/a\n1\n"
    assert kraft(quorum, "lease", "grant", "5000", "--endpoint", endpoints).startswith("lease ")
    err = kraft(quorum, "kv", "get", "f/a", "--endpoint", dead, code=1)
    assert f"cannot reach {dead}" in err and "Connection refused" in err, err
