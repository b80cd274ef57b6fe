"""KIP-853's AddRaftVoter (80), RemoveRaftVoter (81) and UpdateRaftVoter (82) ↔ Kafka wire
bodies, and the voters' listeners as DescribeQuorum v2 (``Nodes``) and KIP-919's
DescribeCluster list them."""

from __future__ import annotations

from typing import Any

from kraft_spark.protocol import ApiKey
from kraft_spark.raft.messages import (
    AddVoterRequest,
    RemoveVoterRequest,
    UpdateVoterRequest,
    VoterChangeResponse,
)
from kraft_spark.raft.messages import ErrorCode as CoreError
from kraft_spark.raft.voter_set import Endpoint, VoterSet

Body = dict[str, Any]
VOTER_APIS = (ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER)
VoterChange = AddVoterRequest | RemoveVoterRequest | UpdateVoterRequest
# KIP-919's EndpointType in DescribeCluster: 1 = brokers, 2 = controllers.
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2


class VoterWireError(Exception):
    """A valid Kafka body that is not a valid voter change."""


def _endpoints(listeners: list[Body]) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(e["name"], e["host"], e["port"]) for e in listeners)


def _listeners(endpoints: tuple[Endpoint, ...]) -> list[Body]:
    return [{"name": e.name, "host": e.host, "port": e.port} for e in endpoints]


def request_to_wire(msg: VoterChange) -> tuple[int, int, Body]:
    if isinstance(msg, UpdateVoterRequest):
        return ApiKey.UPDATE_RAFT_VOTER, 0, {
            "cluster_id": msg.cluster_id,
            "current_leader_epoch": msg.current_leader_epoch,
            "voter_id": msg.voter_id,
            "voter_directory_id": msg.directory_id,
            "listeners": _listeners(msg.endpoints),
            "kraft_version_feature": {"min_supported_version": msg.min_kraft_version,
                                       "max_supported_version": msg.max_kraft_version},
        }
    if isinstance(msg, AddVoterRequest):
        return ApiKey.ADD_RAFT_VOTER, 0, {
            "cluster_id": msg.cluster_id,
            "timeout_ms": msg.timeout_ms,
            "voter_id": msg.voter_id,
            "voter_directory_id": msg.directory_id,
            "listeners": _listeners(msg.endpoints),
            "kraft_spark_target_voters": list(msg.target_voters),
        }
    return ApiKey.REMOVE_RAFT_VOTER, 0, {
        "cluster_id": msg.cluster_id,
        "voter_id": msg.voter_id,
        "voter_directory_id": msg.directory_id,
        "kraft_spark_target_voters": list(msg.target_voters),
    }


def request_from_wire(api_key: int, body: Body) -> VoterChange:
    if body["voter_id"] < 0:
        raise VoterWireError(f"invalid voter id {body['voter_id']}")
    if api_key == ApiKey.UPDATE_RAFT_VOTER:
        feature = body["kraft_version_feature"]
        return UpdateVoterRequest(
            cluster_id=body["cluster_id"],
            current_leader_epoch=body["current_leader_epoch"],
            voter_id=body["voter_id"],
            directory_id=body["voter_directory_id"],
            endpoints=_endpoints(body["listeners"]),
            min_kraft_version=feature["min_supported_version"],
            max_kraft_version=feature["max_supported_version"],
        )
    if api_key == ApiKey.ADD_RAFT_VOTER:
        return AddVoterRequest(
            cluster_id=body["cluster_id"],
            timeout_ms=max(0, body["timeout_ms"]),
            voter_id=body["voter_id"],
            directory_id=body["voter_directory_id"],
            endpoints=_endpoints(body["listeners"]),
            target_voters=tuple(body.get("kraft_spark_target_voters") or ()),
        )
    return RemoveVoterRequest(body["cluster_id"], body["voter_id"], body["voter_directory_id"],
                              tuple(body.get("kraft_spark_target_voters") or ()))


def response_to_wire(msg: VoterChangeResponse, endpoints: list[Body] | None = None) -> Body:
    """AddRaftVoter's and RemoveRaftVoter's ``ErrorMessage``; UpdateRaftVoter's
    ``CurrentLeader`` (with the leader's address from ``endpoints`` when known)."""
    where = next((e for e in endpoints or () if e["node_id"] == msg.leader_id), None)
    return {
        "throttle_time_ms": 0, "error_code": int(msg.error), "error_message": msg.message,
        "current_leader": {
            "leader_id": msg.leader_id, "leader_epoch": msg.leader_epoch,
            "host": where["host"] if where else "", "port": where["port"] if where else -1,
        },
    }


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
    leader = body.get("current_leader") or {}
    return VoterChangeResponse(error, message, leader.get("leader_id", -1),
                               leader.get("leader_epoch", -1))


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
    """KIP-919: asked for controllers (``--bootstrap-controller``), a node lists the voters
    and names the leader as the (active) controller. Asked for brokers (``--bootstrap-server``,
    or v0) it lists only the leader, the one node that answers DescribeQuorum: the quorum
    presents its leader as its one broker, as its Metadata answer does (``wire_metadata``).
    Any other endpoint type gets UNSUPPORTED_ENDPOINT_TYPE, as from Kafka."""
    if endpoint_type not in (ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER):
        return {
            "throttle_time_ms": 0, "error_code": int(CoreError.UNSUPPORTED_ENDPOINT_TYPE),
            "error_message": f"unknown endpoint type {endpoint_type}: 1 asks for brokers, 2 "
                             "for controllers", "endpoint_type": endpoint_type,
            "cluster_id": cluster_id, "controller_id": -1, "brokers": [],
        }
    brokers = [
        {"broker_id": v.node_id, "host": v.endpoints[0].host, "port": v.endpoints[0].port,
         "rack": None}
        for v in voters.voters
        if v.endpoints and (endpoint_type == ENDPOINT_TYPE_CONTROLLER or v.node_id == leader_id)
    ]
    return {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "endpoint_type": endpoint_type, "cluster_id": cluster_id, "controller_id": leader_id,
        "brokers": brokers,
    }
