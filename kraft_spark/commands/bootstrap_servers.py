"""``controller.quorum.bootstrap.servers`` (KIP-853): a node given no voter list finds the
quorum through any of its nodes.

Before the node starts, it asks the bootstrap servers for DescribeQuorum (the client follows
the leader from whichever answers) and takes the voters and the endpoints of DescribeQuorum
v2's ``Nodes`` as its starting set: whom to fetch from while its own log says nothing. From
then on the log decides, as for every node: the newest VotersRecord (from the bootstrap
checkpoint, a snapshot or replication) is the set in force.

Kafka discovers the leader from the Fetch answers of a bootstrap server (``NodeEndpoints``,
Fetch v17); our Fetch is v12, so the discovery is this one DescribeQuorum instead. The cluster
id of the node's ``meta.properties`` must match the quorum's: a node of another cluster is
refused with the reason, nothing is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from kraft_spark.client.client import AsyncQuorumClient
from kraft_spark.client.errors import ClientError
from kraft_spark.client.types import QuorumInfo
from kraft_spark.log.meta import read_meta_properties
from kraft_spark.net.config import NodeConfig
from kraft_spark.properties import parse_endpoint
from kraft_spark.raft.config import ConfigError

log = logging.getLogger(__name__)

DISCOVERY_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 5.0


def voters_of(info: QuorumInfo) -> dict[int, tuple[str, int]]:
    """Voter id -> (host, port) of its first listener; raises ConfigError if one is missing."""
    voters: dict[int, tuple[str, int]] = {}
    for voter in info.voters:
        listeners = info.endpoints.get(voter.replica_id)
        if not listeners:
            raise ConfigError(
                f"the quorum does not say where voter {voter.replica_id} listens (DescribeQuorum "
                "v2 lists no endpoint for it): use controller.quorum.voters instead")
        voters[voter.replica_id] = parse_endpoint(listeners[0], "a voter's endpoint")
    return voters


async def discover_voters(
    config: NodeConfig, *, timeout_s: float = DISCOVERY_TIMEOUT_S
) -> NodeConfig:
    """``config`` with the voters found through its bootstrap servers (see the module
    docstring). Retries until ``timeout_s``, logging progress; raises ConfigError naming the
    servers and the last error when the quorum cannot be reached."""
    servers = ",".join(f"{h}:{p}" for h, p in config.bootstrap_servers)
    meta = read_meta_properties(config.log_dir)
    client = AsyncQuorumClient(
        servers, cluster_id=meta.cluster_id if meta is not None else None,
        ssl_context=config.client_ssl(), sasl=config.client_sasl,
        retry_budget_s=PROGRESS_EVERY_S)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                info = await client.describe_quorum()
                break
            except ClientError as exc:
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        f"controller.quorum.bootstrap.servers={servers}: no quorum answered "
                        f"within {timeout_s:.0f} s ({exc}); check the addresses and that the "
                        "quorum runs") from exc
                log.info("node %d: looking for the quorum at %s: %s", config.node_id, servers,
                         exc)
                await asyncio.sleep(0.5)
    finally:
        await client.close()
    voters = voters_of(info)
    log.info("node %d: the quorum at %s has voters %s (leader %d, epoch %d)", config.node_id,
             servers, {v: f"{h}:{p}" for v, (h, p) in sorted(voters.items())}, info.leader_id,
             info.leader_epoch)
    return dataclasses.replace(config, voters=voters)
