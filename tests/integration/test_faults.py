"""Real-process fault tests against ``kraft-spark local`` (and hand-started nodes behind a
cuttable proxy), under a steady append load that records every acknowledgement."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kraft_spark.client import ClientError, NewRecord, QuorumClient
from kraft_spark.log.meta import format_log_dir

from .harness import (
    FAST_SETTINGS,
    FETCH_TIMEOUT_S,
    CuttableProxy,
    LoadGenerator,
    LocalQuorum,
    check_acknowledged,
    free_ports,
    leader_and_epoch,
    leader_id,
    leaders_by_epoch,
    read_voter_log,
    running,
    wait_replicated,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _report(name: str, seconds: float) -> None:
    print(f"\n[figure] {name}: {seconds * 1000:.0f} ms")


def test_kill_leader_then_restart_it(tmp_path: Path) -> None:
    with running(LocalQuorum(tmp_path)) as quorum:
        load = LoadGenerator(quorum).start()
        try:
            load.wait_for_acks(100, 20)
            client = quorum.client()
            old, epoch = leader_and_epoch(client)
            killed_at = time.monotonic()
            os.kill(quorum.pid(old), signal.SIGKILL)
            # 1. A new leader commits within the election bounds (fetch timeout + election).
            recovered = load.first_ack_after(killed_at, epoch, 15)
            _report("kill -9 leader -> next commit", recovered - killed_at)
            assert leader_id(client) != old
            load.wait_for_acks(len(load.acked) + 50, 20)
            # 3. The killed node restarts, catches up and rejoins.
            quorum.restart_node(old)
            load.wait_for_acks(len(load.acked) + 50, 20)
        finally:
            load.stop()
        hw = wait_replicated(client, 3)
        client.close()
        check_acknowledged(load.acked, [quorum.log_dir(i) for i in range(3)], hw)


def test_kill_leader_with_default_timeouts_elects_without_the_fetch_timeout(
    tmp_path: Path,
) -> None:
    """Kafka's default timings (fetch timeout 2 s, election timeout 1 s). The killed leader's
    port refuses connections, so the followers campaign after a short random delay instead of
    the whole fetch timeout; the figure is printed, the bound asserted is generous."""
    with running(LocalQuorum(tmp_path, settings={})) as quorum:
        load = LoadGenerator(quorum).start()
        try:
            load.wait_for_acks(100, 30)
            client = quorum.client()
            old, epoch = leader_and_epoch(client)
            killed_at = time.monotonic()
            os.kill(quorum.pid(old), signal.SIGKILL)
            recovered = load.first_ack_after(killed_at, epoch, 10)
            _report("kill -9 leader (default timeouts) -> next commit", recovered - killed_at)
            assert leader_id(client) != old
            load.wait_for_acks(len(load.acked) + 50, 20)
        finally:
            load.stop()
        survivors = [i for i in range(3) if i != old]
        deadline = time.monotonic() + 20
        while True:  # both survivors hold the high watermark (the dead voter cannot)
            info = client.describe_quorum()
            ends = {v.replica_id: v.log_end_offset for v in info.voters}
            if all(ends.get(i, -1) >= info.high_watermark for i in survivors):
                hw = info.high_watermark
                break
            assert time.monotonic() < deadline, f"survivors did not catch up: {info}"
            time.sleep(0.1)
        client.close()
        check_acknowledged(load.acked, [quorum.log_dir(i) for i in survivors], hw)
        # The followers heard the refusal (not only their fetch timeout) and said so.
        logs = "".join((tmp_path / "logs" / f"node-{i}.log").read_text() for i in survivors)
        assert f"leader {old} refused a connection: campaigning in" in logs


def test_sigstop_leader_resigns_and_nothing_is_lost(tmp_path: Path) -> None:
    with running(LocalQuorum(tmp_path)) as quorum:
        load = LoadGenerator(quorum).start()
        client = quorum.client()
        try:
            load.wait_for_acks(100, 20)
            old = leader_id(client)
            os.kill(quorum.pid(old), signal.SIGSTOP)
            time.sleep(3 * FETCH_TIMEOUT_S)
            os.kill(quorum.pid(old), signal.SIGCONT)
            load.wait_for_acks(len(load.acked) + 100, 20)
            assert leader_id(client) != old
        finally:
            load.stop()
        hw = wait_replicated(client, 3)
        client.close()
        log_dirs = [quorum.log_dir(i) for i in range(3)]
        check_acknowledged(load.acked, log_dirs, hw)  # also: one leader per epoch
        assert len(leaders_by_epoch(read_voter_log(log_dirs[0]))) >= 2


def test_graceful_stop_of_the_leader_hands_over(tmp_path: Path) -> None:
    with running(LocalQuorum(tmp_path)) as quorum:
        load = LoadGenerator(quorum).start()
        client = quorum.client()
        try:
            load.wait_for_acks(100, 20)
            old, epoch = leader_and_epoch(client)
            stopped_at = time.monotonic()
            os.kill(quorum.pid(old), signal.SIGTERM)
            recovered = load.first_ack_after(stopped_at, epoch, 10)
            _report("graceful leader stop -> next commit", recovered - stopped_at)
            # Well inside the fetch timeout: the handover did not wait for a timeout.
            assert recovered - stopped_at < FETCH_TIMEOUT_S
            load.wait_for_acks(len(load.acked) + 50, 20)
        finally:
            load.stop()
        info = client.describe_quorum()
        client.close()
        alive = [i for i in range(3) if i != old]
        check_acknowledged(load.acked, [quorum.log_dir(i) for i in alive], info.high_watermark)


def _raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), 2) as s:
        s.sendall(data)
        s.settimeout(2)
        try:
            return s.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return b"(timeout)"


def test_bad_bytes_do_not_stop_the_quorum(tmp_path: Path) -> None:
    with running(LocalQuorum(tmp_path)) as quorum:
        load = LoadGenerator(quorum).start()
        try:
            load.wait_for_acks(50, 20)
            for node in range(3):
                port = int(quorum.bootstrap[node].rsplit(":", 1)[1])
                assert _raw_exchange(port, b"\x7f\xff\xff\xff" + b"z" * 64) == b""  # too big
                assert _raw_exchange(port, b"\x00\x00\x00\x06" + b"\x00\x01\x00\x0c\x00\x00")\
                    == b""  # malformed Fetch
                assert _raw_exchange(port, os.urandom(512)) in (b"", b"(timeout)")
            before = len(load.acked)
            load.wait_for_acks(before + 100, 20)
            for node in range(3):
                os.kill(quorum.pid(node), 0)  # every node still alive
        finally:
            load.stop()
        assert not any("unknown" in e for e in load.errors)


def test_cut_one_voter_off_and_heal(tmp_path: Path) -> None:
    """Node 2 reaches the others, and they reach it, only through proxies we can cut."""
    real = free_ports(3)
    proxied = free_ports(3)  # proxied[i] forwards to real[i]
    proxies = [CuttableProxy(proxied[i], real[i]) for i in range(3)]
    procs = []
    try:
        for node in range(3):
            if node == 2:
                voters = {0: proxied[0], 1: proxied[1], 2: real[2]}
            else:
                voters = {0: real[0], 1: real[1], 2: proxied[2]}
            log_dir = tmp_path / f"node-{node}"
            format_log_dir(str(log_dir), cluster_id="proxy-test", node_id=node)
            conf = tmp_path / f"node-{node}.properties"
            conf.write_text(
                f"node.id={node}\nlog.dirs={log_dir}\nlisteners=127.0.0.1:{real[node]}\n"
                "controller.quorum.voters="
                + ",".join(f"{i}@127.0.0.1:{p}" for i, p in voters.items()) + "\n"
                + "".join(f"{k}={v}\n" for k, v in FAST_SETTINGS.items())
            )
            out = open(tmp_path / f"node-{node}.log", "wb")  # noqa: SIM115
            procs.append(subprocess.Popen([sys.executable, "-m", "kraft_spark", "node",
                                           "--config", str(conf)], stdout=out,
                                          stderr=subprocess.STDOUT))
            out.close()
        bootstrap = [f"127.0.0.1:{real[i]}" for i in range(3)]
        load = LoadGenerator(bootstrap).start()
        client = QuorumClient(bootstrap)
        try:
            load.wait_for_acks(100, 30)
            for p in proxies:
                p.set_cut(True)  # node 2 is alone now (both directions); 0 <-> 1 is direct
            time.sleep(3 * FETCH_TIMEOUT_S)
            # The majority side keeps committing (possibly after an election).
            load.wait_for_acks(len(load.acked) + 100, 20)
            for p in proxies:
                p.set_cut(False)
            # Healed: node 2 catches up; a leader it may have disturbed is re-elected.
            load.wait_for_acks(len(load.acked) + 100, 20)
        finally:
            load.stop()
        hw = wait_replicated(client, 3)
        client.close()
        check_acknowledged(load.acked, [tmp_path / f"node-{i}" for i in range(3)], hw)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for p in proxies:
            p.close()


def _cpus_of(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of ``pid`` (one set when the process is placed as a whole)."""
    sets = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            sets.add(frozenset(os.sched_getaffinity(int(tid))))
        except ProcessLookupError:  # a thread that just exited
            continue
    return sets


def _wait_placed(pid: int, cpus: frozenset[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _cpus_of(pid) != {cpus}:
        assert time.monotonic() < deadline, f"pid {pid} on {_cpus_of(pid)}, expected {set(cpus)}"
        time.sleep(0.05)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="role placement needs at least two CPUs")
def test_cpu_placement_follows_leadership(tmp_path: Path) -> None:
    """``kraft-spark local`` runs its voters with kraft.cpu.affinity=role: the leader on the
    lower half of the CPUs, the others on the upper half, and a new leader moves over."""
    cpus = sorted(os.sched_getaffinity(0))
    half = (len(cpus) + 1) // 2
    leading, others = frozenset(cpus[:half]), frozenset(cpus[half:])
    with running(LocalQuorum(tmp_path)) as quorum:
        client = quorum.client()
        try:
            client.append([NewRecord(b"k", b"v")])
            old, epoch = leader_and_epoch(client)
            _wait_placed(quorum.pid(old), leading, 5)
            for node in range(3):
                if node != old:
                    _wait_placed(quorum.pid(node), others, 5)
            os.kill(quorum.pid(old), signal.SIGTERM)
            deadline = time.monotonic() + 10
            while True:
                try:
                    new, new_epoch = leader_and_epoch(client)
                    if new != old and new_epoch > epoch:
                        break
                except ClientError:  # no leader known during the handoff
                    pass
                assert time.monotonic() < deadline, "no new leader after the graceful stop"
                time.sleep(0.05)
            _wait_placed(quorum.pid(new), leading, 5)
        finally:
            client.close()
