"""etcd's own load generator, ``benchmark`` (``tools/benchmark`` of etcd's repository, the tool
behind etcd's op-guide performance tables): built from Go modules, run, and its report read.

The build is the module in ``bench/etcd_benchmark``: a go.mod whose ``tool`` line names
``go.etcd.io/etcd/v3/tools/benchmark`` at etcd v3.6.8 (go.sum pins every dependency). It is
built once per version of those two files into ``~/.cache/kraft-spark/etcd-benchmark`` (``go
mod download`` through the Go module proxy, then ``go build``: 80 s of compiling on this 2-core
VM with the modules downloaded, a few seconds once Go's build cache holds them), then reused.

The tool speaks etcd's v3 gRPC API with etcd's Go client (clientv3): ``--conns`` gRPC
connections shared round-robin by ``--clients`` clients, each sending its next request when its
last one is answered, ``--total`` requests in all. Its report (``--precise``: full float
precision) gives requests per second and a latency distribution; :func:`parse_report` reads it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft_spark.lincheck.go_build import build_program

SOURCE_DIR = Path(__file__).resolve().parent / "etcd_benchmark"
# Outside the work tree, so that every clone of the repository on the machine (and the test
# suite, tests/bench/test_etcd_load.py) finds the binary the first one built.
CACHE = Path.home() / ".cache" / "kraft-spark" / "etcd-benchmark"
PACKAGE = "go.etcd.io/etcd/v3/tools/benchmark"
BUILD_TIMEOUT_S = 600.0

# etcd's op-guide performance tables: 8-byte keys, 256-byte values.
KEY_SIZE = 8
VALUE_SIZE = 256


def module_version() -> str:
    """The etcd version go.mod pins (``v3.6.8``), for the results' header."""
    found = re.search(r"^\s*go\.etcd\.io/etcd/v3 (v\S+)", (SOURCE_DIR / "go.mod").read_text(),
                      re.MULTILINE)
    return found.group(1) if found else "?"


_FILES = (SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum")


def binary_path(cache: Path = CACHE) -> Path:
    """Where the build of the current go.mod and go.sum is (or will be): named by their hash."""
    digest = hashlib.sha256()
    for path in _FILES:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return cache / f"benchmark-{digest.hexdigest()[:16]}"


def build(cache: Path = CACHE) -> tuple[Path | None, str | None]:
    """(the tool's binary, None), built if its go.mod or go.sum changed since the last build,
    or (None, why it cannot be built here: no Go, or no Go module proxy)."""
    return build_program(SOURCE_DIR, list(_FILES), binary_path(cache),
                         modules=f"{PACKAGE} {module_version()}", timeout_s=BUILD_TIMEOUT_S,
                         package=PACKAGE)


@dataclass(frozen=True)
class Cell:
    """One measurement: ``op`` ``put`` (a new key each request: sequential keys over a key
    space as large as ``total``) or ``range`` (one key, linearizable), by ``clients`` clients
    over ``conns`` gRPC connections."""

    op: str
    clients: int
    conns: int
    total: int

    @property
    def label(self) -> str:
        return f"{self.op}, {self.clients} client{'s' if self.clients != 1 else ''}"


def argv(binary: Path | str, cell: Cell, endpoints: list[str], *, range_key: str,
         user: str | None = None) -> list[str]:
    """The tool's command line for ``cell``: every member's endpoint with ``--target-leader``
    (the tool asks them who leads and sends everything there, as the op-guide's write tables
    do), ``--user name:password`` where the system checks credentials."""
    common = [str(binary), "--endpoints", ",".join(endpoints), "--target-leader",
              "--conns", str(cell.conns), "--clients", str(cell.clients), "--precise"]
    if user is not None:
        common += ["--user", user]
    if cell.op == "put":
        return [*common, "put", "--key-size", str(KEY_SIZE), "--val-size", str(VALUE_SIZE),
                "--sequential-keys", "--key-space-size", str(cell.total),
                "--total", str(cell.total)]
    if cell.op == "range":
        return [*common, "range", range_key, "--consistency", "l", "--total", str(cell.total)]
    raise ValueError(f"unknown operation {cell.op!r}: put or range")


def redacted(command: list[str]) -> list[str]:
    """``command`` with the password of ``--user name:password`` replaced (for logs)."""
    out = list(command)
    for i, word in enumerate(out[:-1]):
        if word == "--user":
            out[i + 1] = out[i + 1].partition(":")[0] + ":***"
    return out


_SECONDS = r"([0-9.]+(?:[eE][-+]?[0-9]+)?) secs"


def parse_report(text: str) -> dict[str, Any]:
    """The figures of one report of the tool: ``requests_per_s`` (answered requests over the
    run's time: errors are not counted), ``p50_ms``, ``p99_ms``, ``p999_ms`` (None when the
    run had too few requests for it: the tool prints a percentile only once as many requests
    reach it, so p99 needs 100), ``total_s`` and ``errors`` (requests that failed, by
    message). Raises ValueError when ``text`` holds no report (the tool failed before
    measuring)."""
    rps = re.search(r"Requests/sec:\s*([0-9.]+)", text)
    total = re.search(r"Total:\s*" + _SECONDS, text)
    errors = _errors(text)
    if rps is None or total is None:
        if errors:
            raise ValueError(f"every request failed: {errors}")
        raise ValueError("no report in the tool's output:\n" + text[-2000:])
    latencies = {m.group(1): float(m.group(2)) * 1000
                 for m in re.finditer(r"^\s*([0-9.]+)% in " + _SECONDS, text, re.MULTILINE)}
    total_s = float(total.group(1))
    return {"requests_per_s": round(float(rps.group(1)), 1),
            "p50_ms": _round(latencies.get("50")), "p99_ms": _round(latencies.get("99")),
            "p999_ms": _round(latencies.get("99.9")), "total_s": round(total_s, 3),
            "errors": errors}


def _round(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 3)


def _errors(text: str) -> dict[str, int]:
    """The report's ``Error distribution``: message → how many requests failed with it."""
    _, found, tail = text.partition("Error distribution:")
    if not found:
        return {}
    out: dict[str, int] = {}
    for match in re.finditer(r"^\s*\[(\d+)\]\s*(.*)$", tail, re.MULTILINE):
        out[match.group(2).strip()] = out.get(match.group(2).strip(), 0) + int(match.group(1))
    return out
