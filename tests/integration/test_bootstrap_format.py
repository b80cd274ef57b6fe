"""KIP-853's bootstrapping with real processes: ``format --standalone`` starts a one-voter
quorum that is dynamic from its first record; a node formatted with ``--no-initial-controllers``
follows it as an observer until ``add-controller`` makes it a voter; ``--initial-controllers``
writes the set and gives this node its listed directory id."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kraft_spark.log.meta import read_meta_properties
from kraft_spark.state.bootstrap_checkpoint import BOOTSTRAP_ID
from kraft_spark.state.snapshot_file import file_name
from tests.net.helpers import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
CLUSTER = "bootstrap-test"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraft_spark", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def node(tmp: Path, node_id: int, port: int, voters: str) -> tuple[subprocess.Popen[bytes], Path]:
    conf = tmp / f"node-{node_id}.properties"
    conf.write_text(f"node.id={node_id}\nlog.dirs={tmp / f'node-{node_id}'}\n"
                    f"listeners=CONTROLLER://127.0.0.1:{port}\n"
                    f"controller.quorum.voters={voters}\n"
                    "controller.quorum.election.timeout.ms=300\n"
                    "controller.quorum.fetch.timeout.ms=600\n"
                    "controller.quorum.request.timeout.ms=500\n"
                    "controller.quorum.fetch.max.wait.ms=200\n")
    out = open(tmp / f"node-{node_id}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "kraft_spark", "node", "--config", str(conf)],
                            stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return proc, conf


def test_standalone_then_a_second_controller_joins(tmp_path: Path) -> None:
    p1, p2 = free_ports(2)
    done = cli("format", "--cluster-id", CLUSTER, "--node-id", "1", "--log-dir",
               str(tmp_path / "node-1"), "--standalone", "--listener", f"127.0.0.1:{p1}")
    assert done.returncode == 0, done.stderr
    assert "Wrote the bootstrap checkpoint" in done.stdout
    assert (tmp_path / "node-1" / "__cluster_metadata-0" / file_name(BOOTSTRAP_ID)).exists()
    done = cli("format", "--cluster-id", CLUSTER, "--node-id", "2", "--log-dir",
               str(tmp_path / "node-2"), "--no-initial-controllers")
    assert done.returncode == 0 and "checkpoint" not in done.stdout, done.stdout + done.stderr
    procs = []
    try:
        first, _ = node(tmp_path, 1, p1, f"1@127.0.0.1:{p1}")
        second, conf2 = node(tmp_path, 2, p2, f"1@127.0.0.1:{p1}")
        procs = [first, second]
        boot = f"127.0.0.1:{p1}"
        deadline = time.monotonic() + 40
        while True:  # the standalone voter leads; its set is dynamic (it knows the directory)
            status = cli("metadata-quorum", "--bootstrap-controller", boot, "describe",
                         "--status", "--json")
            if status.returncode == 0:
                voters = json.loads(status.stdout)["currentVoters"]
                if voters and voters[0]["directoryId"]:
                    break
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(0.2)
        meta1 = read_meta_properties(str(tmp_path / "node-1"))
        assert meta1 is not None and voters == [
            {"id": 1, "directoryId": meta1.directory_id,
             "endpoints": [f"CONTROLLER://127.0.0.1:{p1}"]}]
        while True:
            added = cli("metadata-quorum", "--bootstrap-controller", boot,
                        "--command-config", str(conf2), "add-controller")
            if added.returncode == 0:
                break
            assert "REQUEST_TIMED_OUT" in added.stderr, added.stderr
            assert time.monotonic() < deadline, added.stderr
            time.sleep(0.2)
        status = cli("metadata-quorum", "--bootstrap-controller", boot, "describe", "--status",
                     "--json")
        assert [v["id"] for v in json.loads(status.stdout)["currentVoters"]] == [1, 2]
        appended = cli("append", "--bootstrap-controller", boot, "--key", "k", "--value", "v")
        assert appended.returncode == 0, appended.stderr
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def test_initial_controllers_give_this_node_its_listed_directory(tmp_path: Path) -> None:
    listed = "AAAAAAAAAAAAAAAAAAAABQ"
    done = cli("format", "--cluster-id", CLUSTER, "--node-id", "1", "--log-dir",
               str(tmp_path / "n1"), "--initial-controllers",
               f"1@127.0.0.1:9101:{listed},2@127.0.0.1:9102:AAAAAAAAAAAAAAAAAAAABg")
    assert done.returncode == 0, done.stderr
    meta = read_meta_properties(str(tmp_path / "n1"))
    assert meta is not None and meta.directory_id == listed
    bad = cli("format", "--cluster-id", CLUSTER, "--node-id", "3", "--log-dir",
              str(tmp_path / "n3"), "--initial-controllers", "1@127.0.0.1:9101")
    assert bad.returncode != 0 and "ID@HOST:PORT:DIRECTORY_ID" in bad.stderr
    alone = cli("format", "--cluster-id", CLUSTER, "--node-id", "4", "--log-dir",
                str(tmp_path / "n4"), "--standalone")
    assert alone.returncode != 0 and "--listener" in alone.stderr
