"""Real nodes answer Metadata (api key 3) and DescribeCluster for brokers the way an admin
client started with ``--bootstrap-server`` needs: the leader is the one broker listed, and
DescribeQuorum sent to it succeeds; malformed Metadata never takes a node down."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.net.node import RaftNode
from kraft_spark.protocol import METADATA_TOPIC, ApiKey, ErrorCode
from kraft_spark.transport import Connection

from .helpers import CLUSTER, make_nodes, run_quorum, send_raw, the_leader, wait_for

pytestmark = pytest.mark.timeout(120)

DESCRIBE_QUORUM = {
    "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]
}


async def _ask(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    conn = Connection("127.0.0.1", port)
    try:
        return await conn.request(api_key, version, body, 2.0)
    finally:
        await conn.close()


def test_every_node_names_the_leader_as_the_one_broker(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        await wait_for(
            lambda: all(n.core.known_leader() == leader.node_id for n in nodes),
            5,
            "every node to know the leader",
        )  # followers learn it a moment later
        for node in nodes:
            for version in (9, 12, 13):
                answer = await _ask(
                    node.port,
                    ApiKey.METADATA,
                    version,
                    {"topics": [], "allow_auto_topic_creation": True},
                )
                assert answer["brokers"] == [
                    {
                        "node_id": leader.node_id,
                        "host": "127.0.0.1",
                        "port": leader.port,
                        "rack": None,
                    }
                ]
                assert answer["controller_id"] == leader.node_id
                assert answer["cluster_id"] == CLUSTER and answer["topics"] == []
            # DescribeCluster for brokers (v1 EndpointType 1, and v0) lists the same node.
            for version, ask in ((1, {"endpoint_type": 1}), (0, {})):
                cluster = await _ask(node.port, ApiKey.DESCRIBE_CLUSTER, version, ask)
                assert cluster["error_code"] == 0 and cluster["cluster_id"] == CLUSTER
                assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [
                    (leader.node_id, leader.port)
                ]
        # The admin client's next step: DescribeQuorum to the broker it was given succeeds.
        described = await _ask(leader.port, ApiKey.DESCRIBE_QUORUM, 2, DESCRIBE_QUORUM)
        (part,) = described["topics"][0]["partitions"]
        assert part["error_code"] == 0 and part["leader_id"] == leader.node_id
        # Topics: unknown by name and by id, each answered once; null asks for all (none).
        follower = next(n for n in nodes if n is not leader)
        topic_id = uuid.uuid4()
        asked = {"topics": [{"name": "a"}, {"name": "a"}, {"name": None, "topic_id": topic_id}]}
        answer = await _ask(follower.port, ApiKey.METADATA, 13, asked)
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
            ("a", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (None, ErrorCode.UNKNOWN_TOPIC_ID),
        ]
        assert (await _ask(follower.port, ApiKey.METADATA, 13, {"topics": None}))["topics"] == []
        # Malformed Metadata (a version we do not serve, a truncated body): the connection
        # closes, the node keeps serving.
        for frame in (
            struct.pack(">hhi", 3, 14, 5) + b"\x00\x00\x00",
            struct.pack(">hhi", 3, 13, 6) + b"\x00\x02ab\x00\x05",
        ):
            assert await send_raw(follower.port, struct.pack(">i", len(frame)) + frame) == b""
        answer = await _ask(follower.port, ApiKey.METADATA, 13, {"topics": []})
        assert answer["controller_id"] == leader.node_id

    asyncio.run(run_quorum(tmp_path, body))


def test_without_a_leader_no_broker_is_listed(tmp_path: Path) -> None:
    async def body() -> None:
        alone = make_nodes(tmp_path)[0]  # one voter of three: it can never win an election
        await alone.start()
        try:
            answer = await _ask(alone.port, ApiKey.METADATA, 13, {"topics": []})
            assert answer["brokers"] == [] and answer["controller_id"] == -1
            assert answer["cluster_id"] == CLUSTER and answer["error_code"] == 0
        finally:
            await alone.stop(graceful=False)

    asyncio.run(body())
