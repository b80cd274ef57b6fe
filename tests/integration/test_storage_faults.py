"""Storage faults on real processes (issue 25): a follower whose disk fills up stops with one
clear line and exit code 74, `kraft-spark local` restarts it with backoff (never a spin), the
quorum stays available and nothing acknowledged is lost, and once the disk has room again the
node catches up by itself (the disk is a tmpfs the test mounts: root only, skipped with the
reason otherwise). A flipped byte in a sealed segment is cut away and fetched again."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft_spark.client import NewRecord, QuorumClient
from tests.integration.harness import (
    LocalQuorum,
    check_acknowledged,
    running,
    wait_replicated,
)
from tests.metrics_text import samples

pytestmark = pytest.mark.timeout(180)


def _tmpfs_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount are not installed"
    return None


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[None]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=30)


def append_batches(client: QuorumClient, acked: dict[bytes, int], start: int, count: int, *,
                   records: int = 100, value: bytes = b"x" * 1000) -> None:
    """Batches ``start`` .. ``start + count - 1`` of ``records`` unique keys each; every
    acknowledged key goes into ``acked`` with its offset."""
    for i in range(start, start + count):
        keys = [f"k{i}-{j}".encode() for j in range(records)]
        result = client.append([NewRecord(k, value) for k in keys], timeout_s=30)
        acked.update({k: result.base_offset + n for n, k in enumerate(keys)})


def flip_byte(path: Path, position: int) -> None:
    """Bit rot: invert one byte of a file in place."""
    with open(path, "r+b") as fh:
        fh.seek(position)
        byte = fh.read(1)
        fh.seek(position)
        fh.write(bytes([byte[0] ^ 0xFF]))


def wait_for_log(path: Path, text: str, timeout_s: float) -> str:
    """The node log at ``path`` once it contains ``text`` (its end in the failure)."""
    deadline = time.monotonic() + timeout_s
    log = path.read_text()
    while text not in log:
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.2)
        log = path.read_text()
    return log


def test_a_full_disk_on_a_follower_is_survived_and_healed(tmp_path: Path) -> None:
    reason = _tmpfs_unavailable()
    if reason is not None:
        pytest.skip(reason)
    follower_dir = tmp_path / "node-2"  # where `local` puts voter 2's log
    quorum = LocalQuorum(tmp_path, http=True)
    quorum.settings["metadata.log.segment.bytes"] = str(1024 * 1024)
    with small_disk(follower_dir, "6m"), running(quorum):
        client = quorum.client(retry_budget_s=30.0)
        acked: dict[bytes, int] = {}
        try:
            # ~12 MB of records: twice what node 2's disk holds.
            append_batches(client, acked, 0, 120)
            # The quorum stayed available; node 2 stopped with one clear line, exit 74.
            log = wait_for_log(tmp_path / "logs" / "node-2.log", "No space left on device", 20)
            assert "log directory failure" in log and "ENOSPC" in log
            assert log.count("Traceback") == 0  # one line per failure, not a traceback loop
            # Counted where an operator scrapes: the sidecar of `local`.
            deadline = time.monotonic() + 10
            while True:
                scrape = urllib.request.Request(f"{quorum.http_url}/metrics", headers=quorum.auth)
                with urllib.request.urlopen(scrape, timeout=10) as reply:
                    counted = samples(reply.read().decode()).get(
                        'kraft_spark_log_dir_failures_total{node_id="2"}', 0)
                if counted >= 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert counted >= 1
            info = client.describe_quorum()
            lagging = {v.replica_id: v.log_end_offset for v in info.voters}
            assert lagging[2] < info.high_watermark, lagging
            # Room again: the supervisor's next restart catches up without a manual step.
            subprocess.run(["mount", "-o", "remount,size=300m", str(follower_dir)], check=True,
                           timeout=30)
            hw = wait_replicated(client, 3, timeout_s=60)
        finally:
            client.close()
        check_acknowledged(acked, [quorum.log_dir(i) for i in range(3)], hw)


def test_a_flipped_byte_in_a_sealed_segment_is_cut_away_and_fetched_again(
    tmp_path: Path,
) -> None:
    """The damage sits in a sealed segment whose index checks out, so recovery does not see
    it; the start-up's replay does. The node sets the segment aside, cuts its log at the
    damaged batch, starts, fetches the rest from the leader and votes again once caught up."""
    quorum = LocalQuorum(tmp_path)
    quorum.settings["metadata.log.segment.bytes"] = str(256 * 1024)
    with running(quorum):
        client = quorum.client(retry_budget_s=30.0)
        acked: dict[bytes, int] = {}

        try:
            append_batches(client, acked, 0, 30)
            leader = client.describe_quorum().leader_id
            victim = next(i for i in range(3) if i != leader)
            wait_replicated(client, 3)
            os.kill(quorum.pid(victim), 9)
            partition = quorum.log_dir(victim) / "__cluster_metadata-0"
            sealed = sorted(partition.glob("*.log"))[1]
            flip_byte(sealed, 5000)  # one byte inside the first batch's records
            append_batches(client, acked, 30, 10)  # the quorum carries on with two voters
            quorum.restart_node(victim)
            log_path = tmp_path / "logs" / f"node-{victim}.log"
            wait_for_log(log_path, "is cut at offset", 30)
            # Commits made without it let it vote again (the disk-loss rule).
            append_batches(client, acked, 40, 10)
            wait_for_log(log_path, "caught up after disk loss: voting again", 30)
            hw = wait_replicated(client, 3, timeout_s=30)
        finally:
            client.close()
        [aside] = partition.glob("*.corrupt-*")  # the damaged segment, kept for inspection
        assert aside.name.startswith(f"{sealed.name}.corrupt-")
        check_acknowledged(acked, [quorum.log_dir(i) for i in range(3)], hw)


def test_the_scrub_finds_bit_rot_on_a_running_follower_which_heals_itself(
    tmp_path: Path,
) -> None:
    """Nobody reads the damaged batch; the background scrub does, the node stops (exit 74),
    `kraft-spark local` restarts it, the start-up cuts the log there and the node catches up."""
    quorum = LocalQuorum(tmp_path)
    quorum.settings["metadata.log.segment.bytes"] = str(256 * 1024)
    quorum.settings["kraft.log.scrub.bytes.per.second"] = str(20 * 1024 * 1024)
    with running(quorum):
        client = quorum.client(retry_budget_s=30.0)
        acked: dict[bytes, int] = {}

        try:
            append_batches(client, acked, 0, 30)
            leader = client.describe_quorum().leader_id
            victim = next(i for i in range(3) if i != leader)
            partition = quorum.log_dir(victim) / "__cluster_metadata-0"
            sealed = sorted(partition.glob("*.log"))[1]
            flip_byte(sealed, 5000)  # bit rot under a running node
            log_path = tmp_path / "logs" / f"node-{victim}.log"
            text = wait_for_log(log_path, "is cut at offset", 60)
            assert "log scrub:" in text and "CRC mismatch" in text
            # Commits made without it let it vote again (the disk-loss rule).
            append_batches(client, acked, 30, 10)
            wait_for_log(log_path, "caught up after disk loss: voting again", 30)
            hw = wait_replicated(client, 3, timeout_s=30)
        finally:
            client.close()
        check_acknowledged(acked, [quorum.log_dir(i) for i in range(3)], hw)


def test_a_node_that_cannot_start_does_not_stop_the_others(tmp_path: Path) -> None:
    """A damaged quorum-state is a refusal naming the file (exit 1, not restarted): `local`
    reports it and runs the other two, which elect a leader and commit."""
    first = LocalQuorum(tmp_path)
    # Formats the directories; the election writes each quorum-state.
    with running(first), first.client(retry_budget_s=30.0) as client:
        wait_replicated(client, 3)
    state = tmp_path / "node-2" / "__cluster_metadata-0" / "quorum-state"
    assert state.exists()
    state.write_text("{ not json")
    quorum = LocalQuorum(tmp_path)
    with running(quorum):
        assert "error" in quorum.nodes[2] and "error" not in quorum.nodes[0]
        log = (tmp_path / "logs" / "node-2.log").read_text()
        assert "quorum-state: not valid JSON" in log and "node.disk.lost=true" in log  # the fix
        client = quorum.client(quorum.bootstrap[:2], retry_budget_s=30.0)
        try:
            result = client.append([NewRecord(b"k", b"v")], timeout_s=30)
            assert result.base_offset > 0
        finally:
            client.close()


def test_a_read_only_log_directory_is_survived_and_healed(tmp_path: Path) -> None:
    """EROFS: the follower's log directory is read-only when the quorum starts (its tmpfs
    remounted read-only while stopped): node 2 exits 74 at start-up (a disk failure, not a
    refusal), `local` runs the two others and restarts it with backoff, and once the directory
    is writable again it starts and catches up."""
    reason = _tmpfs_unavailable()
    if reason is not None:
        pytest.skip(reason)
    follower_dir = tmp_path / "node-2"
    with small_disk(follower_dir, "64m"):
        first = LocalQuorum(tmp_path)
        with running(first), first.client(retry_budget_s=30.0) as client:
            wait_replicated(client, 3)
        subprocess.run(["mount", "-o", "remount,ro", str(follower_dir)], check=True, timeout=30)
        quorum = LocalQuorum(tmp_path)
        with running(quorum):
            client = quorum.client(quorum.bootstrap[:2], retry_budget_s=30.0)
            acked: dict[bytes, int] = {}
            try:
                append_batches(client, acked, 0, 50, records=10, value=b"x" * 100)
                log_path = tmp_path / "logs" / "node-2.log"
                text = log_path.read_text()
                assert "Read-only file system" in text and "EROFS" in text, text[-3000:]
                subprocess.run(["mount", "-o", "remount,rw", str(follower_dir)], check=True,
                               timeout=30)
                hw = wait_replicated(client, 3, timeout_s=60)
            finally:
                client.close()
            check_acknowledged(acked, [quorum.log_dir(i) for i in range(3)], hw)
