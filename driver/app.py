"""The Spark application: voters in a barrier stage, an observer that materializes into Delta,
and the HTTP sidecar (docs/concepts/architecture.md, docs/concepts/delta-tables.md).

Run it with ``kraft-spark run`` (the project's launcher) or, from the repository's root,
``spark-submit --properties-file conf/spark-defaults.conf driver/app.py`` (the file names the
Delta jars; ``kraft_spark/spark_submit.py`` for what differs under spark-submit).

Threads of the driver process:

* **supervisor**: runs the barrier job ``parallelize(range(V), V).barrier().mapPartitions``
  (one voter per task) and relaunches it with backoff whenever it fails (one failed barrier task
  aborts the whole job, Spark's barrier rule), counting restarts;
* **control**: a TCP channel the voter tasks dial; each says hello (where it runs) and is told
  ``stop`` at shutdown; a dropped channel makes voters stop, so no voter outlives the driver;
* **observer**: a ``RaftNode`` that is not a voter (id 3000), on its own event loop, following
  the quorum; it is rebuilt whenever a new generation of voters reports new endpoints;
* **delta-warm-up**: right after Spark starts, in parallel with the voters' start-up, creates
  the tables and reads their offsets (``DeltaMaterializer.prepare``: most of Delta's class
  loading happens there, so the first records commit takes ~0.2 s instead of 5-10 s); the
  materializer threads wait for it (``start()`` too when ``delta_warm_up_wait_s`` > 0,
  ``kraft.delta.warmup.wait.ms``);
* **materializer** (``records``) and **materializer-full** (``quorum_events`` and ``snapshot``):
  read committed batches from the observer's log and write them into the Delta tables in
  micro-batches (``DeltaMaterializer``: exactly once, resumable). ``records`` is committed every
  ``materialize_interval_s`` while there is something new (a commit takes ~0.1 s: no Spark job),
  on its own thread, so the slower MERGE of ``snapshot`` never holds it up; the other two tables
  follow every ``materialize_full_interval_s``, and that thread also checkpoints ``records``;
* **sidecar**: uvicorn serving the HTTP API; its client bootstraps from the observer, which
  names the voters' current endpoints, so relaunched voters are found again.

SIGINT/SIGTERM: the voters are told to stop (a leader resigns), the barrier job returns, the
materializer writes everything committed, the sidecar stops, Spark stops, exit code 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from driver.announce import announce
from driver.config import AppConfig, parse_args, voter_affinity
from driver.console import failure_of, progress
from driver.control import ControlChannel
from driver.cpu_priority import lower_process_threads, lower_this_thread
from driver.etcd_endpoint import start_etcd_front
from driver.membership import VoterMembershipMixin
from driver.observer_bootstrap import bootstrap_if_needed, hold_observer_log
from driver.observer_store import ObserverStore, read_committed
from driver.placement import driver_host, is_local_master, load_hosts, save_hosts, voter_stage
from driver.security import check_voter_listeners, http_credentials, quorum_auth
from driver.sql_server import (
    choose_port,
    connect_conf,
    register_tables,
    server_token,
    token_for_the_jvm,
)
from driver.table_upkeep import (
    FULL_CYCLE_MAX_SHARE,
    FULL_CYCLE_MAX_SHARE_RS,
    TableUpkeep,
    full_cycle_wait,
)
from driver.warehouse_open import open_warehouse
from kraft_spark import aio, app_endpoint
from kraft_spark.http_auth import Credentials
from kraft_spark.metrics import AppMetrics, Registry
from kraft_spark.net.tls_bundle import TlsBundle
from kraft_spark.quorum_auth import QuorumAuth, listener_fields
from kraft_spark.secret_files import private_dir
from kraft_spark.sql_endpoint import publish, url_of, withdraw
from kraft_spark.stop_signals import StopSignals
from kraft_spark.warehouse.location import is_uri

log = logging.getLogger("kraft_spark.driver")

OBSERVER_ID = 3000
# The observer fetches at most every 50 ms (QuorumConfig.observer_fetch_interval_ms: a Delta
# table written every 0.5 s needs no Fetch per commit); a user's setting of the key wins.
OBSERVER_PACING = "kraft.quorum.observer.fetch.interval.ms"
OBSERVER_FETCH_INTERVAL_MS = 50




# ------------------------------------------------------------------------------ the application


class Application(VoterMembershipMixin):
    def __init__(self, config: AppConfig) -> None:
        self.config = config
        self.registry = Registry()
        self.app_metrics = AppMetrics(self.registry)
        self.stopping = threading.Event()
        self.restarts = 0
        self.generation = 0
        self.cluster_id = ""
        self.spark: Any = None
        self.control: ControlChannel | None = None
        # uvloop, as in every kraft-spark process (kraft_spark/aio.py)
        self._observer_loop = aio.new_event_loop()
        self._observer_thread = threading.Thread(target=self._observer_loop.run_forever,
                                                 name="observer-loop", daemon=True)
        self.observer_store = ObserverStore(self._observer_loop, lambda: self.cluster_id,
                                            lambda: self.client_security)
        self._observer: Any = None
        self._observer_voters: dict[int, tuple[str, int]] = {}
        self._hw = 0
        self._materialized = 0  # every table holds the log below this (observer retention)
        self._hw_event = threading.Event()
        self._sidecar: Any = None
        self._front: Any = None  # the user's HTTP address (kraft_spark/proxy/front.py)
        self._etcd_front: Any = None  # and etcd's beside it (driver/etcd_endpoint.py)
        self._job_done = threading.Event()
        self._supervisor: threading.Thread | None = None  # stop() waits for it once started
        self._delta: Any = None  # the DeltaMaterializer, shared by the two materializer threads
        self._delta_ready = threading.Event()
        self._reconcile_lock = threading.Lock()
        self._follow_lock = threading.Lock()
        # KIP-853: how many voter tasks the barrier stage hosts (--voters, or a live resize)
        self.target_voters = config.voters
        self._resizing = threading.Event()
        self._tasks: dict[int, Any] = {}  # the current generation's hellos
        # Why the application cannot go on (the warehouse belongs to another cluster): main()
        # stops it and exits 1. Only set once, before anything was materialized.
        self.fatal: str | None = None
        self.first_commit_s: float | None = None
        self.started_at = time.monotonic()
        self.sql_port = 0  # the Spark Connect server's (driver/sql_server.py); 0: none
        # The HTTP API's tokens (kraft_spark.http_auth), for the sidecar and every voter's API.
        self.http_credentials: Credentials | None = None
        self.http_credentials_path: str | None = None
        # The listeners' SASL credentials (kraft_spark.quorum_auth); None: no authentication.
        self.quorum_auth: QuorumAuth | None = None
        self._upkeep = TableUpkeep(self)  # checkpoints, compaction, Raft snapshot copies
        self.reset_observer = False  # after a restore: the observer's old log is dropped
        self.released_generation = -1  # the newest generation whose fresh voters were told
        self.new_cluster = False  # no cluster id anywhere at start-up: nothing to restore

    # ---------------------------------------------------------------- start-up

    def start(self) -> None:
        from kraft_spark.spark_session import build_spark
        from kraft_spark.spark_submit import choose_master, submitted_conf, under_spark_submit

        cfg = self.config
        private_dir(cfg.data_dir)  # a first start: ./data does not exist yet (owner-only)
        if not is_uri(cfg.warehouse):
            private_dir(cfg.warehouse)
            # A local warehouse is checked before anything else is written or started: one of
            # another cluster is refused in a second, not after the JVM's start-up.
            self.cluster_id, self.new_cluster = open_warehouse(cfg.data_dir, cfg.warehouse, None)
        self.http_credentials_path, self.http_credentials = http_credentials(cfg)
        self.quorum_auth = quorum_auth(cfg)
        # Room for growing to 5 voters live (resize) plus the Delta jobs; task slots are
        # threads of the one local JVM, not cores. Under spark-submit, its --master.
        master = choose_master(cfg.master, submitted_conf(), cfg.voters)
        check_voter_listeners(master, cfg)
        progress(f"starting Spark ({master}) with Delta; " + (
            "in the JVM spark-submit started" if under_spark_submit()
            else "first start resolves Delta's jars"))
        self.sql_port = choose_port(cfg.sql_host, cfg.sql_port)
        sql_token = server_token()
        with token_for_the_jvm(sql_token) as token_conf:
            self.spark = build_spark(
                "kraft-spark", master=master, warehouse_dir=_catalog_dir(cfg),
                extra_conf={"spark.dynamicAllocation.enabled": "false",
                            "spark.task.maxFailures": "1",
                            **connect_conf(cfg.sql_host, self.sql_port), **token_conf},
            )
        if self.sql_port:
            publish(cfg.data_dir, url_of(cfg.sql_host, self.sql_port), sql_token)
        if is_uri(cfg.warehouse):  # reached through Spark's Hadoop file systems
            self.cluster_id, self.new_cluster = open_warehouse(cfg.data_dir, cfg.warehouse,
                                                               self.spark)
        from kraft_spark.delta import DeltaMaterializer

        self._delta = DeltaMaterializer(self.spark, cfg.warehouse, app_id=self.cluster_id,
                                        on_commit=self._on_table_commit)
        threading.Thread(target=self._warm_up_delta, name="delta-warm-up", daemon=True).start()
        self.control = ControlChannel(driver_host(master, self.spark))
        self._observer_thread.start()
        self._supervisor = threading.Thread(target=self._supervise, name="supervisor",
                                            daemon=True)
        self._supervisor.start()
        voters = self.control.wait_generation(0, cfg.voters, 300)
        if not voters:
            raise RuntimeError("the voters did not start within 300 s; see the Spark log")
        if not self._release(voters):
            raise RuntimeError(str(self.fatal))
        # The JVM behind the voters, now that its pyspark daemon (their parent) is forked.
        lower_process_threads(int(self.spark.sparkContext._jvm.java.lang.ProcessHandle
                                  .current().pid()))
        self._follow(voters)
        from kraft_spark.delta.tables import QUORUM_EVENTS, RECORDS, SNAPSHOT

        threading.Thread(target=self._materialize_loop, args=((RECORDS,), True),
                         name="materializer", daemon=True).start()
        threading.Thread(target=self._materialize_loop, args=((QUORUM_EVENTS, SNAPSHOT), False),
                         name="materializer-full", daemon=True).start()
        from api.limits import HttpLimits
        from driver.resize_api import resize_router
        from kraft_spark.commands.sidecar import start_sidecar
        from kraft_spark.raft.config import QuorumConfig

        # The observer first, then the voters: the sidecar's client asks them who leads while
        # an append waits on a leader that froze (kraft_spark/client/leader_watch.py).
        bootstrap = [f"127.0.0.1:{self._observer.port}"]
        bootstrap += [f"{v['host']}:{v['port']}" for v in voters.values()]
        # The full API on a loopback port; the user's address is the router in front of it
        # (kraft_spark/proxy/front.py), which sends appends straight to the leader's own API.
        self._sidecar = start_sidecar(bootstrap, "127.0.0.1", 0,
                                      cluster_id=self.cluster_id,
                                      credentials=self.http_credentials,
                                      registry=self.registry,
                                      limits=HttpLimits(cfg.http_max_connections,
                                                        cfg.http_header_timeout_s),
                                      quorum=QuorumConfig.from_properties(
                                          cfg.quorum_properties),
                                      routers=[resize_router(self.resize)],
                                      http_urls=self.voter_http_urls,
                                      store=self.observer_store.loop_store,
                                      security=self.client_security)
        from kraft_spark.proxy.front import HttpFront

        self._front = HttpFront(cfg.http_host, cfg.http_port, self._sidecar.port,
                                max_connections=cfg.http_max_connections,
                                header_timeout_s=cfg.http_header_timeout_s,
                                leader_url=self._leader_http_url)
        self._etcd_front = start_etcd_front(self)
        if cfg.delta_warm_up_wait_s > 0 and not self._delta_ready.wait(cfg.delta_warm_up_wait_s):
            progress(f"Delta is not warm after {cfg.delta_warm_up_wait_s:.0f} s; serving anyway")

    # ---------------------------------------------------------------- supervisor

    def _supervise(self) -> None:
        from executors.voter import VoterSettings, voter_task

        cfg = self.config
        backoff = cfg.restart_backoff_s
        assert self.control is not None
        while not self.stopping.is_set():
            settings = VoterSettings(
                cluster_id=self.cluster_id, voters=self.target_voters,
                log_root=cfg.log_root if "$" in cfg.log_root else os.path.abspath(cfg.log_root),
                control_host=self.control.host,
                control_port=self.control.port, generation=self.generation,
                base_port=cfg.voter_base_port,
                bind_host="127.0.0.1" if is_local_master(self.spark) else "",
                quorum_properties=cfg.quorum_properties,
                inline_flush_max_ms=cfg.inline_flush_max_ms,
                log_preallocate=cfg.log_preallocate,
                known_directory_ids=self._known_directory_ids(),
                static_voters=self._static_voters(),
                http_base_port=cfg.voter_http_base_port, http_credentials=self.http_credentials,
                etcd_base_port=cfg.voter_etcd_base_port,
                http_max_connections=cfg.http_max_connections,
                http_header_timeout_ms=int(cfg.http_header_timeout_s * 1000),
                cpu_affinity=voter_affinity(cfg, local_master=is_local_master(self.spark)),
                sasl=self.quorum_sasl,
                tls=TlsBundle.read(cfg.tls) if cfg.tls is not None else None,
            )
            sc = self.spark.sparkContext
            sc.setJobGroup("kraft-spark-voters", f"voters generation {self.generation}")
            started = time.monotonic()
            try:
                count = self.target_voters
                hosts = {} if is_local_master(self.spark) else load_hosts(cfg.data_dir)
                rows = voter_stage(sc, count, hosts, voter_task(settings)).collect()
                for row in rows:
                    log.info("voter finished: %s", row)
                if self.stopping.is_set():
                    break
                reason = "the barrier job returned while the application runs"
            except Exception as exc:
                reason = failure_of(exc)
            if self.stopping.is_set():
                break
            if self._resizing.is_set():  # a resize stopped the voters: relaunch at once
                self._resizing.clear()
                self.generation += 1
                progress(f"voters: generation {self.generation} with {self.target_voters} "
                         "tasks")
                threading.Thread(target=self._refollow, args=(self.generation,), daemon=True,
                                 name="refollow").start()
                continue
            self.restarts += 1
            self.app_metrics.barrier_stage_restarts.inc()
            if time.monotonic() - started > 60:
                backoff = cfg.restart_backoff_s
            progress(f"voter stage failed ({reason}); relaunch #{self.restarts} in "
                     f"{backoff:.1f} s")
            self.stopping.wait(backoff)
            backoff = min(cfg.restart_backoff_max_s, backoff * 2)
            self.generation += 1
            threading.Thread(target=self._refollow, args=(self.generation,), daemon=True,
                             name="refollow").start()
        self._job_done.set()

    def _refollow(self, generation: int) -> None:
        assert self.control is not None
        voters = self.control.wait_generation(generation, self.target_voters, 300)
        if voters and not self.stopping.is_set() and self._release(voters):
            self._follow(voters)

    def _leader_http_url(self) -> str | None:
        """The HTTP API of the leader the observer knows, if its voter serves one."""
        observer = self._observer
        leader = observer.core.known_leader() if observer is not None else -1
        return self.voter_http_urls().get(leader) if leader >= 0 else None

    def voter_http_urls(self) -> dict[int, str]:
        """The HTTP API each voter of the running generation serves (kraft.voter.http.base.port)."""
        return {v: str(h["http"]) for v, h in sorted(self._tasks.items()) if h.get("http")}

    def _release(self, voters: dict[int, Any]) -> bool:
        """Start the generation's fresh voters, from the warehouse if no voter has a log
        (driver/quorum_restore.py); False (and ``fatal`` set) when they cannot start."""
        from driver.quorum_restore import CannotStart, release_voters

        try:
            release_voters(self, voters)
        except CannotStart as exc:
            self.fatal = str(exc)
            progress(f"cannot start the voters: {exc}")
            return False
        return True

    # ---------------------------------------------------------------- observer

    def _follow(self, voters: dict[int, Any]) -> None:
        """(Re)start the observer with the voters' current endpoints; then bring the voter set
        to the tasks (KIP-853) in the background. One generation at a time: refollow threads
        of relaunches in quick succession may both get here."""
        with self._follow_lock:
            self._follow_locked(voters)

    def _follow_locked(self, voters: dict[int, Any]) -> None:
        self._save_directory_ids(voters)
        save_hosts(self.config.data_dir, voters)
        self._tasks = voters
        threading.Thread(target=self._reconcile_voters, args=(voters,), daemon=True,
                         name="voter-reconcile").start()
        endpoints = {v: (str(h["host"]), int(h["port"])) for v, h in voters.items()}
        if endpoints == self._observer_voters and not self.reset_observer:
            return
        fut = asyncio.run_coroutine_threadsafe(self._restart_observer(endpoints),
                                               self._observer_loop)
        fut.result(120)

    async def _restart_observer(self, voters: dict[int, tuple[str, int]]) -> None:
        from kraft_spark.log.meta import format_log_dir
        from kraft_spark.net.config import NodeConfig
        from kraft_spark.net.node import RaftNode
        from kraft_spark.raft.config import QuorumConfig
        from kraft_spark.state.policy import SnapshotConfig

        port = self.config.observer_port
        if self._observer is not None:
            port = self._observer.port  # keep the sidecar's bootstrap address
            await self.observer_store.detach()
            await self._observer.stop(graceful=False)
        log_dir = os.path.join(self.config.data_dir, f"observer-{OBSERVER_ID}")
        if self.reset_observer:  # the quorum was rebuilt from the warehouse: a new log
            shutil.rmtree(log_dir, ignore_errors=True)
            self.reset_observer = False
        format_log_dir(log_dir, cluster_id=self.cluster_id, node_id=OBSERVER_ID,
                       ignore_formatted=True)
        props = {OBSERVER_PACING: str(OBSERVER_FETCH_INTERVAL_MS),
                 **self.config.quorum_properties}
        node = RaftNode(NodeConfig(OBSERVER_ID, log_dir, "127.0.0.1", port, voters,
                                   QuorumConfig.from_properties(props),
                                   log_preallocate=self.config.log_preallocate,
                                   snapshots=SnapshotConfig.from_properties(props),
                                   **listener_fields(self.quorum_sasl, self.config.tls)))
        await node.start()
        hold_observer_log(node, lambda: self._materialized)
        node.add_commit_listener(self._on_commit)
        await self.observer_store.attach(node, voters)
        self._observer = node
        self._observer_voters = voters
        log.info("observer %d follows voters %s", OBSERVER_ID, voters)

    def _catch_up_observer(self, timeout_s: float = 10.0) -> None:
        """Before the voters stop: wait until the observer knows the leader's high watermark
        of now. The observer learns it a fetch after the voters do, and a leader that resigns
        first would leave the last acknowledged appends out of the final materialization."""
        observer = self._observer
        if observer is None or not self._observer_voters:
            return
        from kraft_spark.client import QuorumClient

        deadline = time.monotonic() + timeout_s
        bootstrap = [f"{host}:{port}" for host, port in self._observer_voters.values()]
        try:
            client = QuorumClient(bootstrap, cluster_id=self.cluster_id, request_timeout_s=2.0,
                                  retry_budget_s=timeout_s / 2,
                                  **self.client_security.client_kwargs())
            try:
                target = client.describe_quorum().high_watermark
            finally:
                client.close()
        except Exception as exc:  # no leader: nothing more will commit anyway
            log.warning("stopping without the leader's high watermark: %s", exc)
            return
        while observer.high_watermark < target and time.monotonic() < deadline:
            time.sleep(0.02)
        if observer.high_watermark < target:
            log.warning("the observer is at high watermark %d, the leader at %d",
                        observer.high_watermark, target)

    def _on_commit(self, hw: int) -> None:
        self._hw = hw
        if self.first_commit_s is None and hw > 0:
            self.first_commit_s = time.monotonic() - self.started_at
        self._hw_event.set()

    # ---------------------------------------------------------------- materializer

    def _warm_up_delta(self) -> None:
        """While the voters start: create the tables and read their offsets. A warehouse
        delta-rs opens (a local path, S3, GCS, ADLS, HDFS): by delta-rs, ~0.1 s locally
        (through Spark it was 6.5-12.4 s of Delta's class loading, and 6.6 CPU-s of the
        driver's JVM). A URI only Spark opens: through Spark, cold, so the first records commit
        takes ~0.2 s instead of 5-10 s, after appends rehearsed on scratch tables (their first
        run costs another 6-9 s)."""
        started = time.monotonic()
        try:
            if not self._delta.in_process:
                self._delta.warm_up()
            offsets = self._delta.prepare()
            if self.sql_port:
                register_tables(self.spark, self.config.warehouse)
            for table, offset in offsets.items():
                self.app_metrics.delta_table_offset.labels(table).set(offset)
            progress(f"Delta ready in {time.monotonic() - started:.1f} s; tables at offsets "
                     f"{offsets}")
        except Exception as exc:  # the materializer threads retry on their own
            if not self._is_fatal(exc):
                log.exception("Delta warm-up failed")
        finally:
            self._delta_ready.set()

    def _on_table_commit(self, commit: Any) -> None:
        """After each table's Delta commit (a ``TableCommit``), from its materializer thread."""
        self.app_metrics.delta_commits.labels(commit.table).inc()
        self.app_metrics.delta_table_offset.labels(commit.table).set(commit.last_offset + 1)

    def _is_fatal(self, exc: BaseException) -> bool:
        """True (and ``fatal`` set) for errors no retry can mend: tables of another cluster."""
        from kraft_spark.delta import MaterializerError
        from kraft_spark.delta.materializer import ResumeMismatch

        if not isinstance(exc, MaterializerError) or isinstance(exc, ResumeMismatch):
            return False
        if self.fatal is None:
            self.fatal = str(exc)
            progress(f"cannot materialize: {exc}")
        return True

    def _materialize_loop(self, tables: tuple[str, ...], eager: bool) -> None:
        """Commit ``tables`` from the observer's log: ``eager`` (records) once per
        ``materialize_interval_s`` while something new is committed, else every
        ``materialize_full_interval_s``. Returns once the voters have stopped and everything
        committed is materialized."""
        from kraft_spark.delta.tables import RECORDS

        cfg = self.config
        materializer = self._delta
        lower_this_thread()  # behind the voters on a shared machine (driver/cpu_priority.py)
        self._delta_ready.wait()
        resume = -1  # read from the tables in the loop (and again after any failure)
        last_cycle = 0.0
        full_wait = cfg.materialize_full_interval_s
        while self.fatal is None:
            final = self._job_done.is_set()
            if eager:
                self._hw_event.wait(cfg.materialize_interval_s)
                # At most one records commit per interval: each commit is a Delta version and a
                # data file, and a commit takes ~0.1 s, so back-to-back commits would make ten
                # small files a second for little gain in visibility.
                pause = last_cycle + cfg.materialize_interval_s - time.monotonic()
                if pause > 0 and not final:
                    self._job_done.wait(pause)
                self._hw_event.clear()
                last_cycle = time.monotonic()
            elif not final:
                self._job_done.wait(full_wait)
            started = time.monotonic()
            try:
                if resume < 0:
                    resume = materializer.resume_offset(tables)
                    if eager:
                        progress(f"materializing from offset {resume} into {cfg.warehouse}")
                if bootstrap_if_needed(self._observer, self._observer_loop, materializer,
                                       resume, progress):
                    resume = materializer.resume_offset(tables)
                fut: Future[tuple[list[Any], int, dict[int, Any], dict[int, Any]]] = (
                    asyncio.run_coroutine_threadsafe(
                        read_committed(self._observer, resume, cfg.materialize_max_records),
                        self._observer_loop))
                batches, hw, failed_txns, deleted = fut.result(60)
                if batches:
                    hw_cover = max(b.next_offset for b in batches)
                    materializer.write(batches, max(hw, hw_cover), tables, failed_txns, deleted)
                    stats = materializer.last_commit_stats
                    if stats is not None:
                        log.info("materialized %s up to %d (hw %d): rows %s, seconds %s",
                                 "/".join(tables), stats.end_offset, stats.high_watermark,
                                 stats.rows, {k: round(v, 2) for k, v in stats.seconds.items()})
                if not eager:
                    cycle_s = time.monotonic() - started  # the commits: sets the pace
                    self._upkeep.maintain(materializer)
                    full_wait = full_cycle_wait(
                        cfg.materialize_full_interval_s, cycle_s,
                        FULL_CYCLE_MAX_SHARE_RS if materializer.in_process
                        else FULL_CYCLE_MAX_SHARE)
                    if full_wait > cfg.materialize_full_interval_s:
                        log.info("quorum_events/snapshot cycle took %.1f s; next in %.1f s",
                                 cycle_s, full_wait)
                resume = materializer.resume_offset(tables)
                self._materialized = materializer.resume_offset()
                if RECORDS in tables:
                    lag = max(0, self._hw - materializer.table_offsets()[RECORDS])
                    self.app_metrics.materialization_lag_offsets.set(lag)
            except Exception as exc:
                if self._is_fatal(exc):
                    return
                log.exception("materialization of %s failed; retrying from the Delta tables",
                              "/".join(tables))
                time.sleep(1)
                resume = -1
                continue
            if final and resume >= self._hw:
                progress(f"materialized everything committed into {'/'.join(tables)} "
                         f"(up to offset {resume})")
                return

    # ---------------------------------------------------------------- shutdown

    def stop(self) -> None:
        progress("stopping: voters resign and stop, then the last commits are materialized"
                 if self._supervisor is not None else "stopping (nothing was started)")
        self.stopping.set()
        self._catch_up_observer()
        if self.control is not None:
            self.control.stop_voters()
        if self._supervisor is not None:  # a start that failed before it has no job to wait for
            self._job_done.wait(60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(
            t.name in ("materializer", "materializer-full") and t.is_alive()
            for t in threading.enumerate()
        ):
            time.sleep(0.2)
        for front in (f for f in (self._etcd_front, self._front) if f is not None):
            front.stop()
        if self._sidecar is not None:
            self._sidecar.stop()
        if self._observer is not None:
            asyncio.run_coroutine_threadsafe(self.observer_store.detach(),
                                             self._observer_loop).result(30)
            asyncio.run_coroutine_threadsafe(self._observer.stop(graceful=False),
                                             self._observer_loop).result(30)
        # Ended as asyncio.run ends a loop: what is left is cancelled, the loop closed (a
        # start that failed early never ran it).
        if self._observer_thread.ident is None:
            self._observer_loop.close()
        else:
            aio.stop_thread_loop(self._observer_loop, self._observer_thread)
        if self.control is not None:
            self.control.close()
        withdraw(self.config.data_dir)
        if self.spark is not None:
            app_endpoint.withdraw(self.config.warehouse, self.spark)
            self.spark.stop()
        progress("stopped")


def _catalog_dir(cfg: AppConfig) -> str:
    """spark.sql.warehouse.dir (managed tables; ours are path-based): the warehouse when it is
    a path, else a local directory, so that a warehouse URI Spark cannot reach is reported by
    our start-up check (driver/warehouse_open.py) rather than as the session's failure."""
    from kraft_spark.warehouse.location import is_uri

    return os.path.join(cfg.data_dir, "spark-warehouse") if is_uri(cfg.warehouse) else (
        cfg.warehouse)


# ------------------------------------------------------------------------------ entry point


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = parse_args(argv)
    app = Application(cfg)
    stop = StopSignals()
    try:
        app.start()
    except Exception as exc:
        progress(f"failed to start: {exc}")
        app.stop()
        return 1
    # After start: SparkContext installs its own SIGINT handler (cancel jobs, raise
    # KeyboardInterrupt), which would skip the graceful stop.
    stop.install()
    from kraft_spark.spark_submit import forward_jvm_signals

    forward_jvm_signals()  # under spark-submit: its JVM's SIGINT/SIGTERM come here
    http_url, etcd = announce(app)
    progress(f"running: HTTP API at {http_url}{etcd}, Delta tables under {cfg.warehouse}; "
             "Ctrl-C to stop")
    while not stop.wait(1.0) and app.fatal is None:
        pass
    app.stop()
    if app.fatal is not None:
        progress(f"stopped: {app.fatal}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
