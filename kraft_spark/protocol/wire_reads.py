"""ReadIndex (kraft-spark's api key 10000, ``protocol.messages_store``) ↔ wire bodies: a follower,
an observer or a client asks the leader for the read index of a linearizable read
(``kraft_spark.raft.read_index``)."""

from __future__ import annotations

from typing import Any

from kraft_spark.protocol import ApiKey
from kraft_spark.raft.messages import ErrorCode, ReadIndexRequest, ReadIndexResponse

Body = dict[str, Any]
VERSION = 0


def request_to_wire(msg: ReadIndexRequest) -> tuple[int, int, Body]:
    return ApiKey.READ_INDEX, VERSION, {"cluster_id": None, "timeout_ms": msg.timeout_ms}


def request_from_wire(body: Body) -> ReadIndexRequest:
    return ReadIndexRequest(timeout_ms=max(1, min(int(body["timeout_ms"]), 60_000)))


def response_to_wire(msg: ReadIndexResponse) -> Body:
    return {"error_code": int(msg.error), "leader_id": msg.leader_id,
            "leader_epoch": msg.leader_epoch, "read_offset": msg.read_offset}


def response_from_wire(body: Body) -> ReadIndexResponse:
    """Raises ValueError for an error code this quorum does not know."""
    return ReadIndexResponse(ErrorCode(body["error_code"]), body["leader_id"],
                             body["leader_epoch"], body["read_offset"])


def error_body(error: int) -> Body:
    return {"error_code": error, "leader_id": -1, "leader_epoch": -1, "read_offset": -1}
