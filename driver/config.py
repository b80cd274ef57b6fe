"""The Spark application's configuration: ``AppConfig``, read from a properties file
(``kraft.*`` keys, the quorum's ``controller.quorum.*`` and the KIP-630 ``metadata.*``) and
the command line."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kraft_spark.config_keys import APP_KEYS, NODE_KEYS, QUORUM_KEYS, check_known
from kraft_spark.net.config import (
    DEFAULT_HTTP_HEADER_TIMEOUT_MS,
    DEFAULT_HTTP_MAX_CONNECTIONS,
    parse_boolean,
)
from kraft_spark.net.cpu_placement import AFFINITY_CHOICES
from kraft_spark.tls_config import TlsConfig

log = logging.getLogger("kraft_spark.driver")


@dataclass
class AppConfig:
    data_dir: str = "data"
    voters: int = 3
    master: str = ""
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    http_token: str | None = None
    # The HTTP API's scoped tokens (kraft_spark.http_auth); unset: <data-dir>/http-credentials,
    # created on a first start. http_insecure: no authentication at all (loud in the log).
    http_credentials_file: str | None = None
    http_insecure: bool = False
    # The voters' Kafka-protocol listeners are plaintext; beyond one host (any master but
    # local[N]) they listen on every interface, which must be allowed explicitly.
    listener_plaintext_allowed: bool = False
    # The listeners take SASL/PLAIN with <data-dir>/quorum-users (kraft_spark.quorum_auth);
    # true: no authentication at all (loud in the log).
    listener_insecure: bool = False
    # ssl.certificate.location / ssl.key.location / ssl.ca.location (PEM files on the driver's
    # host, as for `kraft-spark node`): the voters and the observer listen with mutual TLS
    # (SASL over it), the files shipped to the executors in the voter task.
    tls: TlsConfig | None = None
    # The Spark Connect server for `kraft-spark sql` (driver/sql_server.py); port 0: none.
    sql_host: str = "127.0.0.1"
    sql_port: int = 15002
    # The sidecar's connection cap and header timeout (api.limits)
    http_max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS
    http_header_timeout_s: float = DEFAULT_HTTP_HEADER_TIMEOUT_MS / 1000
    voter_base_port: int = 9093
    # Voter i serves the HTTP API itself on this + i (0: any free port, -1: not at all); the
    # leader's is the fastest path for appends, and GET /v1/quorum names it (leaderHttpUrl)
    voter_http_base_port: int = 8081
    # Voter i serves etcd's v3 gRPC API beside its HTTP API on this + i (0: any free port, -1:
    # not at all; none either without the voter's HTTP API), and the application's own etcd
    # address, a front that forwards every call to a voter (kraft_spark/etcd_front), listens
    # on kraft.http.host:etcd_port (0: any free port, -1: none).
    voter_etcd_base_port: int = 0
    etcd_port: int = 0
    # kraft.cpu.affinity of the voters (none or role, as for `kraft-spark node`); unset: role
    # when Spark's master is local (every voter on this machine), none on a cluster. With the
    # driver's JVM quiet (delta-rs commits), role measured 1,207-1,321 appends/s at one
    # connection against 1,082-1,179 with none (wrk to the leader, 8 windows each; with the
    # JVM busy it had been no better: 668-865 against 755-867/s)
    cpu_affinity: str = ""
    observer_port: int = 0
    # records is committed once per interval while there is something new (at most)
    materialize_interval_s: float = 0.5
    # snapshot (MERGE) and quorum_events are committed at most this often (on their own thread),
    # and less often when their cycle is slow (full_cycle_wait): with delta-rs's MERGE (a local
    # warehouse) a cycle is tens of ms, with Spark's it is seconds and stretches the wait
    materialize_full_interval_s: float = 1.0
    # > 0: start() returns (the application reports itself running) only once the Delta tables
    # are ready, waiting at most this long. 0 (default): serve at once; records committed before
    # then wait for the tables (measured: p99 commit -> visible 2.5 s instead of 1.1 s in
    # `kraft-spark bench app`, launch -> first commit ~10 s shorter on 2 busy cores)
    delta_warm_up_wait_s: float = 0.0
    materialize_max_records: int = 50_000
    # OPTIMIZE a table once it holds this many data files (every records commit adds one);
    # 0: never (DeltaMaterializer.compact)
    compact_min_files: int = 100
    # the voters' kraft.log.flush.inline.max.ms (NodeConfig.inline_flush_max_ms)
    inline_flush_max_ms: float = 2.0
    # the voters' and the observer's kraft.log.preallocate (NodeConfig.log_preallocate)
    log_preallocate: bool = True
    restart_backoff_s: float = 1.0
    restart_backoff_max_s: float = 30.0
    quorum_properties: dict[str, str] = field(default_factory=dict)
    # kraft.warehouse.uri: where the Delta tables (and the Raft snapshots kept beside them,
    # ``_raft_snapshots``) live, shared storage on a real cluster; "": <data-dir>/warehouse
    warehouse_uri: str = ""
    # kraft.voter.log.dir: each voter's log, a local directory of the executor's host
    # (environment variables are expanded there); "": <data-dir>/voters
    voter_log_dir: str = ""

    @property
    def warehouse(self) -> str:
        from kraft_spark.warehouse.location import normalize_warehouse

        if self.warehouse_uri:
            return normalize_warehouse(self.warehouse_uri)
        return os.path.join(self.data_dir, "warehouse")

    @property
    def log_root(self) -> str:
        return self.voter_log_dir or os.path.join(self.data_dir, "voters")


# The application's own keys: property -> (AppConfig field, type, lowest value allowed).
_APP_KEYS: dict[str, tuple[str, type, float | None]] = {
    "kraft.data.dir": ("data_dir", str, None),
    "kraft.voters": ("voters", int, 1),
    "kraft.http.host": ("http_host", str, None),
    "kraft.http.port": ("http_port", int, 0),
    "kraft.http.token": ("http_token", str, None),
    "kraft.http.credentials.file": ("http_credentials_file", str, None),
    "kraft.http.insecure": ("http_insecure", bool, None),
    "kraft.listener.plaintext.allowed": ("listener_plaintext_allowed", bool, None),
    "kraft.listener.insecure": ("listener_insecure", bool, None),
    "kraft.sql.host": ("sql_host", str, None),
    "kraft.sql.port": ("sql_port", int, 0),
    "kraft.http.max.connections": ("http_max_connections", int, 1),
    "kraft.http.header.timeout.ms": ("http_header_timeout_s", float, 1),
    "kraft.voter.base.port": ("voter_base_port", int, 0),
    "kraft.voter.http.base.port": ("voter_http_base_port", int, -1),
    "kraft.voter.etcd.base.port": ("voter_etcd_base_port", int, -1),
    "kraft.etcd.port": ("etcd_port", int, -1),
    "kraft.cpu.affinity": ("cpu_affinity", str, None),
    "kraft.materialize.interval.ms": ("materialize_interval_s", float, 0),
    "kraft.materialize.snapshot.interval.ms": ("materialize_full_interval_s", float, 0),
    "kraft.delta.warmup.wait.ms": ("delta_warm_up_wait_s", float, 0),
    "kraft.delta.compact.min.files": ("compact_min_files", int, 0),
    "kraft.log.flush.inline.max.ms": ("inline_flush_max_ms", float, 0),
    "kraft.log.preallocate": ("log_preallocate", bool, None),
    "kraft.warehouse.uri": ("warehouse_uri", str, None),
    "kraft.voter.log.dir": ("voter_log_dir", str, None),
}
# Keys of `kraft-spark node` alone, which may share the file: accepted, not used here.
_NODE_ONLY_KEYS = NODE_KEYS - APP_KEYS


def config_from_properties(props: dict[str, str]) -> AppConfig:
    """The application's configuration from a properties file's entries (empty values are
    unset). Raises ValueError naming the key for a malformed value or an unknown ``kraft.*`` key
    (a typo would otherwise be silently ignored)."""
    from kraft_spark.raft.config import QuorumConfig
    from kraft_spark.state.policy import SnapshotConfig

    check_known(props)
    quorum = {k: v for k, v in props.items()
              if v and ((k.startswith("controller.quorum.") and k != "controller.quorum.voters")
                        or k in QUORUM_KEYS or k.startswith("metadata."))}
    QuorumConfig.from_properties(quorum)  # ConfigError (a ValueError) names the key
    SnapshotConfig.from_properties(quorum)  # the KIP-630 keys, passed to every node
    cfg = AppConfig(quorum_properties=quorum, tls=TlsConfig.from_properties(props))
    for key, raw in props.items():
        if key in _NODE_ONLY_KEYS and raw:
            log.warning("%s applies to `kraft-spark node` only; the application ignores it", key)
        if key not in _APP_KEYS or not raw:
            continue  # the quorum's (above), the node's, or unset
        attr, kind, lowest = _APP_KEYS[key]
        if kind is bool:
            flag: Any = parse_boolean(key, raw, default=getattr(cfg, attr))
            cfg = replace(cfg, **{attr: flag})
            continue
        try:
            value: Any = kind(raw)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise ValueError(f"{key} must be {noun}, got {raw!r}") from None
        if lowest is not None and value < lowest:
            raise ValueError(f"{key} must be ≥ {lowest:g}, got {raw!r}")
        if key.endswith(".ms") and attr.endswith("_s"):
            value = value / 1000
        cfg = replace(cfg, **{attr: value})
    if cfg.cpu_affinity not in (*AFFINITY_CHOICES, ""):
        raise ValueError(f"kraft.cpu.affinity must be one of {', '.join(AFFINITY_CHOICES)}, "
                         f"got {cfg.cpu_affinity!r}")
    return cfg


def voter_affinity(cfg: AppConfig, *, local_master: bool) -> str:
    """The voters' kraft.cpu.affinity: as configured, else role when every voter runs on this
    machine (a local master: they share its cores, as `kraft-spark local`'s do), else none."""
    from kraft_spark.net.cpu_placement import AFFINITY_NONE, AFFINITY_ROLE

    if cfg.cpu_affinity:
        return cfg.cpu_affinity
    return AFFINITY_ROLE if local_master else AFFINITY_NONE


def parse_args(argv: Sequence[str] | None = None) -> AppConfig:
    from kraft_spark.properties import load_properties

    parser = argparse.ArgumentParser(prog="driver/app.py",
                                     description="kraft-spark: the Spark application")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--http-port", type=int, default=None)
    parser.add_argument("--http-host", default=None)
    parser.add_argument("--sql-port", type=int, default=None)
    parser.add_argument("--voters", type=int, default=None)
    parser.add_argument("--master", default=None)
    parser.add_argument("--warehouse", dest="warehouse_uri", default=None,
                        help="kraft.warehouse.uri: the Delta warehouse (a path or a Hadoop URI)")
    parser.add_argument("--voter-log-dir", dest="voter_log_dir", default=None,
                        help="kraft.voter.log.dir: the voters' log directory on each host")
    parser.add_argument("--voter-http-base-port", dest="voter_http_base_port", type=int,
                        default=None, help="kraft.voter.http.base.port: voter i serves the "
                        "HTTP API on this + i (0: any free port, -1: none)")
    parser.add_argument("--config", default=None, help="properties file (default: "
                        "conf/kraft-spark.properties)")
    args = parser.parse_args(argv)
    from kraft_spark.spark_session import conf_dir

    if args.config is not None and not os.path.isfile(args.config):
        parser.error(f"--config {args.config}: not a file")
    path = args.config or str(conf_dir() / "kraft-spark.properties")
    try:
        props = load_properties(path) if os.path.exists(path) else {}
        cfg = config_from_properties(props)
    except ValueError as exc:  # ConfigError, UnicodeDecodeError
        parser.error(f"{path}: {exc}")
    for attr in ("data_dir", "http_port", "http_host", "sql_port", "voters", "master",
                 "warehouse_uri", "voter_log_dir", "voter_http_base_port"):
        value = getattr(args, attr)
        if value is not None:
            cfg = replace(cfg, **{attr: value})
    cfg = replace(cfg, data_dir=os.path.abspath(cfg.data_dir))
    try:
        cfg.warehouse  # noqa: B018 (checks the URI)
    except ValueError as exc:
        parser.error(str(exc))
    if not 1 <= cfg.voters <= 9:
        parser.error(f"--voters must be between 1 and 9, got {cfg.voters}")
    if (clash := voter_port_clash(cfg)) is not None:
        parser.error(clash)
    return cfg


def voter_port_clash(cfg: AppConfig) -> str | None:
    """Two of the voters' fixed port ranges (base + 0 .. base + voters - 1) that overlap: a
    voter could not bind the second (0 and -1 pick no fixed port)."""
    bases = {"kraft.voter.base.port": cfg.voter_base_port,
             "kraft.voter.http.base.port": cfg.voter_http_base_port,
             "kraft.voter.etcd.base.port": cfg.voter_etcd_base_port}
    fixed = [(key, base) for key, base in bases.items() if base > 0]
    for i, (key, base) in enumerate(fixed):
        for other, other_base in fixed[i + 1:]:
            if abs(base - other_base) < cfg.voters:
                return (f"{key}={base} and {other}={other_base}: {cfg.voters} voters' ports "
                        "overlap; choose bases at least --voters apart")
    return None
