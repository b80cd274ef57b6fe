"""A node's configuration: a Java-style properties file with Kafka's names (every key:
docs/operations/configuration.md).

Recognised keys (anything else under ``controller.quorum.`` or ``kraft.`` is an error,
except the Spark application's ``kraft.*`` keys of ``kraft_spark.config_keys``; Kafka's other
names are ignored):

* ``node.id``: this node's id; a voter when it appears in ``controller.quorum.voters``,
  an observer otherwise;
* ``log.dirs``: its log directory (formatted with ``kraft-spark format``);
* ``listeners``: ``host:port`` to bind (``PLAINTEXT://host:port`` and ``SSL://`` accepted);
* ``controller.quorum.voters``: ``id@host:port,...``;
* ``controller.quorum.bootstrap.servers``: ``host:port,...`` of any nodes of the quorum, in
  place of ``controller.quorum.voters`` (KIP-853): the node asks them for the voters and their
  endpoints before it starts (``commands/bootstrap_servers``); the voter set itself comes from the
  log's VotersRecords;
* ``controller.quorum.*`` timings (``kraft_spark.raft.config``);
* ``socket.request.max.bytes``: the largest frame accepted (default 8 MiB);
* ``max.connections``: connections the listener holds at most; more are closed at once
  (default 1000);
* ``connections.max.idle.ms``: a connection that sent nothing for this long is closed
  (default 600000, Kafka's);
* ``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.ca.location``: PEM files; when
  set, every connection (peers and clients) uses mutual TLS and a peer without a certificate
  signed by the CA is refused;
* ``kraft.sasl.plain.users.file``: SASL/PLAIN on the listener (``listeners=SASL_PLAINTEXT://``;
  ``net.sasl_plain``): a file, mode 0600, of ``<username> <password>`` lines; every connection
  authenticates as one of them before any request, and this node authenticates to its peers as
  ``kraft.sasl.plain.username`` (default ``admin``), so the quorum's nodes share the file;
* ``metrics.port``: serve Prometheus text on ``http://<listener host>:<port>/metrics``;
* ``kraft.http.listener``: ``host:port`` (0: any free port) on which the node also serves the
  HTTP API (``api.app``: append, read, describe) on its own event loop; a leader appends HTTP
  requests straight into its core, another node forwards them to the leader. Absent: no HTTP;
* ``kraft.etcd.listener``: ``host:port`` on which the node also serves etcd's v3 gRPC API
  (``api.etcd``, docs/etcd-api.md); needs ``kraft.http.listener`` (it shares that API's store
  and credentials). ``kraft.etcd.urls``: ``id@host:port,...``, every node's etcd address, for
  MemberList. Absent: no etcd API;
* ``kraft.etcd.history.revisions``: how many revisions (offsets) of writes the in-memory MVCC
  history keeps for etcd's reads at a past revision and watches' ``prev_kv``
  (``kraft_spark.store.history``; default 100,000); the same on every node;
* ``kraft.http.token``: with ``kraft.http.listener``, every HTTP call except ``/healthz``
  needs ``Authorization: Bearer <token>`` (ignored without a listener);
* ``kraft.http.max.connections``: HTTP connections the embedded API holds at most; one more is
  answered 503 and closed (default 1000; ``api.limits``);
* ``kraft.http.header.timeout.ms``: an HTTP connection whose request headers are not complete
  this long after it connected or the request began is closed, and one whose body is not
  complete this long after its headers (default 10000);
* ``kraft.log.flush.inline.max.ms``: fsync on the event loop itself (no hand-off to the disk
  thread) while this disk's recent fsyncs average at most this long (default 2; 0: always on the
  disk thread);
* ``kraft.log.preallocate``: ``true`` (default) or ``false``: reserve each log segment to its
  full size at its first append (Kafka's ``log.preallocate``), so an fsync after an append
  flushes data only; ``false`` grows segment files append by append;
* ``kraft.log.scrub.bytes.per.second``: how fast the background scrub re-verifies the sealed
  segments' CRCs (``net.scrub``; default 1048576, 0: no scrub);
* ``kraft.cpu.affinity``: ``none`` (default) or ``role``: while leading, keep the process on
  the lower half of its CPUs, otherwise on the upper half (``net.cpu_placement``; for voters
  that share one machine, as ``kraft-spark local`` runs them);
* ``node.disk.lost``: ``true`` when the directory was wiped after this voter may have voted
  (docs/concepts/protocol.md, a voter that lost its disk); it then catches up before voting.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from kraft_spark.config_keys import check_known
from kraft_spark.http_auth import Credentials, resolve_http_credentials
from kraft_spark.net.cluster_acl import PLAINTEXT_ALLOWED_KEY, ClusterAcl, check_listener
from kraft_spark.net.cpu_placement import AFFINITY_CHOICES, AFFINITY_NONE
from kraft_spark.properties import parse_endpoint, parse_voters
from kraft_spark.protocol.sasl_plain import PlainCredentials, SaslServerConfig
from kraft_spark.raft.config import ConfigError, QuorumConfig
from kraft_spark.state.policy import SnapshotConfig
from kraft_spark.store.history import DEFAULT_RETENTION as DEFAULT_HISTORY_REVISIONS
from kraft_spark.tls_config import TlsConfig

# The background scrub's pace (net.scrub): a 64 MiB segment re-verified in about a minute.
DEFAULT_SCRUB_BYTES_PER_SECOND = 1024 * 1024

DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000
# The HTTP listeners' limits (api.limits, whose defaults these are; kept here, with no
# dependency on uvicorn, for the node's and the application's configuration).
DEFAULT_HTTP_MAX_CONNECTIONS = 1000
DEFAULT_HTTP_HEADER_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    log_dir: str
    host: str
    port: int
    voters: dict[int, tuple[str, int]]
    quorum: QuorumConfig = field(default_factory=QuorumConfig)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    tls: TlsConfig | None = None
    # SASL/PLAIN on the listener and toward the peers (kraft.sasl.plain.users.file).
    sasl: SaslServerConfig | None = None
    metrics_port: int | None = None
    disk_lost: bool = False
    # (host, port) of the embedded HTTP API; None: no HTTP.
    http_listener: tuple[str, int] | None = None
    http_credentials: Credentials | None = None
    # Who may change the voters (super.users; net.cluster_acl).
    acl: ClusterAcl = field(default_factory=ClusterAcl)
    inline_flush_max_ms: float = 2.0
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    http_max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS
    http_header_timeout_ms: int = DEFAULT_HTTP_HEADER_TIMEOUT_MS
    cpu_affinity: str = AFFINITY_NONE
    log_preallocate: bool = True
    scrub_bytes_per_second: int = DEFAULT_SCRUB_BYTES_PER_SECOND
    snapshots: SnapshotConfig = field(default_factory=SnapshotConfig)
    # Where other nodes listen that are not in ``voters`` (the static set): nodes that may
    # become voters by a KIP-853 change (the Spark application's tasks beyond its initial
    # voters). Preferred, like ``voters``, over the endpoints of VotersRecords, which name the
    # addresses of the generation that wrote them.
    addresses: dict[int, tuple[str, int]] = field(default_factory=dict)
    # controller.quorum.bootstrap.servers: where to discover the voters (no static list).
    bootstrap_servers: tuple[tuple[str, int], ...] = ()
    # The HTTP API of each node that serves one (node id -> http://host:port), advertised by
    # this node's own /v1/quorum so clients can go to the leader directly (the Spark
    # application's voters learn them from each other at start).
    http_urls: dict[int, str] = field(default_factory=dict)
    # etcd's API (kraft.etcd.listener, kraft.etcd.urls: node id -> host:port).
    etcd_listener: tuple[str, int] | None = None
    etcd_urls: dict[int, str] = field(default_factory=dict)
    # kraft.etcd.history.revisions: the MVCC history's retention (kraft_spark.store.history).
    etcd_history_revisions: int = DEFAULT_HISTORY_REVISIONS

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    def client_ssl(self) -> ssl.SSLContext | None:
        """The TLS context of this node's connections to other nodes (None: plaintext)."""
        return self.tls.client_context() if self.tls is not None else None

    @property
    def client_sasl(self) -> PlainCredentials | None:
        """Whom this node authenticates as toward other nodes (None: no SASL)."""
        return self.sasl.client if self.sasl is not None else None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> NodeConfig:
        def required(key: str) -> str:
            value = props.get(key, "").strip()
            if not value:
                raise ConfigError(f"{key} is required")
            return value

        check_known(props)
        raw_id = required("node.id")
        try:
            node_id = int(raw_id)
        except ValueError:
            raise ConfigError(f"node.id must be an integer, got {raw_id!r}") from None
        if not 0 <= node_id <= 2**31 - 1:  # an int32 on the wire
            raise ConfigError(f"node.id must be from 0 to 2147483647, got {node_id}")
        bootstrap = tuple(
            parse_endpoint(item, "controller.quorum.bootstrap.servers")
            for item in props.get("controller.quorum.bootstrap.servers", "").split(",")
            if item.strip())
        if props.get("controller.quorum.voters", "").strip() or not bootstrap:
            voters = parse_voters(props.get("controller.quorum.voters", "")) if (
                props.get("controller.quorum.voters", "").strip()) else {}
            if not voters:
                raise ConfigError("controller.quorum.voters (id@host:port,...) or "
                                  "controller.quorum.bootstrap.servers (host:port,...) is "
                                  "required")
        else:
            voters = {}
        if "listeners" in props:
            host, port = parse_endpoint(props["listeners"], "listeners")
        elif node_id in voters:
            host, port = voters[node_id]
        else:
            raise ConfigError("listeners is required for an observer (host:port to bind)")
        tls = TlsConfig.from_properties(props)
        sasl = SaslServerConfig.from_properties(props)
        check_listener(host, tls is not None, parse_boolean(
            PLAINTEXT_ALLOWED_KEY, props.get(PLAINTEXT_ALLOWED_KEY), default=False))
        max_frame = _positive_int(props, "socket.request.max.bytes", DEFAULT_MAX_FRAME_BYTES)
        max_connections = _positive_int(props, "max.connections", DEFAULT_MAX_CONNECTIONS)
        max_idle_ms = _positive_int(
            props, "connections.max.idle.ms", DEFAULT_CONNECTIONS_MAX_IDLE_MS
        )
        metrics_port = _port(props, "metrics.port")
        http = props.get("kraft.http.listener", "").strip()
        http_listener = parse_endpoint(http, "kraft.http.listener") if http else None
        # Only with a listener: the keys are shared with the Spark application's sidecar setting.
        http_credentials = http_credentials_of(props, http_listener) if http_listener else None
        etcd = props.get("kraft.etcd.listener", "").strip()
        etcd_listener = parse_endpoint(etcd, "kraft.etcd.listener") if etcd else None
        if etcd_listener is not None and http_listener is None:
            raise ConfigError("kraft.etcd.listener needs kraft.http.listener (etcd's API "
                              "shares the HTTP API's store and credentials)")
        etcd_urls = _etcd_urls(props.get("kraft.etcd.urls", ""))
        history_revisions = _positive_int(props, "kraft.etcd.history.revisions",
                                          DEFAULT_HISTORY_REVISIONS)
        http_max_connections = _positive_int(
            props, "kraft.http.max.connections", DEFAULT_HTTP_MAX_CONNECTIONS
        )
        http_header_timeout_ms = _positive_int(
            props, "kraft.http.header.timeout.ms", DEFAULT_HTTP_HEADER_TIMEOUT_MS
        )
        inline = props.get("kraft.log.flush.inline.max.ms", "2").strip()
        try:
            inline_flush_max_ms = float(inline)
        except ValueError:
            raise ConfigError(
                f"kraft.log.flush.inline.max.ms must be a number of milliseconds, got {inline!r}"
            ) from None
        if inline_flush_max_ms < 0:
            raise ConfigError("kraft.log.flush.inline.max.ms must be ≥ 0 (0: never inline)")
        cpu_affinity = props.get("kraft.cpu.affinity", AFFINITY_NONE).strip().lower()
        if cpu_affinity not in AFFINITY_CHOICES:
            raise ConfigError(
                f"kraft.cpu.affinity must be one of {', '.join(AFFINITY_CHOICES)}, "
                f"got {cpu_affinity!r}"
            )
        preallocate = parse_boolean("kraft.log.preallocate", props.get("kraft.log.preallocate"),
                                    default=True)
        scrub = _int_setting(props, "kraft.log.scrub.bytes.per.second", 0, 2**40,
                             "a number of bytes per second (0: no scrub)")
        quorum = QuorumConfig.from_properties(props)
        if max_idle_ms < quorum.fetch_timeout_ms:
            raise ConfigError(
                f"connections.max.idle.ms ({max_idle_ms}) must be at least "
                f"controller.quorum.fetch.timeout.ms ({quorum.fetch_timeout_ms}): a follower "
                "waiting for new records sends nothing for up to that long"
            )
        return cls(
            node_id=node_id,
            log_dir=required("log.dirs").split(",")[0].strip(),
            host=host,
            port=port,
            voters=voters,
            quorum=quorum,
            max_frame_bytes=max_frame,
            tls=tls,
            sasl=sasl,
            acl=ClusterAcl.configure(props.get("super.users"),
                                     tls is not None or sasl is not None),
            metrics_port=metrics_port,
            disk_lost=parse_boolean("node.disk.lost", props.get("node.disk.lost"), default=False),
            http_listener=http_listener,
            etcd_listener=etcd_listener,
            etcd_urls=etcd_urls,
            etcd_history_revisions=history_revisions,
            bootstrap_servers=bootstrap,
            http_credentials=http_credentials,
            inline_flush_max_ms=inline_flush_max_ms,
            scrub_bytes_per_second=(DEFAULT_SCRUB_BYTES_PER_SECOND if scrub is None
                                    else scrub),
            max_connections=max_connections,
            connections_max_idle_ms=max_idle_ms,
            http_max_connections=http_max_connections,
            http_header_timeout_ms=http_header_timeout_ms,
            cpu_affinity=cpu_affinity,
            log_preallocate=preallocate,
            snapshots=SnapshotConfig.from_properties(props),
        )


def _etcd_urls(raw: str) -> dict[int, str]:
    """``kraft.etcd.urls``: ``id@host:port`` items, comma-separated."""
    urls: dict[int, str] = {}
    for item in filter(None, (x.strip() for x in raw.split(","))):
        node, sep, address = item.partition("@")
        if not sep or not node.isdigit():
            raise ConfigError(f"kraft.etcd.urls: {item!r} is not <node id>@<host>:<port>")
        parse_endpoint(address, "kraft.etcd.urls")
        urls[int(node)] = address
    return urls


def parse_boolean(key: str, raw: str | None, *, default: bool) -> bool:
    """``true`` or ``false`` (any case, spaces around allowed); ``default`` when absent or
    empty. Anything else is an error naming the key, as Kafka's configs refuse it: a typo
    such as ``node.disk.lost=ture`` must not silently mean false."""
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, got {raw!r}")
    return value == "true"


def _positive_int(props: Mapping[str, str], key: str, default: int) -> int:
    value = _int_setting(props, key, 1, 2**63 - 1, "a positive integer")
    return default if value is None else value


def _port(props: Mapping[str, str], key: str) -> int | None:
    """A TCP port (0: any free one); None when absent."""
    return _int_setting(props, key, 0, 65535, "a port number from 0 to 65535")


def _int_setting(
    props: Mapping[str, str], key: str, low: int, high: int, meaning: str
) -> int | None:
    """The integer ``key`` in [low, high]; None when absent; else an error naming the key."""
    raw = props.get(key, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ConfigError(f"{key} must be {meaning}, got {raw!r}")
    return value


def http_credentials_of(props: Mapping[str, str],
                        listener: tuple[str, int]) -> Credentials | None:
    """The HTTP API's credentials: ``kraft.http.credentials.file`` (scoped tokens, a file only
    its owner can read) or ``kraft.http.token`` (one admin token). None (no authentication) is
    allowed on loopback only, or anywhere with ``kraft.http.insecure=true`` (logged loudly)."""
    path = props.get("kraft.http.credentials.file", "").strip()
    token = props.get("kraft.http.token", "").strip()
    insecure = parse_boolean("kraft.http.insecure", props.get("kraft.http.insecure"),
                             default=False)
    return resolve_http_credentials(path or None, token or None, insecure, listener[0])

