"""KIP-853 in the Spark application: a 3-voter application resized live with ``kraft-spark
resize``, or restarted with ``--voters 5``, grows its quorum to 5 voters (the new tasks join as
observers and the driver adds them one at a time), and shrinks back to 3 the same ways; nothing
acknowledged is lost and every change is a ``quorum_events`` row."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import consecutive_free_ports, free_ports
from tests.spark.test_application import App

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def voter_ids(app: App) -> list[int]:
    with urllib.request.urlopen(app.get("/v1/quorum"), timeout=30) as response:
        info: dict[str, Any] = json.loads(response.read())
    return [int(v["id"]) for v in info["currentVoters"]]


def wait_voters(app: App, expected: list[int], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    while time.monotonic() < deadline:
        try:
            seen = voter_ids(app)
        except OSError:
            seen = []
        if seen == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"voters {seen}, expected {expected}")


def test_the_application_resizes_live_and_by_restart_losing_nothing(tmp_path: Path,
                                                                     spark: Any) -> None:
    """One application, resized both ways: live with ``kraft-spark resize`` (3 → 5 → 3), then
    restarted with ``--voters 5`` and ``--voters 3``. (One scenario, not two: each start of the
    application costs a Spark application's start-up.)"""
    http_port = free_ports(1)[0]
    voter_base = consecutive_free_ports(5)
    acked: list[str] = []

    def append(app: App, n: int, tag: str) -> None:
        for i in range(n):
            app.post({"key": f"{tag}-{i}", "value": i})
            acked.append(f"{tag}-{i}")

    app = App(tmp_path, http_port, voter_base)
    try:
        wait_voters(app, [0, 1, 2])
        append(app, 5, "three")
        for voters in (5, 3):
            done = subprocess.run(
                [sys.executable, "-m", "kraft_spark", "resize", "--voters", str(voters),
                 "--url", app.url, "--timeout", "240",
                 # its admin token from the application's data directory, as a user's would
                 "--data-dir", str(tmp_path)],
                capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"voters {list(range(voters))}" in done.stdout
            append(app, 5, f"live-{voters}")
        assert voter_ids(app) == [0, 1, 2]
    finally:
        assert app.stop() == 0
    app = App(tmp_path, http_port, voter_base, ("--voters", "5"))
    try:
        wait_voters(app, [0, 1, 2, 3, 4])
        append(app, 5, "five")
    finally:
        assert app.stop() == 0
    app = App(tmp_path, http_port, voter_base, ("--voters", "3"))
    try:
        wait_voters(app, [0, 1, 2])
        append(app, 5, "back")
        keys = [r["key"] for r in app.records()]
        assert [k for k in keys if k in acked] == acked  # all there, once, in order
        warehouse = app.info["warehouse"]
        deadline = time.monotonic() + 120
        while True:
            events = spark.read.format("delta").load(f"{warehouse}/quorum_events")
            changes = [list(r.voters) for r in events.where("leader_id = -1")
                       .orderBy("offset").collect()]
            if changes and changes[-1] == [0, 1, 2] and len(changes) >= 8:
                break
            assert time.monotonic() < deadline, f"voter changes in quorum_events: {changes}"
            time.sleep(1)
        # Each voter added and removed one at a time, twice over: live, then by restart.
        grow, shrink = [[0, 1, 2, 3], [0, 1, 2, 3, 4]], [[0, 1, 2, 3], [0, 1, 2]]
        assert changes == grow + shrink + grow + shrink, changes
    finally:
        assert app.stop() == 0
