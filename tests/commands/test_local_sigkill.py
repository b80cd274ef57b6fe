"""``kraft-spark local`` killed with SIGKILL leaves no node behind: each node asked Linux for
SIGTERM on its parent's death (``kraft_spark.proc_tree.stop_with_parent``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kraft_spark.proc_tree import parent_of
from tests.integration.harness import consecutive_free_ports

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"),
]


def _alive(pid: int) -> bool:
    """Alive and not a zombie (a node reparented to init is reaped by it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_nodes_stop_when_local_is_killed(tmp_path: Path) -> None:
    local = subprocess.Popen(
        [sys.executable, "-m", "kraft_spark", "local", "--data-dir", str(tmp_path / "d"),
         "--base-port", str(consecutive_free_ports(3)), "--no-node-http"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pids: list[int] = []
    try:
        assert local.stdout is not None
        while len(pids) < 3:
            line = local.stdout.readline()
            assert line, "kraft-spark local ended before printing its nodes"
            if line.startswith("{") and "node_id" in line:
                pids.append(int(json.loads(line)["pid"]))
        assert all(parent_of(pid) == local.pid for pid in pids)
        local.send_signal(signal.SIGKILL)  # no handler runs: only the kernel can tell them
        local.wait(10)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)], "nodes outlived kraft-spark local"
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
        if local.stdout is not None:
            local.stdout.close()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
