"""The store's short commands start without the server's libraries: running ``kraft-spark kv
get``, ``kv put``, ``kv del`` and ``lease ...`` (their parser, their token lookup, their
request) imports neither Spark, pyarrow, FastAPI, uvicorn, grpc nor httpx, nor the Raft core.
A real process per command, against an address where nothing listens (the request fails
cheaply: what is imported up to it is what a successful one imports). Timings are
``bench/cli_start.py``'s, not a test's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.net.helpers import free_ports

# Top-level packages a short command must not load: the server's, and the client libraries it
# does without (httpx: ~0.1 s with its TLS context; the Raft core and the Kafka-protocol client).
HEAVY = ("pyspark", "pyarrow", "fastapi", "starlette", "uvicorn", "grpc", "google.protobuf",
         "httpx", "httpcore", "anyio", "asyncio", "kraft_spark.raft", "kraft_spark.protocol",
         "kraft_spark.client.client", "kraft_spark.client.kv", "api", "driver")
# What the long-lived store commands (lock, watch, elect: asyncio and httpx) must not load.
SERVER = ("pyspark", "pyarrow", "fastapi", "starlette", "uvicorn", "grpc", "google.protobuf",
          "kraft_spark.raft", "kraft_spark.protocol", "kraft_spark.client.client", "api",
          "driver")


def _loaded_by(argv: list[str], heavy: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    """(exit code, the ``heavy`` modules loaded) of ``kraft-spark argv`` in a fresh process."""
    probe = ("import json, sys\n"
             "from kraft_spark.cli import main\n"
             f"code = main({argv!r})\n"
             f"heavy = {heavy!r}\n"
             "print(json.dumps([code, sorted(m for m in sys.modules "
             "if m in heavy or m.startswith(tuple(h + '.' for h in heavy)))]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True,
                          env={**os.environ, "KRAFT_SPARK_HTTP_TOKEN": "t"})
    code, loaded = json.loads(done.stdout.splitlines()[-1])
    return code, loaded


@pytest.mark.parametrize("argv", [
    ["kv", "get", "k"], ["kv", "put", "k", "1", "--lease", "7"],
    ["kv", "del", "p/", "--prefix"], ["lease", "grant", "10000"],
    ["lease", "timetolive", "7", "--keys"],
], ids=" ".join)
def test_a_short_command_loads_no_server_library(argv: list[str]) -> None:
    nobody = f"http://127.0.0.1:{free_ports(1)[0]}"
    code, loaded = _loaded_by([*argv, "--endpoint", nobody])
    assert code == 1  # it did send: "cannot reach", after everything it needs was imported
    assert loaded == []



@pytest.mark.parametrize("argv", [
    ["lock", "jobs", "--", "true"], ["kv", "watch", "k"], ["elect", "e", "--listen"],
], ids=" ".join)
def test_a_long_lived_command_loads_no_server_library(argv: list[str]) -> None:
    nobody = f"http://127.0.0.1:{free_ports(1)[0]}"
    code, loaded = _loaded_by([*argv[:2], "--endpoint", nobody, *argv[2:]], SERVER)
    assert code == 1  # "cannot reach": its client was built and tried
    assert loaded == []
