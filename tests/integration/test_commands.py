"""The command-line contracts (append, read, metadata-quorum) against ``kraft-spark local``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import LocalQuorum, free_ports, running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraft_spark", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_append_read_and_describe(tmp_path: Path) -> None:
    with running(LocalQuorum(tmp_path / "q")) as quorum:
        one = quorum.bootstrap[1]  # any single node will do
        out = cli("append", "--bootstrap-controller", one, "--key", "a", "--value", "hi",
                  "--json")
        assert out.returncode == 0, out.stderr
        first = json.loads(out.stdout)
        assert first["key"] == "a" and first["epoch"] >= 1
        lines = tmp_path / "in.jsonl"
        lines.write_text('{"key": "b", "value": {"n": 1}, "headers": {"h": "v"}}\n'
                         '{"key": "a", "value": null}\n')
        out = cli("append", "--bootstrap-controller", quorum.bootstrap[2], "--file", str(lines),
                  "--json")
        assert out.returncode == 0, out.stderr
        acks = [json.loads(line) for line in out.stdout.splitlines()]
        assert [a["key"] for a in acks] == ["b", "a"]
        assert acks[1]["offset"] == acks[0]["offset"] + 1 > first["offset"]

        out = cli("read", "--bootstrap-controller", quorum.bootstrap[0], "--from-offset",
                  str(first["offset"]), "--json")
        assert out.returncode == 0, out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
            (first["offset"], "a", "hi"),
            (acks[0]["offset"], "b", '{"n":1}'),
            (acks[1]["offset"], "a", None),
        ]
        assert rows[1]["headers"] == {"h": "v"} and rows[0]["timestamp"] > 0
        assert set(rows[0]) == {"offset", "epoch", "timestamp", "key", "value", "headers"}
        out = cli("read", "--bootstrap-controller", one, "--from-offset", "0", "--limit", "1",
                  "--json")
        assert len(out.stdout.splitlines()) == 1

        out = cli("metadata-quorum", "--bootstrap-controller", one, "describe", "--status",
                  "--json")
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        assert set(status) == {"clusterId", "leaderId", "leaderEpoch", "highWatermark",
                               "maxFollowerLag", "maxFollowerLagTimeMs", "currentVoters",
                               "currentObservers"}
        assert [v["id"] for v in status["currentVoters"]] == [0, 1, 2]
        assert status["highWatermark"] > acks[1]["offset"]
        assert status["clusterId"] == (tmp_path / "q" / "cluster.id").read_text().strip()
        out = cli("metadata-quorum", "--bootstrap-controller", one, "describe",
                  "--replication", "--json")
        rows = json.loads(out.stdout)
        assert [r["status"] for r in rows] == ["Leader", "Follower", "Follower"]
        assert set(rows[0]) == {"nodeId", "directoryId", "logEndOffset", "lag",
                                "lastFetchTimestamp", "lastCaughtUpTimestamp", "status"}
        text = cli("metadata-quorum", "--bootstrap-controller", one, "describe", "--status")
        assert text.stdout.splitlines()[0].startswith("ClusterId:")
        human = cli("metadata-quorum", "--bootstrap-controller", one, "describe",
                    "--replication", "--human-readable")
        assert "ms ago" in human.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["append", "--bootstrap-controller", "nonsense", "--key", "k", "--value", "v"],
        ["append", "--bootstrap-controller", "127.0.0.1:1", "--key", "k"],
        ["read", "--bootstrap-controller", "127.0.0.1:1", "--from-offset", "-3"],
        ["metadata-quorum", "--bootstrap-controller", "127.0.0.1:1", "describe"],
        ["append", "--bootstrap-controller", "127.0.0.1:1", "--file", "/nonexistent.jsonl"],
    ],
)
def test_bad_arguments_get_one_line(args: list[str]) -> None:
    out = cli(*args)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_unreachable_quorum_gets_one_line_after_bounded_retries() -> None:
    port = free_ports(1)[0]
    for args in (["append", "--key", "k", "--value", "v"], ["read"],
                 ["metadata-quorum", "describe", "--status"]):
        head, tail = args[:1], args[1:]
        if head == ["metadata-quorum"]:
            full = ["metadata-quorum", "--bootstrap-controller", f"127.0.0.1:{port}",
                    "--timeout", "1", *tail]
        else:
            full = [*head, "--bootstrap-controller", f"127.0.0.1:{port}", "--timeout", "1", *tail]
        out = cli(*full, timeout=30)
        assert out.returncode == 1, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "no leader" in out.stderr and "Traceback" not in out.stderr


def test_bad_file_line_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a", "value": 1}\n{"key": 5}\n')
    out = cli("append", "--bootstrap-controller", "127.0.0.1:1", "--file", str(bad))
    assert out.returncode == 2 and f"{bad}:2" in out.stderr
