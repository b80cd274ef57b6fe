"""Hostile input to ``append``, ``read`` and ``metadata-quorum``: bad ``--timeout`` values,
text that is not UTF-8, a reader of stdout that goes away, records too large for one batch,
and an endpoint that speaks HTTP. One ``kraft-spark local`` quorum serves the whole module."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft_spark.client import QuorumClient

from .harness import LocalQuorum, running
from .test_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NO_QUORUM = "127.0.0.1:1"  # for refusals that must come before any network I/O


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalQuorum]:
    with running(LocalQuorum(tmp_path_factory.mktemp("q"))) as q:
        yield q


@pytest.fixture(scope="module")
def client(quorum: LocalQuorum) -> Iterator[QuorumClient]:
    c = quorum.client(retry_budget_s=15.0)
    try:
        yield c
    finally:
        c.close()


def high_watermark(client: QuorumClient) -> int:
    return client.describe_quorum().high_watermark


def write_jsonl(path: Path, items: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def assert_one_line(out: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert out.returncode == code, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


def keys_from(client: QuorumClient, offset: int, count: int) -> list[bytes | None]:
    keys: list[bytes | None] = []
    while len(keys) < count:
        batch = client.read(offset, count - len(keys))
        assert batch, f"only {len(keys)} of {count} records from offset {offset}"
        keys += [r.key for r in batch]
        offset = batch[-1].offset + 1
    return keys


# ------------------------------------------------------------------------------ --timeout


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "soon"])
def test_timeout_must_be_finite_and_positive(value: str) -> None:
    # nan and inf used to retry forever; 0 and -1 sent the append, then reported a failure.
    timeout = f"--timeout={value}"  # "-inf" alone would read as an option
    for args in (["metadata-quorum", "--bootstrap-controller", NO_QUORUM, timeout,
                  "describe", "--status"],
                 ["append", "--bootstrap-controller", NO_QUORUM, timeout,
                  "--key", "k", "--value", "v"]):
        assert_one_line(cli(*args, timeout=20), 2, "--timeout", repr(value))


def test_small_positive_timeout_is_accepted(quorum: LocalQuorum) -> None:
    out = cli("read", "--bootstrap-controller", quorum.bootstrap[0], "--timeout", "5",
              "--limit", "1")
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------ UTF-8


def test_file_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"key": "a", "value": "ok"}\n{"key": "b", "value": "caf\xe9"}\n')
    out = cli("append", "--bootstrap-controller", NO_QUORUM, "--file", str(bad))
    assert_one_line(out, 2, f"{bad}: line 2 is not UTF-8 text", "0xe9")
    assert "Traceback" not in out.stderr


def test_lone_surrogate_escape_in_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "surrogate.jsonl"
    bad.write_text('{"key": "a", "value": "x"}\n{"key": "\\ud800", "value": "x"}\n')
    out = cli("append", "--bootstrap-controller", NO_QUORUM, "--file", str(bad))
    assert_one_line(out, 2, f"{bad}:2", "\\ud800", "not UTF-8")


def test_arguments_that_are_not_utf8_are_stored_as_given(
    quorum: LocalQuorum, client: QuorumClient
) -> None:
    # Python surrogate-escapes argv bytes that are not UTF-8; subprocess turns them back.
    out = cli("append", "--bootstrap-controller", quorum.bootstrap[0],
              "--key", "k\udcff", "--value", "v\udcfe", "--json")
    assert out.returncode == 0, out.stderr
    offset = json.loads(out.stdout)["offset"]
    [record] = client.read(offset, 1)
    assert (record.key, record.value) == (b"k\xff", b"v\xfe")


# ------------------------------------------------------------------------------ broken pipe


def first_line_then_close(*args: str) -> tuple[int, str, str]:
    """Run a command, read one line of its stdout and close the pipe (what ``| head -1``
    does); returns its exit code, that line and its stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "kraft_spark", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = proc.stdout.readline()
        proc.stdout.close()
        code = proc.wait(60)
        return code, line, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.fixture(scope="module")
def many(quorum: LocalQuorum, client: QuorumClient,
         tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int]:
    """3000 records appended while the reader of the acknowledgements left after the first:
    (offset before them, count). Their ~200 KB of acknowledgements overflow the pipe."""
    count = 3000
    path = write_jsonl(tmp_path_factory.mktemp("many") / "many.jsonl",
                       [{"key": f"pipe-{i:06d}", "value": "x"} for i in range(count)])
    before = high_watermark(client)
    code, line, err = first_line_then_close(
        "append", "--bootstrap-controller", quorum.bootstrap[0], "--file", str(path), "--json")
    assert (code, err) == (0, ""), err
    assert json.loads(line)["key"] == "pipe-000000"
    return before, count


def test_append_keeps_appending_after_stdout_closes(
    many: tuple[int, int], client: QuorumClient
) -> None:
    before, count = many
    keys = keys_from(client, before, count)
    assert keys == [f"pipe-{i:06d}".encode() for i in range(count)]


def test_read_stops_quietly_when_stdout_closes(
    quorum: LocalQuorum, many: tuple[int, int]
) -> None:
    code, line, err = first_line_then_close("read", "--bootstrap-controller",
                                            quorum.bootstrap[1], "--json")
    assert (code, err) == (0, ""), err
    assert json.loads(line)["offset"] >= 0


def test_describe_is_quiet_when_stdout_is_closed(quorum: LocalQuorum) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the command prints: its first write gets EPIPE
    try:
        out = subprocess.run([sys.executable, "-m", "kraft_spark", "metadata-quorum",
                              "--bootstrap-controller", quorum.bootstrap[0], "describe",
                              "--replication"],
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
                             check=False)
    finally:
        os.close(write_end)
    assert (out.returncode, out.stderr) == (0, "")


# ------------------------------------------------------------------------------ batch size


def test_file_is_split_by_size(tmp_path: Path, quorum: LocalQuorum) -> None:
    # 500 records of 3 KB: 1.5 MB, once refused whole by the leader's 1 MiB batch limit.
    path = write_jsonl(tmp_path / "wide.jsonl",
                       [{"key": f"wide-{i}", "value": "y" * 3000} for i in range(500)])
    out = cli("append", "--bootstrap-controller", quorum.bootstrap[2], "--file", str(path),
              "--json")
    assert out.returncode == 0, out.stderr
    acks = [json.loads(line) for line in out.stdout.splitlines()]
    assert [a["key"] for a in acks] == [f"wide-{i}" for i in range(500)]
    assert [a["offset"] for a in acks] == list(range(acks[0]["offset"], acks[0]["offset"] + 500))


def test_record_too_large_for_any_batch_is_refused_locally(
    tmp_path: Path, quorum: LocalQuorum, client: QuorumClient
) -> None:
    path = write_jsonl(tmp_path / "huge.jsonl", [
        {"key": "small-1", "value": "a"}, {"key": "small-2", "value": "b"},
        {"key": "huge", "value": "z" * (2 * 1024 * 1024)},
    ])
    before = high_watermark(client)
    out = cli("append", "--bootstrap-controller", quorum.bootstrap[0], "--file", str(path),
              timeout=10)
    assert_one_line(out, 2, f"{path}:3", "1048576")
    assert high_watermark(client) == before, "no record of a refused file may be appended"


# ------------------------------------------------------------------------------ HTTP endpoint


@contextlib.contextmanager
def http_server(split: bool = False) -> Iterator[str]:
    """A server answering anything with an HTTP 400, like uvicorn given Kafka bytes; ``split``:
    its first 3 bytes in a packet of their own."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    alive = True

    def serve() -> None:
        while alive:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
                    if split:
                        conn.sendall(reply[:3])
                        time.sleep(0.1)
                    conn.sendall(reply[3 if split else 0:])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        alive = False
        thread.join(5)
        server.close()


def test_http_endpoint_is_named_as_such() -> None:
    with http_server() as endpoint:
        out = cli("read", "--bootstrap-controller", endpoint, "--timeout", "1", timeout=30)
    assert_one_line(out, 2, f"{endpoint}: answered in HTTP", "--bootstrap-controller")
    assert "election" not in out.stderr


@pytest.mark.parametrize("split", [False, True])
def test_append_to_an_http_endpoint_fails_at_once(split: bool) -> None:
    """Not after its --timeout: an HTTP port will never take the append (it used to retry it
    as if an election were under way, for the whole timeout); also when the answer's first
    bytes arrive alone."""
    with http_server(split) as endpoint:
        out = cli("append", "--bootstrap-controller", endpoint, "--key", "k", "--value", "v",
                  "--timeout", "600", timeout=60)
    assert_one_line(out, 2, f"{endpoint}: answered in HTTP", "Raft listener")
    assert "may still commit" not in out.stderr  # nothing was appended: no doubt to report
