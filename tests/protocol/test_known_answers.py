"""Known-answer tests: bytes computed by hand from Kafka's protocol guide and schema files."""

from __future__ import annotations

from typing import Any

from kraft_spark.protocol import (
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

TOPIC = "__cluster_metadata"
TOPIC_HEX = TOPIC.encode().hex()  # 18 bytes


def _hex(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts).replace(" ", ""))


def test_api_versions_v0_request() -> None:
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, "ab", {})
    expected = _hex(
        "0000000c",  # size 12
        "0012 0000 00000001",  # api key 18, version 0, correlation id 1
        "0002 6162",  # header v1: client id "ab" as int16-length string; empty body
    )
    assert frame == expected
    header, body = decode_request(expected[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 0, 1)
    assert header.client_id == "ab"
    assert body == {}


def test_api_versions_v3_request_uses_header_v2() -> None:
    body = {"client_software_name": "ks", "client_software_version": "1"}
    frame = encode_request(ApiKey.API_VERSIONS, 3, 2, None, body)
    expected = _hex(
        "00000011",  # size 17
        "0012 0003 00000002",
        "ffff",  # null client id, still a classic string in header v2
        "00",  # header tagged fields
        "03 6b73",  # compact "ks"
        "02 31",  # compact "1"
        "00",  # body tagged fields
    )
    assert frame == expected
    assert decode_request(expected[4:])[1] == body


def test_vote_v0_request() -> None:
    body = {
        "cluster_id": "x",
        "topics": [
            {
                "topic_name": TOPIC,
                "partitions": [
                    {
                        "partition_index": 0,
                        "candidate_epoch": 5,
                        "candidate_id": 1,
                        "last_offset_epoch": 4,
                        "last_offset": 100,
                    }
                ],
            }
        ],
    }
    expected = _hex(
        "0000003e",  # size 62
        "0034 0000 00000007 0001 63 00",  # Vote(52) v0, corr 7, client "c", header tags
        "02 78",  # cluster id: compact nullable "x"
        "02",  # topics: compact array of 1
        "13",
        TOPIC_HEX,  # compact "__cluster_metadata"
        "02",  # partitions: 1
        "00000000 00000005 00000001 00000004 0000000000000064",
        "00 00 00",  # tagged fields of partition, topic, body
    )
    assert encode_request(ApiKey.VOTE, 0, 7, "c", body) == expected
    header, decoded = decode_request(expected[4:])
    assert header.correlation_id == 7
    assert decoded == body


def test_vote_v0_response() -> None:
    body = {
        "error_code": 0,
        "topics": [
            {
                "topic_name": TOPIC,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "leader_id": -1,
                        "leader_epoch": 6,
                        "vote_granted": True,
                    }
                ],
            }
        ],
    }
    expected = _hex(
        "00000009 00",  # response header v1: correlation id 9, tags
        "0000 02 13",
        TOPIC_HEX,
        "02 00000000 0000 ffffffff 00000006 01 00 00 00",
    )
    assert encode_response(ApiKey.VOTE, 0, 9, body)[4:] == expected
    assert decode_response(ApiKey.VOTE, 0, expected) == (9, body)


def test_begin_quorum_epoch_v0_is_not_flexible() -> None:
    body = {
        "cluster_id": None,
        "topics": [
            {
                "topic_name": "t",
                "partitions": [{"partition_index": 0, "leader_id": 2, "leader_epoch": 3}],
            }
        ],
    }
    expected = _hex(
        "0035 0000 00000001 ffff",  # header v1, null client id, no tags
        "ffff",  # null cluster id (int16 length)
        "00000001 0001 74",  # one topic "t"
        "00000001 00000000 00000002 00000003",
    )
    frame = encode_request(ApiKey.BEGIN_QUORUM_EPOCH, 0, 1, None, body)
    assert frame[4:] == expected
    assert decode_request(expected)[1] == body


def test_end_quorum_epoch_v0_preferred_successors() -> None:
    body = {
        "cluster_id": "c",
        "topics": [
            {
                "topic_name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 9,
                        "preferred_successors": [2, 0],
                    }
                ],
            }
        ],
    }
    expected = _hex(
        "0001 63 00000001 0001 74 00000001",
        "00000000 00000001 00000009 00000002 00000002 00000000",
    )
    codec_frame = encode_request(ApiKey.END_QUORUM_EPOCH, 0, 5, "n", body)
    assert codec_frame[4 + 11 :] == expected  # skip the 11-byte header v1 with client "n"
    assert decode_request(codec_frame[4:])[1] == body


def _describe_body(v1: bool) -> dict[str, Any]:
    replica: dict[str, Any] = {"replica_id": 1, "log_end_offset": 10}
    if v1:
        replica |= {"last_fetch_timestamp": 7, "last_caught_up_timestamp": -1}
    return {
        "error_code": 0,
        "topics": [
            {
                "topic_name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "leader_id": 1,
                        "leader_epoch": 2,
                        "high_watermark": 10,
                        "current_voters": [replica],
                        "observers": [],
                    }
                ],
            }
        ],
    }


def test_describe_quorum_v0_and_v1_responses() -> None:
    prefix = "00000003 00 0000 02 0274 02 00000000 0000 00000001 00000002 000000000000000a"
    v0 = _hex(prefix, "02 00000001 000000000000000a 00", "01 00 00 00")
    v1 = _hex(
        prefix,
        "02 00000001 000000000000000a 0000000000000007 ffffffffffffffff 00",
        "01 00 00 00",
    )
    assert encode_response(ApiKey.DESCRIBE_QUORUM, 0, 3, _describe_body(False))[4:] == v0
    assert encode_response(ApiKey.DESCRIBE_QUORUM, 1, 3, _describe_body(True))[4:] == v1
    # Our own tagged field (absent from Kafka's bytes) decodes to its default.
    untagged = {
        "kraft_spark_cluster_id": None, "kraft_spark_node_endpoints": [],
        "kraft_spark_log_start": {
            "log_start_offset": -1, "snapshot_end_offset": -1, "snapshot_epoch": -1,
        },
        "kraft_spark_target_voters": [],
    }
    assert decode_response(ApiKey.DESCRIBE_QUORUM, 0, v0) == (3, _describe_body(False) | untagged)
    assert decode_response(ApiKey.DESCRIBE_QUORUM, 1, v1) == (3, _describe_body(True) | untagged)


def test_fetch_v12_response_tagged_diverging_epoch() -> None:
    body = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "high_watermark": 5,
                        "diverging_epoch": {"epoch": 3, "end_offset": 10},
                        "records": None,
                    }
                ],
            }
        ]
    }
    expected = _hex(
        "00000001 00",  # header v1
        "00000000 0000 00000000",  # throttle, error, session id
        "02 02 74",  # one topic "t"
        "02 00000000 0000 0000000000000005",  # partition 0, no error, HW 5
        "ffffffffffffffff ffffffffffffffff",  # last stable offset, log start offset
        "01",  # aborted transactions: empty (not null)
        "ffffffff",  # preferred read replica
        "00",  # records: null
        "01 00 0d 00000003 000000000000000a 00",  # tags: DivergingEpoch (tag 0, 13 bytes
        # including the struct's own empty tagged-field section)
        "00 00",  # topic tags, body tags
    )
    assert encode_response(ApiKey.FETCH, 12, 1, body)[4:] == expected
    _, decoded = decode_response(ApiKey.FETCH, 12, expected)
    partition = decoded["responses"][0]["partitions"][0]
    assert partition["diverging_epoch"] == {"epoch": 3, "end_offset": 10}
    # absent tagged structs decode to their defaults, as in Kafka
    assert partition["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    assert partition["snapshot_id"] == {"end_offset": -1, "epoch": -1}


def test_fetch_v12_request_cluster_id_is_tagged() -> None:
    body = {
        "cluster_id": "c",
        "replica_id": 1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": 2,
                        "fetch_offset": 7,
                        "last_fetched_epoch": 2,
                        "partition_max_bytes": 1024,
                    }
                ],
            }
        ],
    }
    expected = _hex(
        "00000001 000001f4 00000001 7fffffff 00 00000000 ffffffff",
        "02 02 74 02 00000000 00000002 0000000000000007 00000002 ffffffffffffffff 00000400 00 00",
        "01",  # forgotten topics: empty
        "01",  # rack id: ""
        "01 00 02 0263",  # tags: ClusterId (tag 0, 2 bytes: compact "c")
    )
    frame = encode_request(ApiKey.FETCH, 12, 1, None, body)
    assert frame[4 + 11 :] == expected  # header v2 with a null client id is 11 bytes
    _, decoded = decode_request(frame[4:])
    assert decoded["cluster_id"] == "c"
    assert decoded["rack_id"] == ""
    assert decoded["session_epoch"] == -1


def test_api_versions_v3_response_uses_header_v0() -> None:
    body = {
        "error_code": 0,
        "api_keys": [{"api_key": 52, "min_version": 0, "max_version": 0}],
        "throttle_time_ms": 0,
        "zk_migration_ready": True,
    }
    expected = _hex(
        "00000004",  # header v0 even though v3 is flexible: no tagged fields
        "0000 02 0034 0000 0000 00 00000000",
        "01 03 01 01",  # tags: ZkMigrationReady (tag 3, 1 byte: true)
    )
    assert encode_response(ApiKey.API_VERSIONS, 3, 4, body)[4:] == expected
    _, decoded = decode_response(ApiKey.API_VERSIONS, 3, expected)
    assert decoded["zk_migration_ready"] is True
    assert decoded["finalized_features_epoch"] == -1
    assert decoded["supported_features"] == []
