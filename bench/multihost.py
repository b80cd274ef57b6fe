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

With ``clean_workers`` (``--clean-workers``; issue 43) the workers are hosts where the project is
not installed: their Python (``PYSPARK_PYTHON`` in the rig's ``conf/spark-env.sh``) is a bare
virtual environment that cannot import ``kraft_spark`` (checked first), and the application is
submitted with the archive of ``kraft-spark pack-env`` (``kraft-spark run --env-archive``: each
executor unpacks it and runs ``./environment/bin/python``). The newest voters are checked at each
step through ``/proc``: their interpreter is the archive's, and their compiled record codec was
loaded from the archive unpacked in their host's work directory, nothing from the driver's
environment.

Run: ``.venv/bin/python -m bench.multihost [--dir DIR] [--clean-workers [--env-archive A]]``
(about 3 minutes on 2 cores; the archive's build adds about 30 s with pip's cache warm).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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


REPO = Path(__file__).resolve().parents[1]
# What spark.pyspark.python is with --env-archive (kraft_spark/commands/run.py).
ARCHIVE_PYTHON = "./environment/bin/python"
_HELLO = re.compile(r"voter (\d+) of generation (\d+) runs on ([\d.]+):\d+ \(executor \S+, "
                    r"pid (\d+)\)")


class AppProcess:
    def __init__(self, rig: StandaloneRig, base: Path, env_archive: Path | None = None) -> None:
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
            "kraft.materialize.interval.ms=300\n"
            # The voters listen on the rig's loopback "hosts": a network it trusts.
            "kraft.listener.plaintext.allowed=true\n")
        self.log_path = base / "app.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115
        archive = ["--env-archive", str(env_archive)] if env_archive is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "run", "--data-dir", str(data),
             "--http-port", str(_free_port()), "--sql-port", "0", "--config", str(conf),
             "--master", rig.master_url, *archive, "--", *rig.spark_submit_args()],
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
        # The write token of the credentials the application created in its data directory,
        # as a user's client sends it.
        self.auth: dict[str, str] = {}
        if self.info.get("credentials"):
            from kraft_spark.http_auth import Scope, token_in

            token = token_in(self.info["credentials"], Scope.WRITE)
            self.auth = {"Authorization": f"Bearer {token}"}
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
                                              "Idempotency-Key": f"rig-{key}", **self.auth},
                                             method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return int(json.loads(response.read())["base_offset"])
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                if isinstance(exc, urllib.error.HTTPError):
                    exc.close()
                    if exc.code in (401, 403):  # no retry makes a refused credential good
                        raise
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


def build_archive(base: Path) -> tuple[Path, dict[str, Any]]:
    """``kraft-spark pack-env`` into ``base`` (pip's cache as usual); the archive, figures."""
    archive = base / "kraft-spark-env.tar.gz"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kraft_spark", "pack-env", "--output",
                           str(archive)], capture_output=True, text=True, timeout=1200,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kraft-spark pack-env failed ({done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")
    return archive, {"pack_env_s": round(time.monotonic() - started, 1),
                     "archive_mb": round(archive.stat().st_size / 1e6)}


def clean_python(base: Path) -> Path:
    """A bare virtual environment of this machine's Python, nothing installed: a worker host's
    interpreter ("workers need Java and a matching Python only")."""
    env = base / "worker-python"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base_python = Path(sys.base_prefix) / "bin" / f"python{version}"
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(env)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    return env / "bin" / "python"


def worker_import_check(rig: StandaloneRig) -> str:
    """``import kraft_spark`` in a worker's Python, as a worker starts it (its environment,
    then ``conf/spark-env.sh``), from the rig's directory; its last line of stderr. Raises if
    the import works."""
    script = f'. "{rig.conf_dir}/spark-env.sh"; exec "$PYSPARK_PYTHON" -c "import kraft_spark"'
    done = subprocess.run(["bash", "-c", script], env=rig.worker_env(), cwd=rig.base,
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode == 0 or "No module named 'kraft_spark'" not in done.stderr:
        raise AssertionError(f"a worker's Python imports kraft_spark (or fails otherwise): "
                             f"exit {done.returncode}, {done.stderr.strip()}")
    return done.stderr.strip().splitlines()[-1]


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
        return {fields[5] for fields in (line.rstrip("\n").split(None, 5) for line in fh)
                if len(fields) == 6}


def _voter_process(rig: StandaloneRig, voter: int, generation: int, host: str,
                   pid: int) -> dict[str, Any]:
    """What voter process ``pid`` runs (raises OSError when it is gone); AssertionError when it
    is not the archive's interpreter, on its host, with the codec from the archive."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        argv = fh.read().split(b"\0")
    cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    files = _mapped_files(pid)
    codec = sorted(f for f in files if "/kraft_spark/log/_fastcodec" in f)
    seen = {"voter": voter, "generation": generation, "host": host, "pid": pid,
            "python": argv[0].decode(), "cwd": str(cwd), "codec": codec[0] if codec else None}
    driver_side = [f"{REPO / 'kraft_spark'}/"]  # the source tree (an editable install's)
    if sys.prefix != sys.base_prefix:
        driver_side.append(f"{Path(sys.prefix).resolve()}/")  # the driver's venv
    foreign = sorted(f for f in files if f.startswith(tuple(driver_side)))
    environment = (cwd / "environment").resolve()
    if (seen["python"] != ARCHIVE_PYTHON or not cwd.is_relative_to(rig.host_dir(host).resolve())
            or len(codec) != 1 or not Path(codec[0]).is_relative_to(environment) or foreign):
        raise AssertionError(f"voter {voter} (pid {pid} on {host}) does not run the archive's "
                             f"environment: {seen}; mapped from the driver's side: {foreign}")
    return seen


def check_voters(rig: StandaloneRig, app: AppProcess, hosts: set[str],
                 timeout_s: float = 60) -> list[dict[str, Any]]:
    """Every voter of the newest generation runs the archive's interpreter, once the newest
    generation's hosts include ``hosts`` and its processes can be read."""
    deadline = time.monotonic() + timeout_s
    while True:
        hellos = [(int(v), int(g), h, int(p)) for v, g, h, p in _HELLO.findall(app.log_text())]
        newest = max((g for _, g, _, _ in hellos), default=-1)
        latest = {v: (g, h, p) for v, g, h, p in hellos if g == newest}
        if hosts <= {h for _, h, _ in latest.values()}:
            try:
                return [_voter_process(rig, v, g, h, p) for v, (g, h, p) in sorted(latest.items())]
            except OSError:  # a process of that generation gone: a newer one is starting
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no readable voters of one generation on {sorted(hosts)} within "
                               f"{timeout_s} s (newest: {latest})")
        time.sleep(1)


def run(base: Path, clean_workers: bool = False,
        env_archive: Path | None = None) -> dict[str, Any]:
    """The scenario; returns its figures. Raises on any loss.

    ``clean_workers``: the workers' Python cannot import kraft_spark, and the application is
    submitted with ``env_archive`` (built here by ``kraft-spark pack-env`` when not given)."""
    figures: dict[str, Any] = {}
    worker_python: Path | None = None
    if clean_workers:
        if env_archive is None:
            env_archive, built = build_archive(base)
            figures.update(built)
            _say(f"archive built in {built['pack_env_s']} s: {env_archive} "
                 f"({built['archive_mb']} MB)")
        worker_python = clean_python(base)
    rig = StandaloneRig(base, worker_python)
    app: AppProcess | None = None
    acked: dict[str, int] = {}
    voters: list[dict[str, Any]] = []

    def check(hosts: set[str]) -> None:
        if clean_workers:
            assert app is not None
            checked = check_voters(rig, app, hosts)
            voters.extend(checked)
            _say("voters run the archive's Python: " + ", ".join(
                f"{v['voter']}@{v['host']} (generation {v['generation']})" for v in checked))

    try:
        if clean_workers:
            figures["worker_python"] = str(worker_python)
            figures["worker_import"] = worker_import_check(rig)
            _say(f"the workers' Python {worker_python}: {figures['worker_import']}")
        rig.start_master()
        first = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        for host in first:
            rig.add_worker(host)
        rig.wait_workers(set(first))
        started = time.monotonic()
        app = AppProcess(rig, base, env_archive if clean_workers else None)
        figures["app_ready_s"] = round(time.monotonic() - started, 1)
        _say(f"application ready in {figures['app_ready_s']} s: {app.url}")

        def append_some(n: int) -> None:
            for _ in range(n):
                key = f"k{len(acked)}"
                assert app is not None
                app.append(key, len(acked))
                acked[key] = len(acked)

        append_some(20)
        check(set(first))
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
        check({"127.0.0.5"})

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
        check({"127.0.0.6", "127.0.0.7", "127.0.0.8"})
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
        if clean_workers:
            figures["voter_processes"] = voters
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
    parser.add_argument("--clean-workers", action="store_true",
                        help="workers whose Python cannot import kraft_spark; the application "
                        "submitted with the pack-env archive")
    parser.add_argument("--env-archive", default=None,
                        help="with --clean-workers: this archive instead of building one")
    args = parser.parse_args()
    if args.env_archive and not args.clean_workers:
        parser.error("--env-archive is for --clean-workers")
    base = Path(args.dir or tempfile.mkdtemp(prefix="kraft-multihost-")).resolve()
    base.mkdir(parents=True, exist_ok=True)
    _say(f"rig under {base}")
    archive = Path(args.env_archive).resolve() if args.env_archive else None
    print(json.dumps(run(base, args.clean_workers, archive)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
