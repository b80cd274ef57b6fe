"""``kraft-spark bench etcd-load``'s own parts: reading etcd's benchmark tool's report (outputs
recorded from the real tool, ``tests/bench/data``), the command lines it gives the tool, the
medians and the report; and one real run of the tool, with tiny totals, against a one-member
etcd (the figures themselves come from the bench, never from timed assertions here)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import etcd_tool
from bench.etcd_load import (
    EtcdMembers,
    connections_for,
    measure,
    median_row,
    plan,
    report,
    seed,
)
from bench.etcd_tool import Cell, argv, parse_report, redacted
from kraft_spark.lincheck.go_build import go_binary

DATA = Path(__file__).resolve().parent / "data"


def test_the_report_of_a_real_put_run_is_read() -> None:
    # 100 puts by 4 clients on one connection, --precise (tests/bench/data)
    figures = parse_report((DATA / "etcd-benchmark-put.txt").read_text())
    assert figures == {"requests_per_s": 1356.9, "p50_ms": 1.568, "p99_ms": 11.936,
                       "p999_ms": None,  # 100 requests have no 99.9th percentile
                       "total_s": 0.074, "errors": {}}


def test_a_run_whose_every_request_failed_raises_with_etcds_message() -> None:
    # 3 puts of 2 MB values: etcd refuses each ("request is too large"), no summary is printed
    with pytest.raises(ValueError, match=r"every request failed: .*request is too large.*3"):
        parse_report((DATA / "etcd-benchmark-too-large.txt").read_text())
    with pytest.raises(ValueError, match="no report"):
        parse_report("Error: dial tcp 127.0.0.1:1: connect: connection refused\n")


def test_failed_requests_beside_a_summary_are_counted_by_message() -> None:
    text = ((DATA / "etcd-benchmark-put.txt").read_text()
            + "\nError distribution:\n  [2]\tetcdserver: request timed out\n"
              "  [1]\tetcdserver: leader changed\n")
    assert parse_report(text)["errors"] == {"etcdserver: request timed out": 2,
                                            "etcdserver: leader changed": 1}


def test_the_cells_follow_the_op_guides_shape() -> None:
    cells = plan(10_000)
    assert [(c.op, c.clients, c.conns) for c in cells] == [
        ("put", 1, 1), ("put", 16, 16), ("put", 256, 16),
        ("range", 1, 1), ("range", 16, 16), ("range", 256, 16)]
    assert connections_for(1) == 1 and connections_for(256) == 16
    assert cells[2].label == "put, 256 clients" and cells[3].label == "range, 1 client"


def test_the_tools_command_lines() -> None:
    endpoints = ["127.0.0.1:1", "127.0.0.1:2"]
    put = argv("/b", Cell("put", 16, 16, 500), endpoints, range_key="k", user="admin:s3cret")
    assert put == ["/b", "--endpoints", "127.0.0.1:1,127.0.0.1:2", "--target-leader",
                   "--conns", "16", "--clients", "16", "--precise", "--user", "admin:s3cret",
                   "put", "--key-size", "8", "--val-size", "256", "--sequential-keys",
                   "--key-space-size", "500", "--total", "500"]
    assert "s3cret" not in " ".join(redacted(put)) and "admin:***" in redacted(put)
    ranges = argv("/b", Cell("range", 1, 1, 20), endpoints, range_key="k")
    assert "--user" not in ranges
    assert ranges[-6:] == ["range", "k", "--consistency", "l", "--total", "20"]
    with pytest.raises(ValueError, match="unknown operation"):
        argv("/b", Cell("delete", 1, 1, 1), endpoints, range_key="k")


def _row(rps: float, p99: float, cpu: float, errors: dict[str, int] | None = None
         ) -> dict[str, Any]:
    return {"requests_per_s": rps, "p50_ms": p99 / 4, "p99_ms": p99, "cpu_ms_per_request": cpu,
            "leader_cpu_ms_per_request": cpu / 2, "tool_cpu_s": 1.0, "machine_busy_pct": 90.0,
            "others_cpu_s": 0.5, "window_s": 2.0, "errors": errors or {}}


def test_medians_over_rounds_and_the_report() -> None:
    kraft = [_row(900, 8.0, 1.0), _row(1100, 6.0, 0.8, {"x": 1}), _row(1000, 7.0, 0.9)]
    etcd = [_row(500, 4.0, 0.4), _row(480, 5.0, 0.5), _row(520, 3.0, 0.3)]
    median = median_row(kraft)
    assert median["requests_per_s"] == 1000 and median["p99_ms"] == 7.0
    assert median["cpu_ms_per_request"] == 0.9 and median["errors"] == 1
    results = {"machine": 2, "etcd_members": 3, "tool": "go.etcd.io/etcd/v3/tools/benchmark v3.6.8",
               "total": 10_000, "rounds": 3,
               "cells": [{"op": "range", "clients": 16, "conns": 16, "total": 10_000,
                          "systems": {"kraft-spark": {**median, "rounds": kraft},
                                      "etcd": {**median_row(etcd), "rounds": etcd}}}]}
    text = report(results)
    assert ("| range, 16 clients (linearizable) | 16 | 1,000 (1 errors) | 1.75 / 7.00 | "
            "0.900 (0.450) | 500 | 1.00 / 4.00 | 0.400 (0.200) | 2.00x |") in text
    assert "etcd (3 members) req/s" in text and "10,000 requests per cell, 3 round(s)" in text
    assert "met in 1 of 1 cells (ratios 2.00x to 2.00x)" in text
    assert "took 0.25-0.25 of the machine's" in text  # 0.5 s of 2 s, every round


# --------------------------------------------------------------------------- the real tool


@pytest.fixture(scope="module")
def tool() -> Path:
    if go_binary() is None or shutil.which("etcd") is None or shutil.which("etcdctl") is None:
        pytest.skip("needs go, etcd and etcdctl (`make bench` installs etcd and etcdctl)")
    binary, reason = etcd_tool.build()
    if binary is None:
        pytest.skip(reason or "etcd's benchmark tool cannot be built")
    return binary


@pytest.fixture(scope="module")
def one_etcd() -> Iterator[EtcdMembers]:
    with tempfile.TemporaryDirectory(prefix="etcd-load-test-") as tmp:
        etcd = EtcdMembers(tmp, 23460, members=1)
        try:
            yield etcd
        finally:
            etcd.stop()


@pytest.mark.integration
def test_the_real_tool_puts_and_reads_against_etcd(tool: Path, one_etcd: EtcdMembers) -> None:
    seed(one_etcd)
    said: list[str] = []
    put = measure(tool, one_etcd, Cell("put", 4, 2, 100), said.append)
    read = measure(tool, one_etcd, Cell("range", 4, 2, 100), said.append)
    for row in (put, read):
        assert row["errors"] == {} and row["ok"] == 100
        assert row["requests_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]
        assert row["cpu_ms_per_request"] is not None and row["server_cpu_s"] >= 0
    assert len(said) == 2 and "range, 4 clients" in said[1]
    # the puts wrote 100 keys of 8 bytes beside the seeded one
    from bench.systems import http_json

    _, body = http_json(one_etcd.cluster.client_urls[0] + "/v3/kv/range", "POST",
                        {"key": "AA==", "range_end": "AA==", "count_only": True})
    assert int(body["count"]) == 101
