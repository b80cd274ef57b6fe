"""The lease bench's own parts: its tallies, summaries and report, and the small HTTP client
it drives both systems with. (The figures come from ``kraft-spark bench leases``, never from
timed assertions here.)"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from bench.lease_stats import (
    CpuWindow,
    KeepAliveTally,
    LockTally,
    keepalive_row,
    lock_row,
    report,
)
from bench.leases import notes
from bench.proc_cpu import CpuSample, cpu_seconds, every_process, machine_ticks
from bench.raw_http import HttpConnection, HttpConnectionError

CPU = CpuWindow(seconds=20.0, leader_s=10.0, members_s=24.0, generator_s=4.0, machine_busy=0.9,
                machine_s=36.0, others_s=3.0, top_others=(("java", 2.0), ("etcd", 1.0)))


def _row(tally: KeepAliveTally, **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"leases": 10_000, "clients": 1000, "ttl_s": 10.0, "window_s": 20.0,
                            "granted": 10_000, "grant_s": 4.0, "missing_at_end": 0,
                            "cpu": CPU, "leader_changed": False}
    args.update(overrides)
    return keepalive_row(tally, **args)


def test_keepalive_row_counts_rates_percentiles_and_cpu() -> None:
    tally = KeepAliveTally()
    for i in range(100):  # 1 ms .. 100 ms
        tally.answered((i + 1) / 1000, lag_s=(i + 1) / 1000 + 0.5, ok=i != 99)
    tally.errors, tally.late = 3, 2
    row = _row(tally)
    assert row["keepalives"] == 100 and row["not_found"] == 1 and row["errors"] == 3
    assert row["keepalives_per_s"] == 5  # 100 answers over 20 s
    assert row["target_per_s"] == 3000  # 10,000 leases every 10/3 s
    assert row["grants_per_s"] == 2500
    assert (row["p50_ms"], row["p99_ms"]) == (51.0, 100.0)  # nearest rank
    assert row["max_lag_ms"] == 600.0
    assert row["late"] == 2
    assert (row["leader_cores"], row["members_cores"], row["generator_cores"]) == (0.5, 1.2, 0.2)
    assert row["machine_busy_pct"] == 90.0
    assert row["top_others"] == [{"name": "java", "cpu_s": 2.0}, {"name": "etcd", "cpu_s": 1.0}]
    assert row["kernel_cpu_s"] == 5.0  # 36 busy - 24 members - 4 generator - 3 others


def test_keepalive_row_without_answers_has_no_percentiles() -> None:
    row = _row(KeepAliveTally(), window_s=0.0, grant_s=0.0)
    assert row["p50_ms"] is None and row["p99_ms"] is None
    assert row["keepalives_per_s"] == 0 and row["grants_per_s"] == 0


def test_lock_tally_counts_an_acquisition_while_held_as_an_overlap() -> None:
    tally = LockTally()
    tally.enter()
    tally.leave()
    tally.enter()
    assert tally.overlaps == 0
    tally.enter()  # a second holder before the first left
    assert tally.overlaps == 1


def test_lock_row_rate_is_over_the_whole_point_and_cli_rows_say_what_was_not_checked() -> None:
    tally = LockTally(latencies_s=[0.01, 0.02, 0.03, 0.04], completed=4, elapsed_s=2.0)
    row = lock_row(tally, system="kraft-spark", client="in-process", contenders=8)
    assert row["acquisitions_per_s"] == 2.0
    assert (row["p50_ms"], row["p99_ms"]) == (30.0, 40.0)
    assert row["overlaps"] == 0 and row["cli_cpu_ms_each"] is None
    cli = LockTally(latencies_s=[0.5], completed=2, elapsed_s=1.0, checked=False,
                    client_cpu_s=0.7)
    row = lock_row(cli, system="etcd", client="cli", contenders=1)
    assert row["overlaps"] is None and row["cli_cpu_ms_each"] == 350.0


def test_report_has_both_systems_side_by_side_and_every_lock_row() -> None:
    tally = KeepAliveTally()
    tally.answered(0.002, 0.002, ok=True)
    lost = _row(tally, missing_at_end=12, granted=9_990)
    lost["not_found"] = 5
    results = {
        "meta": {"date": "2026-11-26 17:00 UTC", "cpus": 2, "command": "kraft-spark bench "
                 "leases", "etcd": "3.4.23", "python": "3.11.7"},
        "keepalive": {"etcd": _row(tally), "kraft-spark": lost},
        "locks": [lock_row(LockTally(latencies_s=[0.1], completed=1, elapsed_s=1.0),
                           system=s, client=c, contenders=n)
                  for s in ("etcd", "kraft-spark") for c in ("cli", "in-process")
                  for n in (1, 32)],
    }
    results["notes"] = notes(results)
    text = report(results)
    assert "| | kraft-spark | etcd |" in text  # kraft-spark first, whatever the dict order
    assert "| leases missing at the end | 12 | 0 |" in text
    assert "| other processes CPU s (largest) | 3.00 (java 2, etcd 1) |" in text
    assert "| leases granted (of asked) | 9,990 of 10,000 | 10,000 of 10,000 |" in text
    assert sum(line.startswith(("| cli |", "| in-process |")) for line in text.splitlines()) == 8
    assert "kraft-spark: 12 leases missing" in text
    assert "only 9,990 of 10,000" in text
    assert "gRPC stream" in text


def test_cpu_of_this_process_and_the_machine_are_read_from_proc() -> None:
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc here")
    sum(i * i for i in range(200_000))  # some CPU of our own to see
    assert cpu_seconds(os.getpid()) > 0
    assert cpu_seconds(2**22 + 12345) == 0.0  # no such process
    busy, total = machine_ticks()
    assert 0 < busy <= total
    assert every_process()[os.getpid()][1] > 0
    before = CpuSample(os.getpid(), [os.getpid()])
    sum(i * i for i in range(200_000))
    window = before.until(CpuSample(os.getpid(), [os.getpid()]))
    assert window.leader_s == window.members_s >= 0  # this process counted as the one member
    assert window.seconds > 0 and 0 <= window.machine_busy <= 1


# --------------------------------------------------------------------------- raw_http


async def _serve(answers: list[bytes]) -> tuple[asyncio.Server, list[bytes]]:
    """A server that reads each request (head and Content-Length body) and answers the next
    of ``answers`` verbatim; returns it and the requests it got."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            got.append(head + await reader.readexactly(length))
            writer.write(answers.pop(0))
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), got


def test_raw_http_reads_sized_and_chunked_answers_on_one_connection() -> None:
    async def scenario() -> None:
        server, got = await _serve([
            b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}",
        ])
        port = server.sockets[0].getsockname()[1]
        conn = HttpConnection(f"http://127.0.0.1:{port}")
        try:
            assert await conn.request("POST", "/v1/leases", b'{"ttl_ms":1}') == (
                200, b'{"ok":true}')
            assert await conn.request("POST", "/v3/lease/keepalive", b"{}") == (
                200, b'{"a":1}\n')
            assert await conn.request("DELETE", "/v1/leases/7") == (404, b"{}")
            # the server closed after its last answer: the next request reconnects, and a
            # connection closed mid-answer is an error naming the request
            with pytest.raises(HttpConnectionError, match="/again"):
                await conn.request("GET", "/again")
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()
        assert got[0].startswith(b"POST /v1/leases HTTP/1.1\r\n")
        assert got[0].endswith(b'Content-Length: 12\r\n\r\n{"ttl_ms":1}')
        assert got[2].startswith(b"DELETE /v1/leases/7 HTTP/1.1\r\n")

    asyncio.run(scenario())


def test_raw_http_sends_its_headers_with_every_request() -> None:
    async def scenario() -> None:
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        server, got = await _serve([ok, ok])
        port = server.sockets[0].getsockname()[1]
        conn = HttpConnection(f"http://127.0.0.1:{port}", {"Authorization": "Bearer t0k"})
        try:
            assert await conn.request("POST", "/v1/leases", b'{"ttl_ms":1}') == (200, b"{}")
            assert await conn.request("GET", "/v1/leases") == (200, b"{}")
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()
        assert all(b"\r\nAuthorization: Bearer t0k\r\n" in request for request in got)
        assert got[0].endswith(b'Content-Length: 12\r\n\r\n{"ttl_ms":1}')

    asyncio.run(scenario())
