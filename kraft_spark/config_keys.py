"""The ``kraft.*`` settings (kraft-spark's own, not Kafka's) of its properties files, in one place.

A node (``kraft-spark node``) and the Spark application may read one shared file, each using its
own keys and accepting the other's; both reject any other ``kraft.*`` key, so a misspelt setting
stops the process with its name instead of being silently ignored. Unknown
``controller.quorum.*`` keys are rejected by ``QuorumConfig``; Kafka's other names (``node.id``,
``listeners``, ...) are the node's.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraft_spark.raft.config import ConfigError

NODE_KEYS = frozenset({
    "kraft.http.listener",
    "kraft.etcd.listener",
    "kraft.etcd.urls",
    "kraft.etcd.history.revisions",
    "kraft.http.token",
    "kraft.http.credentials.file",
    "kraft.http.insecure",
    "kraft.listener.plaintext.allowed",
    "kraft.sasl.plain.users.file",
    "kraft.sasl.plain.username",
    "kraft.http.max.connections",
    "kraft.http.header.timeout.ms",
    "kraft.log.flush.inline.max.ms",
    "kraft.cpu.affinity",
    "kraft.log.preallocate",
    "kraft.retention.hold.observers",
    "kraft.snapshot.log.ratio",
    "kraft.log.scrub.bytes.per.second",
})
QUORUM_KEYS = frozenset({"kraft.quorum.hw.wakeup.delay.ms", "kraft.quorum.lone.append.hold.ms",
                         "kraft.quorum.fetch.timeout.jitter.ms",
                         "kraft.quorum.observer.fetch.interval.ms"})
APP_KEYS = frozenset({
    "kraft.data.dir",
    "kraft.voters",
    "kraft.http.host",
    "kraft.http.port",
    "kraft.http.token",
    "kraft.http.credentials.file",
    "kraft.http.insecure",
    "kraft.listener.plaintext.allowed",
    "kraft.listener.insecure",
    "kraft.http.max.connections",
    "kraft.http.header.timeout.ms",
    "kraft.sql.host",
    "kraft.sql.port",
    "kraft.voter.base.port",
    "kraft.voter.http.base.port",
    "kraft.voter.etcd.base.port",
    "kraft.etcd.port",
    "kraft.cpu.affinity",
    "kraft.materialize.interval.ms",
    "kraft.materialize.snapshot.interval.ms",
    "kraft.delta.warmup.wait.ms",
    "kraft.delta.compact.min.files",
    "kraft.log.flush.inline.max.ms",
    "kraft.log.preallocate",
    "kraft.warehouse.uri",
    "kraft.voter.log.dir",
})
ALL_KEYS = NODE_KEYS | QUORUM_KEYS | APP_KEYS


def check_known(keys: Iterable[str]) -> None:
    """Raise ConfigError naming every ``kraft.*`` key that no component reads."""
    unknown = sorted(k for k in keys if k.startswith("kraft.") and k not in ALL_KEYS)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise ConfigError(
            f"unknown setting{'s' if len(unknown) > 1 else ''} {names}; the kraft.* settings "
            f"are: {', '.join(sorted(ALL_KEYS))}"
        )


__all__ = ["ALL_KEYS", "APP_KEYS", "NODE_KEYS", "QUORUM_KEYS", "check_known"]
