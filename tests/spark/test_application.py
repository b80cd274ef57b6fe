"""The Spark application end to end in local mode: HTTP appends → voters in a barrier stage →
observer → Delta tables; a restart produces no duplicates and no gaps."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.functions import struct, to_json

from bench.processes import stop_group
from kraft_spark.client import ClientError, QuorumClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.http_auth import Scope, token_in
from kraft_spark.quorum_auth import ADMIN_PROPERTIES, USERS_FILE
from tests.integration.harness import consecutive_free_ports, free_ports
from tests.integration.http_guard import assert_every_route_guarded, call, routes
from tests.net.helpers import make_certs

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


class App:
    """``kraft-spark run`` in its own process. ``sql``: with the Spark Connect server (and the
    tables named in its catalog), which costs the driver ~7 CPU-s at start: only the tests that
    query through it ask for it."""

    def __init__(self, data_dir: Path, http_port: int, voter_base: int,
                 extra: tuple[str, ...] = (), props: str = "", *, sql: bool = False) -> None:
        self.data_dir = data_dir
        conf = data_dir / "app.properties"
        conf.write_text(f"kraft.voter.base.port={voter_base}\n"
                        "kraft.voter.http.base.port=0\n"
                        "controller.quorum.fetch.timeout.ms=1000\n"
                        "controller.quorum.election.timeout.ms=500\n"
                        f"kraft.materialize.interval.ms=300\n{props}")
        self.log = open(data_dir / "app.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft_spark", "run", "--data-dir", str(data_dir),
             "--http-port", str(http_port), "--config", str(conf),
             "--sql-port", str(free_ports(1)[0]) if sql else "0", *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            # Close what this object holds before failing: a leaked pipe or log file would
            # surface as an unraisable ResourceWarning in whichever test runs next.
            code = self.proc.wait(60)
            self.proc.stdout.close()
            self.log.close()
            tail = (data_dir / "app.log").read_text(errors="replace").splitlines()[-40:]
            raise AssertionError(f"the application exited ({code}) before it was ready; "
                                 "the end of its log:\n" + "\n".join(tail))
        self.info: dict[str, Any] = json.loads(line)
        self.url = self.info["http"]
        # The credentials the application created in its data directory (by default every
        # HTTP call needs a token); none when the test configured its own token.
        path = self.info.get("credentials")
        self.auth = ({"Authorization": f"Bearer {token_in(path, Scope.ADMIN)}"}
                     if path else {})

    def post(self, body: Any) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/v1/records", json.dumps(body).encode(),
                                         {"Content-Type": "application/json", **self.auth},
                                         method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    def get(self, path: str) -> urllib.request.Request:
        return urllib.request.Request(f"{self.url}{path}", headers=self.auth)

    def records(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.get("/v1/records?from_offset=0&limit=1000"),
                                    timeout=60) as response:
            rows: list[dict[str, Any]] = json.loads(response.read())["records"]
            return rows

    def stop(self) -> int:
        code = stop_group(self.proc, 120)  # SIGTERM to the driver only, as a user's kill does
        self.log.close()
        return code


def _tls_properties(directory: Path) -> str:
    directory.mkdir()
    node, _ = make_certs(directory)
    Path(node.keyfile).chmod(0o600)
    return (f"ssl.certificate.location={node.certfile}\nssl.key.location={node.keyfile}\n"
            f"ssl.ca.location={node.cafile}\n")


def _check_voter_listeners(app: App, voter_base: int) -> None:
    """Nobody without the TLS certificate and the SASL credentials gets in (here: mutual TLS
    refuses the handshake); the administrator's client settings (``command_config``:
    SASL_SSL with the driver's PEM files) do."""
    bootstrap = [f"127.0.0.1:{voter_base + i}" for i in range(3)]
    with pytest.raises(ClientError), QuorumClient(bootstrap, retry_budget_s=3.0) as anonymous:
        anonymous.describe_quorum()
    security = ClientSecurity.from_file(app.info["command_config"])
    assert security.ssl_context is not None and security.sasl is not None
    with QuorumClient(bootstrap, retry_budget_s=30.0, **security.client_kwargs()) as admin:
        assert sorted(v.replica_id for v in admin.describe_quorum().voters) == [0, 1, 2]
    # The voters run mutual TLS with the shipped files, written owner-only beside their logs.
    assert stat.S_IMODE((app.data_dir / "voters" / "tls" / "node.key").stat().st_mode) == 0o600


def _wait_materialized(spark: Any, warehouse: str, count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            n = spark.read.format("delta").load(f"{warehouse}/records").count()
        except Exception:  # the table may not exist yet
            n = -1
        if n >= count:
            return
        assert time.monotonic() < deadline, f"only {n} of {count} records materialized"
        time.sleep(0.5)


def _replay(records: list[dict[str, Any]]) -> dict[str, str | None]:
    state: dict[str, str | None] = {}
    for r in records:
        if r["value"] is None:
            state.pop(r["key"], None)
        else:
            state[r["key"]] = json.dumps(r["value"], separators=(",", ":"))
    return state


def _check_tables(spark: Any, warehouse: str, log: list[dict[str, Any]]) -> None:
    """The three tables equal the committed log and its replay (the tables are committed one
    after another, so wait for the last of them first)."""
    expected = _replay(log)
    deadline = time.monotonic() + 60
    while True:
        snap = spark.read.format("delta").load(f"{warehouse}/snapshot").collect()
        if {r["key"]: r["value"] for r in snap} == expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    rows = spark.read.format("delta").load(f"{warehouse}/records").orderBy("offset").collect()
    assert [(r["offset"], r["key"]) for r in rows] == [(x["offset"], x["key"]) for x in log]
    assert len({r["offset"] for r in rows}) == len(rows)  # no duplicates
    assert {r["key"]: r["value"] for r in snap} == expected
    # etcd's view of each key, by its definition (plain writes: a write's revision is its
    # offset); the second run's commits replayed on the rows the first run wrote.
    views: dict[str, tuple[int, int, int, int]] = {}
    for x in log:
        old = views.pop(x["key"], None)
        if x["value"] is not None:
            views[x["key"]] = (old[0] if old else x["offset"], x["offset"],
                               old[2] + 1 if old else 1, 0)
    assert {r["key"]: (r["create_revision"], r["mod_revision"], r["version"], r["lease"])
            for r in snap} == views
    assert all(r["revision"] == r["offset"] for r in rows)
    events = spark.read.format("delta").load(f"{warehouse}/quorum_events").collect()
    assert events and all(e["leader_id"] in (0, 1, 2) for e in events)


def test_local_mode_end_to_end_and_restart(tmp_path: Path, spark: Any) -> None:
    """With mutual TLS on the voters' and the observer's listeners (SASL_SSL: the driver's
    PEM files shipped to the executors): the default SASL_PLAINTEXT runs in the other tests."""
    http_port = free_ports(1)[0]
    voter_base = consecutive_free_ports(3)
    tls = _tls_properties(tmp_path / "certs")
    app = App(tmp_path, http_port, voter_base, props=tls)
    cluster_id = app.info["cluster_id"]
    try:
        assert app.post({"key": "a", "value": {"v": 1}})["epoch"] >= 1
        # Every route of the application's endpoint and of each voter's own API refuses no
        # token, a wrong one and one of too small a scope (its resize route included), and
        # nothing changes.
        tokens = {scope: token_in(app.info["credentials"], scope) for scope in Scope}
        before = app.records()
        for base in (app.url, *app.info["voter_http"].values()):
            tried = assert_every_route_guarded(base, tokens)
            assert ("POST", "/v1/records") in tried
        assert ("POST", "/v1/app/voters") in routes(app.url, tokens[Scope.ADMIN])
        assert len(app.info["voter_http"]) == 3
        assert app.records() == before
        app.post({"records": [{"key": "b", "value": "two"}, {"key": "a", "value": [1, 2]}]})
        app.post({"key": "b", "value": None})  # a delete
        app.post({"records": [{"key": f"k{i}", "value": i} for i in range(20)]})
    finally:
        assert app.stop() == 0
    warehouse = app.info["warehouse"]
    # SIGTERM materialized everything committed before the exit.
    spark.catalog.clearCache()
    _wait_materialized(spark, warehouse, 24, timeout_s=5)

    app = App(tmp_path, http_port, voter_base, props=tls, sql=True)  # same data dir: resume
    try:
        app.post({"records": [{"key": "a", "value": None}, {"key": "c", "value": 3}]})
        log = app.records()
        assert len(log) == 26
        _wait_materialized(spark, warehouse, 26)
        _check_tables(spark, warehouse, log)
        # Each table's materialized offset on /metrics: everything committed, and the last
        # committed offset is the last record's (the LeaderChange records come first).
        with urllib.request.urlopen(app.get("/metrics"), timeout=60) as response:
            metrics = response.read().decode()
        offsets = {
            m.group(1): float(m.group(2))
            for m in re.finditer(r'kraft_spark_delta_table_offset\{table="(\w+)"\} (\S+)', metrics)
        }
        assert offsets["records"] == log[-1]["offset"] + 1
        assert set(offsets) == {"records", "snapshot", "quorum_events"}
        assert re.search(r'kraft_spark_delta_commits_total\{table="records"\} [1-9]', metrics)
        # `kraft-spark sql` goes through the running application's Spark Connect server.
        assert app.info["sql"] == (tmp_path / "sql.endpoint").read_text().strip()
        query = subprocess.run(
            [sys.executable, "-m", "kraft_spark", "sql", "--data-dir", str(tmp_path),
             # The lease views are there too (none granted: nothing excluded).
             "SELECT count(*) AS n FROM records WHERE `offset` NOT IN "
             "(SELECT granted_offset FROM leases)"],
            capture_output=True, text=True, timeout=120, check=False)
        assert query.returncode == 0, query.stderr[-2000:]
        sql_port = app.info["sql"].rpartition(":")[2]  # the token goes to localhost only
        assert f"through the running application at sc://localhost:{sql_port}" in query.stderr
        assert "|26 |" in query.stdout, query.stdout
        # The server requires its token: kept owner-only, and a client without it is refused.
        token_file = tmp_path / "sql.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        intruder = subprocess.run(
            [sys.executable, "-c", "from pyspark.sql import SparkSession; SparkSession.builder"
             f".remote('sc://localhost:{sql_port}').getOrCreate().sql('SHOW TABLES').collect()"],
            capture_output=True, text=True, timeout=120, check=False)
        assert intruder.returncode != 0
        assert "UNAUTHENTICATED" in intruder.stderr, intruder.stderr[-2000:]
        # The voters' Kafka-protocol listeners take no request without the quorum's
        # credentials (SASL/PLAIN); the administrator's client settings get in.
        _check_voter_listeners(app, voter_base)
        # No secret (the SQL token, the HTTP tokens, the quorum's password) in the log, the
        # voters' logs, the warehouse's files or any row of the Delta tables.
        users = tmp_path / USERS_FILE
        assert stat.S_IMODE(users.stat().st_mode) == 0o600
        secrets = [token_file.read_text().strip(), users.read_text().split()[1], *(
            line.split()[1] for line in (tmp_path / "http-credentials").read_text().splitlines()
            if line and not line.startswith("#"))]
        holders = ("sql.token", "http-credentials", USERS_FILE, ADMIN_PROPERTIES)
        texts = [p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*")
                 if p.is_file() and p.name not in holders
                 and p.stat().st_size < 1_000_000]  # not the (preallocated) log segments
        for table in ("records", "snapshot", "quorum_events"):
            rows = spark.read.format("delta").load(f"{warehouse}/{table}")
            texts += [str(r[0]) for r in rows.select(to_json(struct("*"))).collect()]
        for path in ("/v1/quorum", "/metrics", "/openapi.json"):  # nor in what it answers
            texts.append(json.dumps(call(f"{app.url}{path}", token=tokens[Scope.READ])[1]))
        assert not [s for s in secrets if any(s in text for text in texts)]
        # Nor on any process's command line, which every user of the host can read with ps
        # (pyspark puts every Spark setting on the java command line it launches).
        assert not [s for s in secrets if any(s in line for line in command_lines())]
    finally:
        assert app.stop() == 0
    assert not (tmp_path / "sql.endpoint").exists()  # withdrawn at the stop
    assert not (tmp_path / "sql.token").exists()

    # Every disk of the quorum gone (the voters', the observer's, the driver's data directory)
    # but the warehouse kept: the application adopts the warehouse's cluster id and rebuilds
    # the quorum from it (issue 24); nothing acknowledged is lost and appends go on after it.
    for entry in tmp_path.iterdir():
        if entry.name not in ("warehouse", "app.properties", "app.log", "certs"):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    app = App(tmp_path, http_port, voter_base, props=tls)
    try:
        assert app.info["cluster_id"] == cluster_id
        added = app.post({"key": "d", "value": 4})
        assert added["base_offset"] > log[-1]["offset"]  # the log goes on after the restored end
        restored = _restored_state(tmp_path / "voters" / "node-0")
        expected = {k.encode(): v.encode() for k, v in _replay(log).items() if v is not None}
        assert restored == expected
        _wait_materialized(spark, warehouse, 27)
        rows = spark.read.format("delta").load(f"{warehouse}/records").orderBy("offset").collect()
        assert [r["offset"] for r in rows] == [x["offset"] for x in log] + [added["base_offset"]]
        events = spark.read.format("delta").load(f"{warehouse}/quorum_events")
        marks = events.where("restored_from IS NOT NULL").collect()
        assert len(marks) == 1 and marks[0]["voters"] == [0, 1, 2], marks
        assert "records offsets 0.." in marks[0]["restored_from"]
    finally:
        assert app.stop() == 0
    output = (tmp_path / "app.log").read_text(errors="replace")
    assert "rebuilding the quorum from the warehouse" in output, output[-3000:]

    # A data directory of another cluster with this warehouse: refused before anything is
    # written or started (no Spark: the three starts above are the log's only ones), exit 1,
    # naming both clusters.
    (tmp_path / "cluster.id").write_text("another0cluster0id0xyz\n")
    with pytest.raises(AssertionError, match=r"exited \(1\) before it was ready"):
        App(tmp_path, http_port, voter_base)
    output = (tmp_path / "app.log").read_text(errors="replace")
    assert f"belongs to cluster {cluster_id}" in output, output[-3000:]
    assert output.count("starting Spark") == 3, output[-3000:]
    assert spark.read.format("delta").load(f"{warehouse}/records").count() == 27


def _restored_state(log_dir: Path) -> dict[bytes, bytes]:
    """The key-value state of the snapshot a voter was restored from (its oldest)."""
    from kraft_spark.state.snapshot_file import decode_snapshot, parse_name

    pdir = log_dir / "__cluster_metadata-0"
    ids = sorted(filter(None, (parse_name(p.name) for p in pdir.iterdir())))
    assert ids, f"no snapshot in {pdir}"
    content = decode_snapshot((pdir / _name(ids[0])).read_bytes(), ids[0], str(pdir))
    return {k: e.value for k, e in content.entries}


def _name(snapshot_id: Any) -> str:
    from kraft_spark.state.snapshot_file import file_name

    return file_name(snapshot_id)


def _voter_hellos(log_path: Path) -> dict[int, dict[str, str]]:
    """The newest hello of each voter, from the driver's log."""
    pattern = re.compile(r"voter (\d+) of generation (\d+) runs on (\S+) \(executor "
                         r"jvm-pid-(\d+), pid (\d+)\)")
    out: dict[int, dict[str, str]] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        m = pattern.search(line)
        if m:
            out[int(m[1])] = {"generation": m[2], "endpoint": m[3], "jvm": m[4], "pid": m[5]}
    return out


def _quorum(app: App) -> dict[str, Any]:
    with urllib.request.urlopen(app.get("/v1/quorum"), timeout=30) as response:
        info: dict[str, Any] = json.loads(response.read())
        return info


def test_killing_the_leaders_executor_relaunches_the_voters(tmp_path: Path, spark: Any) -> None:
    """local-cluster: one voter per 1-core executor, plus a spare slot for the Delta writes."""
    data_dir = tmp_path
    try:
        app = App(data_dir, free_ports(1)[0], consecutive_free_ports(3),
                  ("--master", "local-cluster[4,1,1024]"),
                  # executors' voters listen on every interface: allowed on this test host
                  props="kraft.listener.plaintext.allowed=true\n")
    except AssertionError as first:
        # Four executor JVMs of 1 GiB starting at once on 2 cores is the heaviest start of the
        # suite; it once exited at start-up in CI with nothing to show for it. One more start
        # on fresh ports and a fresh directory, the first failure printed (its log's end).
        print(f"first start failed, starting again: {first}", file=sys.stderr)
        data_dir = tmp_path / "again"
        data_dir.mkdir()
        app = App(data_dir, free_ports(1)[0], consecutive_free_ports(3),
                  ("--master", "local-cluster[4,1,1024]"),
                  # executors' voters listen on every interface: allowed on this test host
                  props="kraft.listener.plaintext.allowed=true\n")
    acked: dict[str, int] = {}
    errors: list[str] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            key = f"w{i}"
            i += 1
            try:
                acked[key] = app.post({"key": key, "value": i})["base_offset"]
            except (OSError, ValueError) as exc:  # 503/504 while the voters relaunch
                errors.append(str(exc))
                time.sleep(0.2)

    loader = threading.Thread(target=load, daemon=True)
    try:
        loader.start()
        deadline = time.monotonic() + 60
        while len(acked) < 50:
            assert time.monotonic() < deadline, f"no steady load: {errors[-3:]}"
            time.sleep(0.1)
        before = _quorum(app)
        hellos = _voter_hellos(data_dir / "app.log")
        executors = {h["jvm"] for h in hellos.values()}
        assert len(executors) == 3, f"voters share executors: {hellos}"
        victim = int(hellos[before["leaderId"]]["jvm"])
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        # The barrier job aborts; the supervisor relaunches every voter (a new generation).
        deadline = time.monotonic() + 240
        while not all(int(h["generation"]) >= 1
                      for h in _voter_hellos(data_dir / "app.log").values()):
            assert time.monotonic() < deadline, "the voters were not relaunched"
            time.sleep(0.2)
        relaunched_at = time.monotonic()
        count = len(acked)
        while len(acked) < count + 50:
            assert time.monotonic() < deadline, f"no commits after relaunch: {errors[-3:]}"
            time.sleep(0.1)
        print(f"\n[figure] executor kill -> new generation running: "
              f"{relaunched_at - killed_at:.1f} s; -> 50 more commits: "
              f"{time.monotonic() - killed_at:.1f} s")
        after = _quorum(app)
        assert after["leaderEpoch"] > before["leaderEpoch"]
    finally:
        stop.set()
        loader.join(60)
        code = app.stop()
    assert code == 0
    rows = spark.read.format("delta").load(f"{app.info['warehouse']}/records").collect()
    where: dict[str, list[int]] = {}
    for r in rows:
        where.setdefault(r["key"], []).append(r["offset"])
    for key, offset in acked.items():
        assert where.get(key) == [offset], f"{key} acked at {offset}, Delta has {where.get(key)}"


def test_an_unwritable_voter_log_directory_stops_the_start_with_the_fix(tmp_path: Path) -> None:
    """The voters report it; the application exits 1 naming voter, host and setting. (An
    unreachable warehouse URI: tests/spark/test_restore.py, with the shared session.)"""
    (tmp_path / "a-file").write_text("a file where a directory should be")
    with pytest.raises(AssertionError, match=r"exited \(1\) before it was ready"):
        App(tmp_path, free_ports(1)[0], consecutive_free_ports(3),
            extra=("--voter-log-dir", f"{tmp_path}/a-file/voters"))
    output = (tmp_path / "app.log").read_text(errors="replace")
    assert re.search(r"failed to start: voter \d on .*: cannot use its log directory under "
                     r".*a-file/voters .*set kraft.voter.log.dir to a writable local directory "
                     r"on every executor host", output), output[-3000:]


def command_lines() -> list[str]:
    """Every process's command line, as ``ps`` shows it to any user."""
    lines = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone meanwhile
            continue
    return lines
