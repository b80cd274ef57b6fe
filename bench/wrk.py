"""One HTTP load generator for every system: wrk (Debian's package) driven by a generated Lua
script.

Each system says how one append looks on the wire (method, path, body); the script cycles
through a table of pre-built bodies (distinct keys, 100-byte values) and, when wrk finishes,
prints one ``WRKJSON {...}`` line with the request count, the error counts and the latency
percentiles, which :func:`parse_wrk_output` reads back. wrk is closed-loop: each connection
sends its next request when the previous answer arrives, so ``-c 1`` is one sequential client.

Every request carries the workload's ``headers``; kraft-spark's workloads add their
``Authorization: Bearer <token>`` there (:func:`json_headers`), as its users' clients do.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MARKER = "WRKJSON "
JSON_HEADERS: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)

_DONE = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"status_errors":%d,"connect_errors":%d,' ..
    '"read_errors":%d,"write_errors":%d,"timeouts":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50.0), latency:percentile(99.0)))
end
"""


def json_headers(token: str | None = None, *, json_body: bool = True
                 ) -> tuple[tuple[str, str], ...]:
    """A workload's headers: ``Content-Type: application/json`` (with ``json_body``), and
    ``Authorization: Bearer <token>`` with a token (kraft-spark's HTTP API)."""
    auth = (("Authorization", f"Bearer {token}"),) if token else ()
    return (JSON_HEADERS if json_body else ()) + auth


@dataclass(frozen=True)
class HttpWorkload:
    """How to append over HTTP: POST ``path`` with one of ``bodies`` (cycled); or, with
    ``paths``, GET each of them in turn (reads by key). ``headers`` go with every request."""

    url: str
    path: str
    bodies: Sequence[bytes]
    records_per_request: int = 1
    headers: tuple[tuple[str, str], ...] = field(default=JSON_HEADERS, repr=False)
    paths: Sequence[str] = ()


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float
    records_per_request: int

    @property
    def ok_per_s(self) -> float:
        return max(0, self.requests - self.errors) / self.seconds if self.seconds else 0.0

    @property
    def records_per_s(self) -> float:
        return self.ok_per_s * self.records_per_request


def _lua_long_string(body: bytes) -> str:
    text = body.decode("utf-8")
    level = 1
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[{text}]{eq}]"


def lua_script(workload: HttpWorkload) -> str:
    """The wrk script for ``workload`` (bodies inlined as Lua long strings)."""
    headers = [f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}"
               for name, value in workload.headers]
    if workload.paths:
        lines = ["local paths = {"]
        lines += [f"  {json.dumps(p)}," for p in workload.paths]
        lines += ["}", "local n = #paths", "local i = 0", 'wrk.method = "GET"', *headers,
                  "request = function()", "  i = i + 1",
                  '  return wrk.format("GET", paths[(i % n) + 1])', "end"]
        return "\n".join(lines) + "\n" + _DONE
    if not workload.bodies:
        raise ValueError("a workload needs at least one body")
    lines = ["local bodies = {"]
    lines += [f"  {_lua_long_string(b)}," for b in workload.bodies]
    lines.append("}")
    lines.append("local n = #bodies")
    lines.append("local i = 0")
    lines.append('wrk.method = "POST"')
    lines += headers
    lines.append("request = function()")
    lines.append("  i = i + 1")
    lines.append(f"  return wrk.format(nil, {json.dumps(workload.path)}, nil, bodies[(i % n) + 1])")
    lines.append("end")
    return "\n".join(lines) + "\n" + _DONE


def parse_wrk_output(stdout: str, records_per_request: int) -> WrkResult:
    """Read the ``WRKJSON`` line the script's ``done`` prints."""
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            data: dict[str, Any] = json.loads(line[len(MARKER):])
            errors = sum(int(data[k]) for k in ("status_errors", "connect_errors",
                                                "read_errors", "write_errors", "timeouts"))
            return WrkResult(
                requests=int(data["requests"]),
                seconds=int(data["duration_us"]) / 1e6,
                errors=errors,
                p50_ms=int(data["p50_us"]) / 1000,
                p99_ms=int(data["p99_us"]) / 1000,
                records_per_request=records_per_request,
            )
    raise RuntimeError(f"wrk printed no {MARKER.strip()} line; its output was:\n{stdout[-2000:]}")


def run_wrk(workload: HttpWorkload, connections: int, seconds: float,
            warmup_s: float = 2.0) -> WrkResult:
    """A warm-up run, then the measured run of ``seconds`` with ``connections`` connections."""
    threads = 1 if connections == 1 else min(2, connections)
    # The script holds the workload's headers (a bearer token): NamedTemporaryFile creates it
    # readable by its owner only, and it is removed when wrk is done.
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(lua_script(workload))
        script = fh.name
    try:
        def once(duration: float) -> WrkResult:
            cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s",
                   "--timeout", "10s", "-s", script, workload.url]
            done = subprocess.run(cmd, check=False, capture_output=True, text=True,
                                  timeout=duration + 60)
            if done.returncode != 0:
                raise RuntimeError(f"wrk failed (exit {done.returncode}): {done.stderr.strip()}")
            return parse_wrk_output(done.stdout, workload.records_per_request)

        if warmup_s > 0:
            once(warmup_s)
        return once(seconds)
    finally:
        os.unlink(script)
