"""The disposable-executors scenario on a multi-host rig (issue 24), as a script and for the
test ``tests/spark/test_multihost.py``:

1. a standalone master and three workers ("hosts" 127.0.0.2-4), the application's driver on
   127.0.0.1 with the warehouse on a directory they all share and each voter's log under its
   host's directory;
2. appends; then one host is killed (its voter's disk with it) and a new host joins: the voter
   lands there with a fresh disk, catches up, and is replaced in the voter set;
3. appends; then every host is killed and three new ones join: no voter has a log, and the
   quorum is rebuilt from the warehouse;
4. appends; every acknowledged append is in the ``snapshot`` table with its value, and
   ``records`` holds each offset once.

Run: ``.venv/bin/python -m bench.multihost [--dir DIR]`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.processes import stop_group
from bench.standalone_rig import StandaloneRig, _free_port


def _say(text: str) -> None:
    print(f"[multihost] {text}", flush=True)


class AppProcess:
    def __init__(self, rig: StandaloneRig, base: Path) -> None:
        data, shared = base / "driver", base / "shared"
        data.mkdir(parents=True, exist_ok=True)
        shared.mkdir(parents=True, exist_ok=True)
        conf = base / "rig.properties"
        conf.write_text(
            f"kraft.warehouse.uri=file://{shared}/warehouse\n"
            "kraft.voter.log.dir=${KRAFT_HOST_DIR}/voters\n"
            f"kraft.voter.base.port={_free_port()}\n"
            "controller.quorum.fetch.timeout.ms=2000\n"
            "controller.quorum.election.timeout.ms=1000\n"
            "kraft.materialize.interval.ms=300\n")
        self.log_path = base / "app.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "run", "--data-dir", str(data),
             "--http-port", str(_free_port()), "--sql-port", "0", "--config", str(conf),
             "--master", rig.master_url, "--", *rig.spark_submit_args()],
            stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        while line and not line.startswith("{"):  # Ivy's report, the start-up progress
            self.log.write(line.encode())
            line = self.proc.stdout.readline()
        self.log.flush()
        if not line:
            self.stop()
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError("the application exited before it was ready:\n"
                               + "\n".join(tail))
        self.info: dict[str, Any] = json.loads(line)
        self.url = self.info["http"]
        # spark-submit runs the driver with its stderr merged into stdout: keep draining it
        # into the log, or the pipe fills and the driver blocks on its next progress line.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a", encoding="utf-8") as out, \
                contextlib.suppress(ValueError, OSError):  # closed at the stop
            for text in self.proc.stdout:
                out.write(text)
                out.flush()

    def append(self, key: str, value: int, budget_s: float = 300) -> int:
        """POST until acknowledged (leader changes, a voter stage relaunching); the offset."""
        body = json.dumps({"key": key, "value": value}).encode()
        deadline = time.monotonic() + budget_s
        while True:
            request = urllib.request.Request(f"{self.url}/v1/records", body,
                                             {"Content-Type": "application/json",
                                              "Idempotency-Key": f"rig-{key}"}, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return int(json.loads(response.read())["base_offset"])
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"append {key} not acknowledged within {budget_s} s: "
                                       f"{exc}") from exc
                time.sleep(0.5)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        code = stop_group(self.proc, 120)
        self.log.close()
        return code


def _table(warehouse: str, name: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    rows: list[dict[str, Any]] = DeltaTable(os.path.join(warehouse, name)).to_pyarrow_table(
        columns=["key", "value", "offset"]).to_pylist()
    return rows


def _holds_all(warehouse: str, name: str, acked: dict[str, int]) -> bool:
    """Whether table ``name`` maps exactly the acknowledged keys to their values."""
    try:
        rows = _table(warehouse, name)
    except Exception:  # not created yet, or a commit in flight
        return False
    return {r["key"]: r["value"] for r in rows} == {k: str(v) for k, v in acked.items()}


def _wait_for(what: str, check: Any, timeout_s: float = 180) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(1)
    return time.monotonic() - started


def run(base: Path) -> dict[str, Any]:
    """The scenario; returns its figures. Raises on any loss."""
    rig = StandaloneRig(base)
    app: AppProcess | None = None
    acked: dict[str, int] = {}
    figures: dict[str, Any] = {}
    try:
        rig.start_master()
        first = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        for host in first:
            rig.add_worker(host)
        rig.wait_workers(set(first))
        started = time.monotonic()
        app = AppProcess(rig, base)
        figures["app_ready_s"] = round(time.monotonic() - started, 1)
        _say(f"application ready in {figures['app_ready_s']} s: {app.url}")

        def append_some(n: int) -> None:
            for _ in range(n):
                key = f"k{len(acked)}"
                assert app is not None
                app.append(key, len(acked))
                acked[key] = len(acked)

        append_some(20)
        _say("20 appends acknowledged; killing host 127.0.0.3 (its voter's disk with it) and "
             "adding 127.0.0.5")
        rig.kill_host("127.0.0.3")
        rig.add_worker("127.0.0.5")
        figures["relaunched_on_new_host_s"] = round(_wait_for(
            "a voter relaunched on the new host", lambda: "runs on 127.0.0.5:" in app.log_text()),
            1)
        _say(f"the voter stage runs again, one voter on 127.0.0.5 with a fresh disk, after "
             f"{figures['relaunched_on_new_host_s']} s")
        started = time.monotonic()
        append_some(20)
        figures["one_host_lost_appends_s"] = round(time.monotonic() - started, 1)
        _say(f"20 more appends acknowledged in {figures['one_host_lost_appends_s']} s")

        # The warehouse holds what the driver's observer has seen (README "Known limits"): an
        # append the leader acknowledged within the observer's last fetch round trip is lost if
        # every voter's disk goes in that instant. Right after a leader change, with the driver
        # busy materializing, that window reached ~0.1 s here (6 appends of 20 sent back to
        # back, CI 2026-11-26), so the scenario waits, as an operator watching
        # kraft_spark_materialization_lag_offsets would, until `records` holds them.
        warehouse = app.info["warehouse"]
        figures["records_caught_up_s"] = round(_wait_for(
            "every acknowledged append in the records table",
            lambda: _holds_all(warehouse, "records", acked), 60), 1)
        _say(f"records holds all {len(acked)} acknowledged appends "
             f"({figures['records_caught_up_s']} s after the last)")
        hosts = ["127.0.0.2", "127.0.0.4", "127.0.0.5"]
        _say(f"killing every host ({', '.join(hosts)}) and their disks; adding 127.0.0.6-8")
        for host in hosts:
            rig.kill_host(host)
        for host in ("127.0.0.6", "127.0.0.7", "127.0.0.8"):
            rig.add_worker(host)
        started = time.monotonic()
        append_some(10)
        figures["all_hosts_lost_appends_s"] = round(time.monotonic() - started, 1)
        if "rebuilding the quorum from the warehouse" not in app.log_text():
            raise AssertionError("the quorum was not rebuilt from the warehouse")
        _say(f"quorum rebuilt from the warehouse; 10 more appends acknowledged in "
             f"{figures['all_hosts_lost_appends_s']} s")
        _wait_for("every acknowledged append in the snapshot table",
                  lambda: _holds_all(warehouse, "snapshot", acked))
        offsets = [r["offset"] for r in _table(warehouse, "records")]
        if len(offsets) != len(set(offsets)):
            raise AssertionError("records holds an offset twice")
        figures["acknowledged"] = len(acked)
        figures["records_rows"] = len(offsets)
        _say(f"all {len(acked)} acknowledged appends are in the snapshot table; records: "
             f"{len(offsets)} rows, each offset once")
    finally:
        if app is not None:
            figures["app_exit"] = app.stop()
        rig.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the rig lives (default: a temp dir)")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="kraft-multihost-"))
    _say(f"rig under {base}")
    print(json.dumps(run(base)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
