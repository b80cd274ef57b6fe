"""KIP-853's AddRaftVoter (80) and RemoveRaftVoter (81) ↔ Kafka wire bodies, and the voters'
listeners as DescribeQuorum v2 (``Nodes``) and KIP-919's DescribeCluster list them."""

from __future__ import annotations

from typing import Any

from kraft_spark.protocol import ApiKey
from kraft_spark.raft.messages import (
    AddVoterRequest,
    RemoveVoterRequest,
    VoterChangeResponse,
)
from kraft_spark.raft.messages import ErrorCode as CoreError
from kraft_spark.raft.voter_set import Endpoint, VoterSet

Body = dict[str, Any]
VOTER_APIS = (ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER)
# KIP-919's EndpointType in DescribeCluster: 1 = brokers, 2 = controllers.
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2


class VoterWireError(Exception):
    """A valid Kafka body that is not a valid voter change."""


def _endpoints(listeners: list[Body]) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(e["name"], e["host"], e["port"]) for e in listeners)


def request_to_wire(msg: AddVoterRequest | RemoveVoterRequest) -> tuple[int, int, Body]:
    if isinstance(msg, AddVoterRequest):
        return ApiKey.ADD_RAFT_VOTER, 0, {
            "cluster_id": msg.cluster_id,
            "timeout_ms": msg.timeout_ms,
            "voter_id": msg.voter_id,
            "voter_directory_id": msg.directory_id,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port}
                          for e in msg.endpoints],
        }
    return ApiKey.REMOVE_RAFT_VOTER, 0, {
        "cluster_id": msg.cluster_id,
        "voter_id": msg.voter_id,
        "voter_directory_id": msg.directory_id,
    }


def request_from_wire(api_key: int, body: Body) -> AddVoterRequest | RemoveVoterRequest:
    if body["voter_id"] < 0:
        raise VoterWireError(f"invalid voter id {body['voter_id']}")
    if api_key == ApiKey.ADD_RAFT_VOTER:
        return AddVoterRequest(
            cluster_id=body["cluster_id"],
            timeout_ms=max(0, body["timeout_ms"]),
            voter_id=body["voter_id"],
            directory_id=body["voter_directory_id"],
            endpoints=_endpoints(body["listeners"]),
        )
    return RemoveVoterRequest(body["cluster_id"], body["voter_id"], body["voter_directory_id"])


def response_to_wire(msg: VoterChangeResponse) -> Body:
    return {"throttle_time_ms": 0, "error_code": int(msg.error), "error_message": msg.message}


def error_body(error: int, message: str) -> Body:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message or None}


def response_from_wire(body: Body) -> VoterChangeResponse:
    code = body["error_code"]
    try:
        error = CoreError(code)
    except ValueError:
        error = CoreError.INVALID_REQUEST
    message = body.get("error_message")
    if error == CoreError.INVALID_REQUEST and code != CoreError.INVALID_REQUEST:
        message = f"error code {code}: {message}"
    return VoterChangeResponse(error, message, -1, -1)


def nodes_body(voters: VoterSet) -> list[Body]:
    """DescribeQuorum v2's ``Nodes``: every voter's listeners."""
    return [
        {"node_id": v.node_id,
         "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in v.endpoints]}
        for v in voters.voters
    ]


def describe_cluster_body(
    cluster_id: str, leader_id: int, voters: VoterSet, endpoint_type: int
) -> Body:
    """KIP-919: a controller asked for controllers lists the voters and names the leader as
    the (active) controller; asked for brokers it answers UNSUPPORTED_ENDPOINT_TYPE, as Kafka's
    controllers do (this quorum has no brokers)."""
    if endpoint_type != ENDPOINT_TYPE_CONTROLLER:
        return {
            "throttle_time_ms": 0, "error_code": int(CoreError.UNSUPPORTED_ENDPOINT_TYPE),
            "error_message": "this is a KRaft quorum of controllers: it has no brokers; use "
                             "--bootstrap-controller", "endpoint_type": endpoint_type,
            "cluster_id": cluster_id, "controller_id": -1, "brokers": [],
        }
    brokers = [
        {"broker_id": v.node_id, "host": v.endpoints[0].host, "port": v.endpoints[0].port,
         "rack": None}
        for v in voters.voters if v.endpoints
    ]
    return {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "endpoint_type": endpoint_type, "cluster_id": cluster_id, "controller_id": leader_id,
        "brokers": brokers,
    }
