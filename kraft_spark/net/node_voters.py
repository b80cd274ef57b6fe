"""``RaftNode``'s view of the voters (KIP-853): the static set it starts from, where each voter
listens (the newest VotersRecord's endpoints, else ``controller.quorum.voters``), and the
answer to KIP-919's DescribeCluster, which the node serves without the core."""

from __future__ import annotations

import uuid
from typing import Any

from kraft_spark.log.meta import MetaProperties
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.net.wire_voters import describe_cluster_body
from kraft_spark.protocol import RequestHeader
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.voter_set import NIL_DIRECTORY, VoterSet, parse_directory


def static_voter_set(config: NodeConfig) -> VoterSet:
    """``controller.quorum.voters`` as a voter set: ids with their configured endpoints."""
    return VoterSet.of_ids(config.voters).with_endpoints(dict(config.voters))


def directory_of(meta: MetaProperties) -> uuid.UUID:
    """The directory id of ``meta.properties`` (NIL if it is not in Kafka's form)."""
    try:
        return parse_directory(meta.directory_id)
    except ValueError:
        return NIL_DIRECTORY


class VoterEndpointsMixin:
    """Mixed into ``RaftNode``, which owns ``config``, ``cluster_id`` and ``_core``."""

    config: NodeConfig
    cluster_id: str
    _core: RaftCore | None
    _endpoint_cache: tuple[VoterSet | None, list[dict[str, Any]]] = (None, [])

    def _voter_address(self, node_id: int) -> tuple[str, int] | None:
        """Where voter ``node_id`` listens: the configured address (``controller.quorum.voters``
        or the Spark application's current generation), else its VotersRecord endpoint."""
        known = self.config.voters.get(node_id) or self.config.addresses.get(node_id)
        if known is not None:
            return known
        core = self._core
        if core is not None:
            voter = core.voter_set.get(node_id)
            if voter is not None:
                return voter.address()
        return None

    def _voter_endpoints(self) -> list[dict[str, Any]]:
        """``{"node_id", "host", "port"}`` per voter in force (clients find the leader)."""
        core = self._core
        voters = core.voter_set if core is not None else static_voter_set(self.config)
        if self._endpoint_cache[0] is not voters:
            found = ((v.node_id, self._voter_address(v.node_id)) for v in voters.voters)
            self._endpoint_cache = (voters, [
                {"node_id": node_id, "host": where[0], "port": where[1]}
                for node_id, where in found if where is not None
            ])
        return self._endpoint_cache[1]

    def _answer_describe_cluster(
        self, conn: ServerConnection, header: RequestHeader, body: dict[str, Any]
    ) -> None:
        core = self._core
        assert core is not None
        voters = core.voter_set.with_addresses(
            {v.node_id: a for v in core.voter_set.voters
             if (a := self._voter_address(v.node_id)) is not None})
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     describe_cluster_body(self.cluster_id, core.known_leader(), voters,
                                           body.get("endpoint_type", 1)))
