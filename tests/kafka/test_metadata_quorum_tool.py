"""Kafka 4.x's own ``kafka-metadata-quorum.sh`` (MetadataQuorumCommand, from Maven Central)
against a running kraft-spark quorum: ApiVersions, DescribeCluster (KIP-919), DescribeQuorum v2,
AddRaftVoter and RemoveRaftVoter (KIP-853); with ``--bootstrap-server`` also Metadata v13."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.commands.client_cmds import COMMAND_CONFIG_ENV
from tests.integration.harness import LocalQuorum, Observer, running
from tests.kafka.kafka_dist import KafkaUnavailable, ToolRun, run_kafka_tool

pytestmark = [pytest.mark.kafka, pytest.mark.integration, pytest.mark.timeout(900)]
TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


def kafka_quorum(bootstrap: str, *args: str, flag: str = "--bootstrap-controller") -> ToolRun:
    """Kafka's tool, as the quorum's administrator (the client properties ``running()``
    names in ``KRAFT_SPARK_COMMAND_CONFIG``) unless ``args`` name another file."""
    admin = os.environ.get(COMMAND_CONFIG_ENV)
    if admin and "--command-config" not in args:
        args = ("--command-config", admin, *args)
    try:
        return run_kafka_tool(TOOL, [flag, bootstrap, *args])
    except KafkaUnavailable as exc:
        pytest.skip(f"Kafka's tools are not available: {exc}")


def ours(bootstrap: str, *args: str, flag: str = "--bootstrap-controller") -> str:
    done = subprocess.run([sys.executable, "-m", "kraft_spark", "metadata-quorum",
                           flag, bootstrap, *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kafkas_tool_describes_grows_and_shrinks_our_quorum(tmp_path: Path) -> None:
    quorum = LocalQuorum(tmp_path / "data")
    observer: Observer | None = None
    with running(quorum):
        boot = quorum.bootstrap[1]  # any node: the tool finds the leader (DescribeCluster)
        for _ in range(100):  # until every voter has fetched (the leader knows its directory)
            summary = json.loads(ours(boot, "describe", "--status", "--json"))
            if all(v["directoryId"] for v in summary["currentVoters"]):
                break
        status = kafka_quorum(boot, "describe", "--status")
        assert status.returncode == 0, status.stderr[-2000:]
        # Kafka's voter and observer lines hold what ours hold; Kafka 4.4 keeps the leader's
        # order (the leader first), ours sorts by id: compared as sets of parsed entries.
        fields = _status_fields(status.stdout)
        assert len(fields["CurrentVoters"]) == 3, status.stdout
        assert fields == _status_fields(ours(boot, "describe", "--status"))
        assert '"endpoints": ["CONTROLLER://127.0.0.1:' in status.stdout
        replication = kafka_quorum(boot, "describe", "--replication")
        assert replication.returncode == 0, replication.stderr[-2000:]
        rows = [line.split() for line in replication.stdout.strip().splitlines()[1:]]
        assert sorted(r[-1] for r in rows) == ["Follower", "Follower", "Leader"]

        observer = Observer(quorum, 3)
        try:
            for _ in range(30):  # refused (REQUEST_TIMED_OUT) until the observer caught up
                added = kafka_quorum(boot, "--command-config", str(observer.config),
                                     "add-controller")
                if added.returncode == 0:
                    break
            assert added.returncode == 0, added.stderr[-2000:]
            assert added.stdout.startswith("Added controller 3 with directory id ")
            voters = json.loads(ours(boot, "describe", "--status", "--json"))["currentVoters"]
            assert [v["id"] for v in voters] == [0, 1, 2, 3]
            # Misuse gets Kafka's error: the same controller again is a duplicate voter.
            again = kafka_quorum(boot, "--command-config", str(observer.config),
                                 "add-controller")
            assert again.returncode != 0 and "DuplicateVoterException" in again.stderr
            directory = next(v["directoryId"] for v in voters if v["id"] == 3)
            removed = kafka_quorum(boot, "remove-controller", "--controller-id", "3",
                                   f"--controller-directory-id={directory}")
            assert removed.returncode == 0, removed.stderr[-2000:]
            assert removed.stdout.startswith(f"Removed KRaft controller 3 with directory id "
                                             f"{directory}")
            voters = json.loads(ours(boot, "describe", "--status", "--json"))["currentVoters"]
            assert [v["id"] for v in voters] == [0, 1, 2]
        finally:
            observer.stop()


def _status_fields(text: str) -> dict[str, Any]:
    """``describe --status`` lines that do not move while the quorum idles (the lag fields
    and the high watermark may), voters and observers as sorted lists of their entries."""
    fields: dict[str, Any] = {}
    for line in text.strip().splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key in ("CurrentVoters", "CurrentObservers"):
            fields[key] = sorted(json.dumps(e, sort_keys=True) for e in json.loads(value))
        elif key in ("ClusterId", "LeaderId", "LeaderEpoch"):
            fields[key] = value
    return fields


def test_kafkas_tool_with_bootstrap_server_sees_what_bootstrap_controller_sees(
    tmp_path: Path,
) -> None:
    """``--bootstrap-server`` goes ApiVersions, Metadata (to learn the brokers: we list the
    leader), then DescribeCluster (EndpointType 1, for --status) and DescribeQuorum to the
    leader; the answers must match those ``--bootstrap-controller`` gets."""
    quorum = LocalQuorum(tmp_path / "data")
    with running(quorum):
        for _ in range(100):  # until every voter has fetched (the leader knows its directory)
            summary = json.loads(ours(quorum.bootstrap[0], "describe", "--status", "--json"))
            if all(v["directoryId"] for v in summary["currentVoters"]):
                break
        # A node that is not the leader: the tool must be sent on to the leader.
        boot = next(str(n["endpoint"]) for n in quorum.nodes
                    if n["node_id"] != summary["leaderId"])
        by_controller = kafka_quorum(boot, "describe", "--status")
        by_server = kafka_quorum(boot, "describe", "--status", flag="--bootstrap-server")
        assert by_controller.returncode == 0, by_controller.stderr[-2000:]
        assert by_server.returncode == 0, by_server.stderr[-2000:]
        expected = _status_fields(by_controller.stdout)
        assert expected["LeaderId"] == str(summary["leaderId"])
        assert len(expected["CurrentVoters"]) == 3
        assert _status_fields(by_server.stdout) == expected

        def replicas(run: ToolRun) -> list[tuple[str, str, str]]:
            assert run.returncode == 0, run.stderr[-2000:]
            rows = [line.split() for line in run.stdout.strip().splitlines()[1:]]
            return sorted((r[0], r[1], r[-1]) for r in rows)  # NodeId, DirectoryId, Status

        server_rows = replicas(kafka_quorum(boot, "describe", "--replication",
                                           flag="--bootstrap-server"))
        assert server_rows == replicas(kafka_quorum(boot, "describe", "--replication"))
        assert [r[2] for r in server_rows].count("Leader") == 1
        assert (str(summary["leaderId"]), "Leader") in [(r[0], r[2]) for r in server_rows]
        # Ours takes Kafka's flag too, with the same meaning.
        mine = json.loads(ours(boot, "describe", "--status", "--json",
                               flag="--bootstrap-server"))
        assert (mine["leaderId"], mine["currentVoters"]) == (
            summary["leaderId"], summary["currentVoters"])
