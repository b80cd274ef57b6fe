"""Bad input to ``local``, ``node``, ``sim``, ``bench storage`` and the Spark application's
``--config``: one clear line naming the cause and the fix, exit status 2, no traceback, and
nothing written or started. Found by adversarial testing of every command (each case here was
a traceback, a hang, a silent misreading or a success reported for a failure)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import consecutive_free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraft_spark", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def refused(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert fragment in result.stderr, result.stderr


def test_local_refuses_a_port_another_process_listens_on(tmp_path: Path) -> None:
    """It used to take the other process's port for its node (it only connected to it),
    report the quorum as started, and wait for ever once its nodes had died."""
    base = consecutive_free_ports(3)
    with socket.socket() as other:
        other.bind(("127.0.0.1", base + 1))
        other.listen()
        result = cli("local", "--data-dir", str(tmp_path / "q"), "--base-port", str(base))
    refused(result, f"--base-port: cannot listen on 127.0.0.1:{base + 1} (Address already in use)")
    assert not (tmp_path / "q").exists()  # checked before anything was written


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--http-port", "99999"), "--http-port must be from 0 (any free port) to 65535"),
        (("--http-port", "-1"), "--http-port must be from 0"),
        (("--etcd-port", "0"), "--etcd-port serves etcd's API beside --http-port's address"),
        (("--no-node-http", "--etcd-base-port", "2400"), "--etcd-base-port needs the nodes' "
                                                         "HTTP API"),
        (("--data-dir-is-a-file",), "Not a directory"),
    ],
)
def test_local_bad_arguments(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    data_dir = tmp_path / "q"
    if args == ("--data-dir-is-a-file",):
        data_dir.write_text("")
        args = ()
    base = consecutive_free_ports(3)  # the three voters' ports
    result = cli("local", "--data-dir", str(data_dir), "--base-port", str(base), *args)
    refused(result, fragment)


def test_local_names_the_file_of_a_bad_cluster_id(tmp_path: Path) -> None:
    (tmp_path / "cluster.id").write_text("bad id!\n")
    base = consecutive_free_ports(3)
    result = cli("local", "--data-dir", str(tmp_path), "--base-port", str(base))
    refused(result, f"{tmp_path / 'cluster.id'}: invalid cluster id 'bad id!'")
    assert not (tmp_path / "node-0").exists()


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ("", "node.id is required"),
        ("node.id=99999999999", "node.id must be from 0 to 2147483647"),
        ("metrics.port=99999", "metrics.port must be a port number from 0 to 65535, got '99999'"),
        ("socket.request.max.bytes=-1", "socket.request.max.bytes must be a positive integer"),
        ("socket.request.max.bytes=abc", "socket.request.max.bytes must be a positive integer"),
    ],
)
def test_node_configuration_errors_name_the_key(
    tmp_path: Path, lines: str, fragment: str
) -> None:
    conf = tmp_path / "node.properties"
    base = "node.id=0\nlog.dirs=/nonexistent\ncontroller.quorum.voters=0@127.0.0.1:1\n"
    conf.write_text("" if not lines else base + lines + "\n")
    refused(cli("node", "--config", str(conf)), fragment)


def test_format_refuses_a_node_id_the_wire_cannot_carry(tmp_path: Path) -> None:
    result = cli("format", "--cluster-id", "abcdefghijklmnopqrstuv", "--node-id",
                 "99999999999999999999", "--log-dir", str(tmp_path / "n"))
    refused(result, "node id must be from 0 to 2147483647")
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--seed", "1", "--duration", "nan"), "--duration must be more than 0"),
        (("--seed", "1", "--duration", "-1"), "--duration must be more than 0"),
        (("--seeds", "0:99999999999999999999999"), "at most 1,000,000 seeds per run"),
        (("--seed", "1", "--observers", "1000000"), "--observers must be from 0 to 50"),
    ],
)
def test_sim_bad_arguments(args: tuple[str, ...], fragment: str) -> None:
    refused(cli("sim", *args), fragment)


def test_bench_storage_refuses_a_batch_it_cannot_build(tmp_path: Path) -> None:
    result = cli("bench", "storage", "--dir", str(tmp_path / "b"), "--records", "10",
                 "--value-bytes", "99999999999")
    refused(result, "bytes per batch: use fewer or smaller records per batch")


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_the_application_refuses_a_config_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    """A missing --config was silently replaced by the defaults; a directory gave a traceback."""
    path = tmp_path / "app.properties" if kind == "missing" else tmp_path
    result = subprocess.run([sys.executable, str(ROOT / "driver" / "app.py"), "--config",
                             str(path)], capture_output=True, text=True, timeout=60, check=False)
    refused(result, f"--config {path}: not a file")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--limit", "-1"), "--limit must be at least 1, got -1"),
        (("--as-of-offset", "-5"), "--as-of-offset must be 0 or more, got -5"),
        (("--as-of-offset", "3"), "--as-of-offset needs the cluster id"),
    ],
)
def test_sql_checks_its_arguments_before_starting_spark(
    tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    """And never creates a cluster id (it used to write one when asked for time travel)."""
    (tmp_path / "warehouse" / "records").mkdir(parents=True)
    refused(cli("sql", "SELECT 1", "--data-dir", str(tmp_path), *args), fragment)
    assert not (tmp_path / "cluster.id").exists()
