"""The application as any Spark application is deployed: the spark-submit line of
docs/operations/deploying.md, run as written from the repository's root (issue 43).

One application start per test. Ports are the application's own "any free port" (0), read back
from the line it prints, so no port is guessed ahead of the start. Every process is killed by its
process group whatever happens, and a failure prints the end of its logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraft_spark import app_endpoint
from kraft_spark.errors import CommandError
from kraft_spark.http_auth import Scope, token_in

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# The documented line, from the repository's root (docs/operations/deploying.md).
DOCUMENTED = ["spark-submit", "--properties-file", "conf/spark-defaults.conf", "driver/app.py"]
# Ports chosen by the system (printed by the application); no Spark Connect server (not needed).
PORT_ARGS = ["--http-port", "0", "--sql-port", "0"]


def _env() -> dict[str, str]:
    """As a user with the project's environment active: its bin first on PATH. Nothing of this
    test process's own Spark (a gateway, a Python choice) leaks into the submission."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_", "KRAFT_SPARK_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    return env


def _tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no file)"
    return "\n".join(text[-lines:])


@contextlib.contextmanager
def _submitted(args: list[str], logs: Path) -> Iterator[subprocess.Popen[bytes]]:
    """spark-submit with ``args`` in a session of its own; stdout (the driver's output:
    spark-submit merges its stdout and stderr) and the JVM's stderr in ``logs``."""
    out, err = logs / "submit.out", logs / "submit.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(args, cwd=ROOT, env=_env(), stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    except BaseException:
        print(f"--- end of the driver's output ({out}):\n{_tail(out)}\n"
              f"--- end of spark-submit's stderr ({err}):\n{_tail(err)}")
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the JVM, the driver, the voters
        proc.wait(30)


def _ready_line(proc: subprocess.Popen[bytes], out: Path, timeout_s: float) -> dict[str, Any]:
    """The application's JSON line (its HTTP address), once it prints it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith('{"http"'):
                info: dict[str, Any] = json.loads(line)
                return info
        code = proc.poll()
        assert code is None, f"spark-submit exited ({code}) before the application was ready"
        time.sleep(0.25)
    raise AssertionError(f"the application was not ready within {timeout_s:.0f} s")


def _post(info: dict[str, Any], body: Any) -> dict[str, Any]:
    """An append with the write token of the credentials the application created."""
    token = token_in(info["credentials"], Scope.WRITE)
    request = urllib.request.Request(f"{info['http']}/v1/records", json.dumps(body).encode(),
                                     {"Content-Type": "application/json",
                                      "Authorization": f"Bearer {token}"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


# Reads the records table with delta-rs until it holds the expected keys, in a process of its
# own: delta-rs's runtime threads have been seen aborting a Python process at its exit
# ("terminate called without an active exception"), which must not be pytest's.
_READ_DELTA = """
import json, sys, time
from deltalake import DeltaTable
table, expected, deadline = sys.argv[1], json.loads(sys.argv[2]), time.monotonic() + 60
seen = {}
while seen != expected and time.monotonic() < deadline:
    try:
        rows = DeltaTable(table).to_pyarrow_table(columns=["key", "offset"]).to_pylist()
        seen = {row["key"]: row["offset"] for row in rows}
    except Exception:  # not created yet
        pass
    time.sleep(0.5)
print(json.dumps(seen), flush=True)
"""


def _delta_keys(table: str, expected: dict[str, int]) -> dict[str, int]:
    """The records table's keys and offsets once they are ``expected`` (or after 60 s)."""
    done = subprocess.run([sys.executable, "-c", _READ_DELTA, table, json.dumps(expected)],
                          capture_output=True, text=True, timeout=120, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, f"reading {table} failed: {done.stderr[-2000:]}"
    seen: dict[str, int] = json.loads(lines[-1])
    return seen


def test_the_documented_spark_submit_line_runs_the_application(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"  # fresh: the application creates it
    started = time.monotonic()
    with _submitted([*DOCUMENTED, "--data-dir", str(data_dir), *PORT_ARGS], tmp_path) as proc:
        info = _ready_line(proc, tmp_path / "submit.out", 180)
        ready_s = time.monotonic() - started
        appended = {key: _post(info, {"key": key, "value": {"n": i}})["base_offset"]
                    for i, key in enumerate(("broker-1", "broker-2", "topic-orders"))}
        # Where a client finds the address when it cannot know where the driver runs.
        assert app_endpoint.http_url(info["warehouse"]) == info["http"]
        records = os.path.join(info["warehouse"], "records")
        assert records == str(data_dir / "warehouse" / "records")
        seen = _delta_keys(records, appended)
        assert seen == appended, f"the Delta table has {seen}, expected {appended}"
        # SIGINT to spark-submit's JVM alone, as a supervisor stops the process it started:
        # the driver stops gracefully and spark-submit exits with its code.
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
        assert code == 0, f"spark-submit exited {code} after SIGINT"
    print(f"\n[figure] spark-submit -> ready: {ready_s:.1f} s")
    output = (tmp_path / "submit.out").read_text(errors="replace")
    assert "[kraft-spark] stopped" in output
    with pytest.raises(CommandError, match="no address recorded"):
        app_endpoint.http_url(info["warehouse"])  # withdrawn at the stop


def test_a_submission_without_delta_fails_fast_naming_the_command(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    app_args = ["--data-dir", str(data_dir), *PORT_ARGS]
    started = time.monotonic()
    with _submitted(["spark-submit", "driver/app.py", *app_args], tmp_path) as proc:
        code = proc.wait(60)
        elapsed = time.monotonic() - started
        output = (tmp_path / "submit.out").read_text(errors="replace")
        assert code != 0
        assert elapsed < 30, f"took {elapsed:.1f} s to fail"
        working = " ".join([*DOCUMENTED, *app_args])
        assert working in output, f"the working command is not in:\n{output}"
    print(f"\n[figure] bare spark-submit -> exit {code}: {elapsed:.1f} s")
