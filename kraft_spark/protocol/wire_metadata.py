"""The answer to Kafka's Metadata (key 3), which every node gives by itself, without the core.

Why a quorum of controllers answers Metadata at all: Kafka's admin client started with
``--bootstrap-server`` (``kafka-metadata-quorum.sh --bootstrap-server H:P describe``) first asks
Metadata for the cluster's brokers, then sends DescribeQuorum to one of them (the least loaded)
and DescribeCluster with EndpointType 1 (brokers). Only the leader answers DescribeQuorum here
(every other node answers NOT_LEADER_OR_FOLLOWER), so the answer presents the leader this node
knows as the cluster's one broker and as its controller; DescribeCluster's broker answer
(``wire_voters.describe_cluster_body``) presents the same node.

Invariants of the answer:

* ``brokers`` holds the known leader with the address this node reaches it at, or nothing when
  no leader is known (or its address is not): Kafka's admin client ignores a metadata answer
  without nodes, keeps the bootstrap address and asks again until its deadline, which is what
  waiting out an election needs. ``controller_id`` is that leader, else -1: it always names a
  listed broker or none.
* The quorum has no topics a client may see: every topic asked for gets an error of its own
  (UNKNOWN_TOPIC_OR_PARTITION by name, UNKNOWN_TOPIC_ID by id), a null list (all topics) gets
  an empty one, and a topic named twice is answered once.
* Nothing in a decoded request makes this raise: the codec already checked types and sizes,
  and what it lets through that Kafka forbids (a null name before v12) gets INVALID_REQUEST
  for that topic.
"""

from __future__ import annotations

import uuid
from typing import Any

from kraft_spark.protocol import ErrorCode
from kraft_spark.protocol.primitives import NIL_UUID

Body = dict[str, Any]

# Topics by id (a null name) exist from Metadata v12 on; v10 and v11 carry the field unused.
FIRST_VERSION_BY_ID = 12


def metadata_body(
    version: int,
    cluster_id: str,
    leader_id: int,
    leader_address: tuple[str, int] | None,
    request: Body,
) -> Body:
    """The Metadata response body at ``version`` for the decoded ``request`` (see above)."""
    brokers: list[Body] = []
    if leader_id >= 0 and leader_address is not None:
        host, port = leader_address
        brokers.append({"node_id": leader_id, "host": host, "port": port, "rack": None})
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": cluster_id,
        "controller_id": leader_id if brokers else -1,
        "topics": _topics(version, request.get("topics")),
        "error_code": 0,
    }


def _topics(version: int, asked: list[Body] | None) -> list[Body]:
    if asked is None:  # all topics: there are none to list
        return []
    answered: list[Body] = []
    seen: set[tuple[str | None, uuid.UUID]] = set()
    for topic in asked:
        name: str | None = topic.get("name")
        topic_id: uuid.UUID = topic.get("topic_id", NIL_UUID)
        if (name, topic_id) in seen:
            continue
        seen.add((name, topic_id))
        if name is not None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif version >= FIRST_VERSION_BY_ID:
            error = ErrorCode.UNKNOWN_TOPIC_ID
        else:  # the response cannot carry a null name below v12 either
            error, name = ErrorCode.INVALID_REQUEST, ""
        answered.append(
            {
                "error_code": int(error),
                "name": name,
                "topic_id": topic_id,
                "is_internal": False,
                "partitions": [],
            }
        )
    return answered
