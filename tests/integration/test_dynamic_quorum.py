"""KIP-853 with real processes: a 3-voter ``kraft-spark local`` grows to 5 voters, shrinks back
and replaces a dead voter, through ``kraft-spark metadata-quorum``, while a client appends;
no acknowledged append is lost."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import (
    LoadGenerator,
    LocalQuorum,
    Observer,
    check_acknowledged,
    running,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def observers() -> Iterator[list[Observer]]:
    started: list[Observer] = []
    yield started
    for obs in started:
        obs.stop()


def quorum_cli(bootstrap: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft_spark", "metadata-quorum", "--bootstrap-controller",
         ",".join(bootstrap), "--timeout", "20", *args],
        capture_output=True, text=True, timeout=60, check=False)


def until_ok(bootstrap: list[str], *args: str, timeout_s: float = 40.0) -> str:
    """Run a change until the leader takes it (it refuses an observer that has not caught up
    yet, or a change while the previous one commits, with REQUEST_TIMED_OUT)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = quorum_cli(bootstrap, *args)
        if done.returncode == 0:
            return done.stdout
        assert "REQUEST_TIMED_OUT" in done.stderr, done.stderr
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.3)


def listening(endpoint: str) -> bool:
    """Something accepts connections at ``host:port`` (a node that lost the race for its
    free port at start-up does not)."""
    host, port = endpoint.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def status(bootstrap: list[str]) -> dict[str, object]:
    done = quorum_cli(bootstrap, "describe", "--status", "--json")
    assert done.returncode == 0, done.stderr
    summary: dict[str, object] = json.loads(done.stdout)
    return summary


def voter_ids(bootstrap: list[str]) -> list[int]:
    return [int(v["id"]) for v in status(bootstrap)["currentVoters"]]  # type: ignore[attr-defined]


def test_grow_to_five_shrink_to_three_and_replace_a_dead_voter_under_load(
    tmp_path: Path, observers: list[Observer]
) -> None:
    quorum = LocalQuorum(tmp_path / "data")
    with running(quorum):
        boot = quorum.bootstrap
        load = LoadGenerator(quorum).start()
        try:
            load.wait_for_acks(20, 30)
            observers += [Observer(quorum, 3), Observer(quorum, 4)]
            # Grow 3 -> 5 with Kafka's add-controller, one voter at a time.
            for obs in observers:
                out = until_ok(boot, "--command-config", str(obs.config), "add-controller")
                assert out.startswith(f"Added controller {obs.node_id} with directory id ")
                assert f"CONTROLLER://{obs.endpoint}" in out
            summary = status(boot)
            voters = summary["currentVoters"]
            assert [v["id"] for v in voters] == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
            assert all(v["directoryId"] and v["endpoints"] for v in voters)  # type: ignore[attr-defined]
            acked = len(load.acked)
            load.wait_for_acks(acked + 20, 30)  # commits need 3 of 5 now
            # Shrink 5 -> 3 with the reassignment (single-member changes toward the target).
            done = quorum_cli(boot, "reassign", "--voters", "0,1,2")
            assert done.returncode == 0, done.stderr
            assert "removed voter 3" in done.stdout and "removed voter 4" in done.stdout
            assert voter_ids(boot) == [0, 1, 2]
            # Replace a dead voter: kill node 2, remove it, add a fresh node 5 in its place.
            victim = 2
            os.kill(quorum.pid(victim), signal.SIGKILL)
            directory = next(v["directoryId"] for v in status(boot)["currentVoters"]  # type: ignore[attr-defined]
                             if v["id"] == victim)
            out = until_ok(boot, "remove-controller", "--controller-id", str(victim),
                           "--controller-directory-id", str(directory))
            assert out.startswith(f"Removed  KRaft controller {victim}")
            fresh = Observer(quorum, 5)
            observers.append(fresh)
            until_ok(boot, "--command-config", str(fresh.config), "add-controller")
            assert voter_ids(boot) == [0, 1, 5]
            acked = len(load.acked)
            load.wait_for_acks(acked + 20, 30)
        finally:
            load.stop()
        assert not [e for e in load.errors if "refused" in e], load.errors
        with quorum.client() as client:
            deadline = time.monotonic() + 20
            while True:
                info = client.describe_quorum()
                ends = {v.replica_id: v.log_end_offset for v in info.voters}
                if sorted(ends) == [0, 1, 5] and min(ends.values()) >= info.high_watermark:
                    break
                assert time.monotonic() < deadline, info
                time.sleep(0.1)
        check_acknowledged(load.acked, [quorum.log_dir(0), quorum.log_dir(1), fresh.log_dir],
                           info.high_watermark)


def test_a_node_given_only_bootstrap_servers_finds_the_quorum_and_is_added(
    tmp_path: Path,
) -> None:
    """controller.quorum.bootstrap.servers (KIP-853): no voter list, one address of the
    quorum; the node discovers the voters, follows as an observer and becomes a voter."""
    quorum = LocalQuorum(tmp_path / "data")
    with running(quorum):
        boot = quorum.bootstrap
        newcomer = Observer(quorum, 3, bootstrap=True)
        try:
            assert "controller.quorum.voters" not in newcomer.config.read_text()
            # Through one follower only: the client finds the leader itself (AddRaftVoter's
            # answers name none; it asks DescribeQuorum first).
            leader = int(status(boot)["leaderId"])  # type: ignore[call-overload]
            follower = next(b for i, b in enumerate(boot) if i != leader and listening(b))
            until_ok([follower], "--command-config", str(newcomer.config), "add-controller")
            assert voter_ids(boot) == [0, 1, 2, 3]
            load = LoadGenerator(quorum).start()  # four voters commit (three needed)
            load.wait_for_acks(20, timeout_s=20)
            load.stop()
            # Back on another port, it corrects its VotersRecord entry (UpdateRaftVoter).
            newcomer.restart_on_a_new_port()
            deadline = time.monotonic() + 30
            while True:
                listed = {v["id"]: v.get("endpoints") for v in status(boot)["currentVoters"]}  # type: ignore[attr-defined]
                if listed[3] == [f"CONTROLLER://{newcomer.endpoint}"]:
                    break
                assert time.monotonic() < deadline, listed
                time.sleep(0.3)
        finally:
            newcomer.stop()
        log_text = (quorum.data_dir / "logs" / "node-3.log").read_text()
        assert "has voters" in log_text, log_text[-2000:]
