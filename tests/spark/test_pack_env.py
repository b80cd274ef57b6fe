"""``kraft-spark pack-env`` and ``kraft-spark run --env-archive`` end to end: the archive is
built (about 30 s with pip's cache warm, minutes without), then the application runs on a
``local-cluster`` master, whose executors are separate JVMs that unpack the archive in their
own working directories as a cluster's would: every voter must run its interpreter.

Marked slow (excluded from the default suite): the build alone is about the suite's budget for
one test, and four executor JVMs start on top of it. The command line it submits is checked
without Spark in tests/test_spark_submit.py."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kraft_spark.http_auth import Scope, token_in

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

KRAFT_SPARK = Path(sys.executable).parent / "kraft-spark"


def _tail(path: Path, lines: int = 60) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:])


def test_the_packed_environment_runs_the_voters(tmp_path: Path) -> None:
    if importlib.util.find_spec("venv_pack") is None:
        pytest.skip("venv-pack is not installed (pip install '.[pack]')")
    archive = tmp_path / "env.tar.gz"
    built = subprocess.run([str(KRAFT_SPARK), "pack-env", "--output", str(archive)],
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    print(f"\n[figure] pack-env: {built.stdout.strip()}")

    props = tmp_path / "ports.properties"
    props.write_text("kraft.voter.base.port=0\nkraft.voter.http.base.port=-1\n"
                     "kraft.listener.plaintext.allowed=true\n")
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # executors and voters on loopback
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [str(KRAFT_SPARK), "run", "--master", "local-cluster[4,1,1024]",
             "--env-archive", str(archive), "--data-dir", str(tmp_path / "data"),
             "--http-port", "0", "--sql-port", "0", "--config", str(props)],
            cwd=tmp_path, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        info = None
        while info is None:
            assert proc.poll() is None, f"kraft-spark run exited ({proc.returncode})"
            assert time.monotonic() < deadline, "not ready within 300 s"
            lines = [ln for ln in out.read_text(errors="replace").splitlines()
                     if ln.startswith('{"http"')]
            info = json.loads(lines[0]) if lines else None
            time.sleep(0.5)
        request = urllib.request.Request(f"{info['http']}/v1/records",
                                         json.dumps({"key": "k", "value": 1}).encode(),
                                         {"Content-Type": "application/json",
                                          "Authorization": "Bearer " + token_in(
                                              info["credentials"], Scope.WRITE)},
                                         method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["base_offset"] >= 1
        voters = [line for line in out.read_text(errors="replace").splitlines()
                  if "of generation 0 runs on" in line]
        assert len(voters) == 3, voters
        for line in voters:  # "... (executor jvm-pid-N, pid P)"
            pid = int(line.rsplit("pid ", 1)[1].rstrip(")"))
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv0 = fh.read().split(b"\0")[0].decode()
            assert argv0 == "./environment/bin/python", f"voter pid {pid} runs {argv0}"
        proc.send_signal(signal.SIGTERM)  # kraft-spark run hands it to the driver
        assert proc.wait(180) == 0
    except BaseException:
        print(f"--- end of the output ({out}):\n{_tail(out)}\n--- stderr ({err}):\n{_tail(err)}")
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
