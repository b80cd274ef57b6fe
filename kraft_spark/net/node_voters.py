"""``RaftNode``'s view of the voters (KIP-853): the static set it starts from, where each voter
listens (the newest VotersRecord's endpoints, else ``controller.quorum.voters``), and the
answers to KIP-919's DescribeCluster and to Metadata (``wire_metadata``), which the node serves
without the core."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from kraft_spark.log.meta import MetaProperties
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.net.voter_probe import probe_new_voter
from kraft_spark.protocol import ApiKey, RequestHeader
from kraft_spark.protocol.wire_metadata import metadata_body
from kraft_spark.protocol.wire_voters import describe_cluster_body, error_body
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import AddVoterRequest
from kraft_spark.raft.state import Role
from kraft_spark.raft.voter_set import (
    DEFAULT_LISTENER,
    NIL_DIRECTORY,
    Endpoint,
    VoterSet,
    parse_directory,
)

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 5.0


def static_voter_set(config: NodeConfig) -> VoterSet:
    """``controller.quorum.voters`` as a voter set: ids with their configured endpoints."""
    return VoterSet.of_ids(config.voters).with_endpoints(dict(config.voters))


def local_endpoints(config: NodeConfig) -> tuple[Endpoint, ...]:
    """Where this node says it listens (UpdateRaftVoter keeps its VotersRecord entry in line):
    the address it binds, unless that is a wildcard; then its address in the static set or the
    Spark generation, else nothing (its reachable address is not known here)."""
    if config.host not in ("", "0.0.0.0", "::"):
        return (Endpoint(DEFAULT_LISTENER, config.host, config.port),)
    known = config.voters.get(config.node_id) or config.addresses.get(config.node_id)
    return (Endpoint(DEFAULT_LISTENER, *known),) if known is not None else ()


def directory_of(meta: MetaProperties) -> uuid.UUID:
    """The directory id of ``meta.properties`` (NIL if it is not in Kafka's form)."""
    try:
        return parse_directory(meta.directory_id)
    except ValueError:
        return NIL_DIRECTORY


class VoterEndpoints:
    """Where the voters listen, as the node knows it, and the requests about voters the node
    answers or vets itself: DescribeCluster, Metadata, and an AddRaftVoter's probe of the new
    voter. ``core``: the node's core now (None before it started); ``cluster_id``: the node's
    (known once its directory is read); ``stopping``: whether the node stops; ``spawn``: runs a
    task of the node; ``hand_to_core``: gives a request to the core, as the node's listener
    does."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        core: Callable[[], RaftCore | None],
        cluster_id: Callable[[], str],
        stopping: Callable[[], bool],
        spawn: Callable[[Coroutine[Any, Any, None], str], None],
        hand_to_core: Callable[[ServerConnection, RequestHeader, Any], None],
    ) -> None:
        self.config = config
        self._core_now = core
        self._cluster_id = cluster_id
        self._stopping = stopping
        self._spawn = spawn
        self._hand_to_core = hand_to_core
        self._endpoint_cache: tuple[VoterSet | None, list[dict[str, Any]]] = (None, [])

    def address(self, node_id: int) -> tuple[str, int] | None:
        """Where voter ``node_id`` listens: the configured address (``controller.quorum.voters``
        or the Spark application's current generation), else its VotersRecord endpoint."""
        known = self.config.voters.get(node_id) or self.config.addresses.get(node_id)
        if known is not None:
            return known
        core = self._core_now()
        if core is not None:
            voter = core.voter_set.get(node_id)
            if voter is not None:
                return voter.address()
        return None

    def endpoints(self) -> list[dict[str, Any]]:
        """``{"node_id", "host", "port"}`` per voter in force (clients find the leader)."""
        core = self._core_now()
        voters = core.voter_set if core is not None else static_voter_set(self.config)
        if self._endpoint_cache[0] is not voters:
            found = ((v.node_id, self.address(v.node_id)) for v in voters.voters)
            self._endpoint_cache = (voters, [
                {"node_id": node_id, "host": where[0], "port": where[1]}
                for node_id, where in found if where is not None
            ])
        return self._endpoint_cache[1]

    def probing_new_voter(
        self, conn: ServerConnection, header: RequestHeader, message: object
    ) -> bool:
        """A leader asks a voter to be added for its ApiVersions first (voter_probe); the
        core then gets the request from ``_probe_then_add``. False: not such a request."""
        core = self._core_now()
        if (not isinstance(message, AddVoterRequest) or not message.endpoints or core is None
                or core.role is not Role.LEADER):
            return False
        self._spawn(self._probe_then_add(conn, header, message), "voter-probe")
        return True

    async def _probe_then_add(
        self, conn: ServerConnection, header: RequestHeader, message: AddVoterRequest
    ) -> None:
        where = message.endpoints[0]
        refusal = await probe_new_voter(
            where.host, where.port, min(PROBE_TIMEOUT_S, self.config.quorum.request_timeout_ms
                                        / 1000), self.config.client_ssl(),
            self.config.client_sasl)
        if self._stopping() or self._core_now() is None:
            conn.close()
        elif refusal is not None:
            log.info("node %d: refusing to add voter %d: %s", self.config.node_id,
                     message.voter_id, refusal[1])
            conn.respond(header.api_key, header.api_version, header.correlation_id,
                         error_body(int(refusal[0]), refusal[1]))
        else:
            self._hand_to_core(conn, header, message)

    def answered_without_core(
        self, conn: ServerConnection, header: RequestHeader, body: Any
    ) -> bool:
        """Answer the admin requests the node serves by itself; False for any other."""
        if header.api_key == ApiKey.DESCRIBE_CLUSTER:
            self._answer_describe_cluster(conn, header, body)
        elif header.api_key == ApiKey.METADATA:  # --bootstrap-server admin clients
            self._answer_metadata(conn, header, body)
        else:
            return False
        return True

    def _answer_describe_cluster(
        self, conn: ServerConnection, header: RequestHeader, body: dict[str, Any]
    ) -> None:
        core = self._core_now()
        assert core is not None
        voters = core.voter_set.with_addresses(
            {v.node_id: a for v in core.voter_set.voters
             if (a := self.address(v.node_id)) is not None})
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     describe_cluster_body(self._cluster_id(), core.known_leader(), voters,
                                           body.get("endpoint_type", 1)))

    def _answer_metadata(
        self, conn: ServerConnection, header: RequestHeader, body: dict[str, Any]
    ) -> None:
        """Metadata names the leader this node knows as the one broker (see wire_metadata)."""
        core = self._core_now()
        assert core is not None
        leader = core.known_leader()
        where = self.address(leader) if leader >= 0 else None
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     metadata_body(header.api_version, self._cluster_id(), leader, where, body))
