"""Metadata (api key 3): the schema against bytes Kafka 4.4's own classes wrote, and the answer
a node gives (``kraft_spark.protocol.wire_metadata``), with DescribeCluster's matching broker view.

The ``KAFKA_*`` hex strings were produced once with ``MetadataRequestData`` /
``MetadataResponseData`` from kafka-clients 4.4.0 (``MessageUtil.toByteBufferAccessor``): two
topics asked for, ``t`` by name and, from v12 on, one by id; answered as a broker answers for
topics it does not have (3 = UNKNOWN_TOPIC_OR_PARTITION, 100 = UNKNOWN_TOPIC_ID), with broker
2 at 127.0.0.1:9093 as the controller of cluster ``abc``.
"""

from __future__ import annotations

import uuid

import pytest

from kraft_spark.protocol import (
    ApiKey,
    ErrorCode,
    decode_request,
    encode_response,
    supported_api_versions,
)
from kraft_spark.protocol.messages_metadata import METADATA_REQUEST, METADATA_RESPONSE
from kraft_spark.protocol.primitives import NIL_UUID
from kraft_spark.protocol.wire_metadata import metadata_body
from kraft_spark.protocol.wire_voters import describe_cluster_body
from kraft_spark.raft.voter_set import VoterSet

TOPIC_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")

KAFKA_REQUESTS = {
    9: "0202740000000100",
    10: "020000000000000000000000000000000002740000000100",
    12: "03000000000000000000000000000000000274000102030405060708090a0b0c0d0e0f100000000100",
    13: "03000000000000000000000000000000000274000102030405060708090a0b0c0d0e0f100000000100",
}
KAFKA_RESPONSES = {
    9: (
        "0000000002000000020a3132372e302e302e31000023850000046162630000000202000302740001"
        "80000000008000000000"
    ),
    10: (
        "0000000002000000020a3132372e302e302e31000023850000046162630000000202000302740000"
        "0000000000000000000000000000000180000000008000000000"
    ),
    12: (
        "0000000002000000020a3132372e302e302e31000023850000046162630000000203000302740000"
        "0000000000000000000000000000000180000000000064000102030405060708090a0b0c0d0e0f10"
        "0001800000000000"
    ),
    13: (
        "0000000002000000020a3132372e302e302e31000023850000046162630000000203000302740000"
        "0000000000000000000000000000000180000000000064000102030405060708090a0b0c0d0e0f10"
        "00018000000000000000"
    ),
}
# The Metadata request kafka-metadata-quorum.sh --bootstrap-server sent (observed on the
# wire): header v2 (api 3, v13, correlation 2, client "adminclient-1"), then Topics=[] (ask
# for brokers only), AllowAutoTopicCreation=true, IncludeTopicAuthorizedOperations=false.
TOOL_FRAME = "0003000d00000002000d61646d696e636c69656e742d3100" + "01010000"


def test_served_versions_are_what_api_versions_advertises() -> None:
    assert METADATA_REQUEST.valid == METADATA_RESPONSE.valid
    advertised = [a for a in supported_api_versions() if a["api_key"] == ApiKey.METADATA]
    assert advertised == [{"api_key": 3, "min_version": 9, "max_version": 13}]


def test_the_request_kafkas_tool_sends_decodes() -> None:
    header, body = decode_request(bytes.fromhex(TOOL_FRAME))
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 13, 2)
    assert header.client_id == "adminclient-1"
    assert body == {
        "topics": [],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }


@pytest.mark.parametrize("version", sorted(KAFKA_REQUESTS))
def test_kafkas_request_bytes_decode_and_encode_back(version: int) -> None:
    codec = METADATA_REQUEST.codec(version)
    data = bytes.fromhex(KAFKA_REQUESTS[version])
    body = codec.decode(data)
    names = [t["name"] for t in body["topics"]]
    assert names == (["t", None] if version >= 12 else ["t"])
    assert body["allow_auto_topic_creation"] is False
    assert body["include_topic_authorized_operations"] is True
    assert codec.encode(body) == data


@pytest.mark.parametrize("version", sorted(KAFKA_RESPONSES))
def test_our_answer_to_kafkas_request_is_the_bytes_kafka_writes(version: int) -> None:
    request = METADATA_REQUEST.codec(version).decode(bytes.fromhex(KAFKA_REQUESTS[version]))
    answer = metadata_body(version, "abc", 2, ("127.0.0.1", 9093), request)
    codec = METADATA_RESPONSE.codec(version)
    assert codec.encode(answer) == bytes.fromhex(KAFKA_RESPONSES[version])
    assert codec.decode(codec.encode(answer))["controller_id"] == 2


@pytest.mark.parametrize("version", range(9, 14))
def test_every_served_version_round_trips_a_full_answer(version: int) -> None:
    request = {"topics": [{"name": "a", "topic_id": NIL_UUID}]}
    frame = encode_response(
        ApiKey.METADATA, version, 7, metadata_body(version, "c", 1, ("h", 1), request)
    )
    codec = METADATA_RESPONSE.codec(version)
    header_bytes = 4 + 4 + 1  # size, correlation id, response header v1's empty tag section
    body = codec.decode(frame[header_bytes:])
    assert body["brokers"] == [{"node_id": 1, "host": "h", "port": 1, "rack": None}]
    assert body["cluster_id"] == "c"
    assert [t["error_code"] for t in body["topics"]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_a_null_topic_list_asks_for_all_topics_of_which_there_are_none() -> None:
    # Kafka's bytes for MetadataRequestData().setTopics(null) at v9 and at v12.
    for version, data in ((9, "0001000000"), (12, "00010000")):
        request = METADATA_REQUEST.codec(version).decode(bytes.fromhex(data))
        assert request["topics"] is None and request["allow_auto_topic_creation"] is True
        assert metadata_body(version, "c", 0, ("h", 1), request)["topics"] == []


def test_without_a_known_leader_no_broker_is_listed() -> None:
    for leader, where in ((-1, None), (-1, ("h", 1)), (2, None)):
        answer = metadata_body(13, "c", leader, where, {"topics": []})
        assert answer["brokers"] == [] and answer["controller_id"] == -1
        assert answer["cluster_id"] == "c" and answer["error_code"] == 0


def test_topics_all_none_twice_and_malformed() -> None:
    assert metadata_body(13, "c", 0, ("h", 1), {"topics": None})["topics"] == []
    twice = {"topics": [{"name": "x", "topic_id": NIL_UUID}] * 3}
    assert [t["name"] for t in metadata_body(13, "c", 0, ("h", 1), twice)["topics"]] == ["x"]
    # v10 and v11 carry a TopicId field but Kafka forbids a null name there; v12 asks by id.
    by_id = {"topics": [{"name": None, "topic_id": TOPIC_ID}]}
    (bad,) = metadata_body(10, "c", 0, ("h", 1), by_id)["topics"]
    assert (bad["error_code"], bad["name"]) == (ErrorCode.INVALID_REQUEST, "")
    (unknown,) = metadata_body(12, "c", 0, ("h", 1), by_id)["topics"]
    assert (unknown["error_code"], unknown["name"], unknown["topic_id"]) == (
        ErrorCode.UNKNOWN_TOPIC_ID,
        None,
        TOPIC_ID,
    )
    # Each answer encodes at its version (a null name only where Kafka allows one).
    METADATA_RESPONSE.codec(10).encode(metadata_body(10, "c", 0, ("h", 1), by_id))
    METADATA_RESPONSE.codec(12).encode(metadata_body(12, "c", 0, ("h", 1), by_id))


def test_describe_cluster_for_brokers_lists_the_leader_alone() -> None:
    voters = VoterSet.of_ids([0, 1, 2]).with_endpoints({i: ("h", 9000 + i) for i in range(3)})
    brokers = describe_cluster_body("c", 1, voters, 1)
    assert brokers["error_code"] == 0 and brokers["controller_id"] == 1
    assert [(b["broker_id"], b["port"]) for b in brokers["brokers"]] == [(1, 9001)]
    controllers = describe_cluster_body("c", 1, voters, 2)
    assert [b["broker_id"] for b in controllers["brokers"]] == [0, 1, 2]
    assert describe_cluster_body("c", -1, voters, 1)["brokers"] == []
    unknown = describe_cluster_body("c", 1, voters, 7)
    assert unknown["error_code"] == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE and not unknown["brokers"]
