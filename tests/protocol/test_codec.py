"""Property tests of the generic codec over every schema and version.

Strategies come from the schemas (see ``strategies.py``), so a new message is covered for free.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_spark.protocol import EncodeError, ProtocolError, SchemaError
from kraft_spark.protocol.codec import BodyCodec
from kraft_spark.protocol.fields import Field, snake_case
from kraft_spark.protocol.messages import ALL_SCHEMAS as CORE_SCHEMAS
from kraft_spark.protocol.messages import FETCH_REQUEST, VOTE_REQUEST
from kraft_spark.protocol.messages_kip853 import ALL_KIP853_SCHEMAS
from kraft_spark.protocol.messages_metadata import ALL_METADATA_SCHEMAS
from kraft_spark.protocol.schema import MessageSchema

from .strategies import body_strategy

ALL_SCHEMAS = CORE_SCHEMAS + ALL_KIP853_SCHEMAS + ALL_METADATA_SCHEMAS

CASES = [(s, v) for s in ALL_SCHEMAS for v in s.valid.versions()]
IDS = [f"{s.name}-v{v}" for s, v in CASES]

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("schema", ALL_SCHEMAS, ids=[s.name for s in ALL_SCHEMAS])
def test_schemas_are_valid(schema: MessageSchema) -> None:
    schema.validate()


@pytest.mark.parametrize(("schema", "version"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_round_trip(schema: MessageSchema, version: int, data: st.DataObject) -> None:
    codec = schema.codec(version)
    body = data.draw(body_strategy(schema, version))
    encoded = codec.encode(body)
    assert codec.decode(encoded) == body
    assert codec.encode(codec.decode(encoded)) == encoded  # the encoding is canonical


@pytest.mark.parametrize(("schema", "version"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_mutated_bytes_decode_or_raise_protocol_error(
    schema: MessageSchema, version: int, data: st.DataObject
) -> None:
    codec = schema.codec(version)
    encoded = bytearray(codec.encode(data.draw(body_strategy(schema, version))))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        pos = data.draw(st.integers(0, len(encoded)))
        if op == "flip" and pos < len(encoded):
            encoded[pos] = data.draw(st.integers(0, 255))
        elif op == "truncate":
            del encoded[pos:]
        else:
            encoded[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    _decode_or_protocol_error(codec, bytes(encoded))


@pytest.mark.parametrize(("schema", "version"), CASES, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(raw=st.binary(max_size=64))
def test_random_bytes_decode_or_raise_protocol_error(
    schema: MessageSchema, version: int, raw: bytes
) -> None:
    _decode_or_protocol_error(schema.codec(version), raw)


def _decode_or_protocol_error(codec: BodyCodec, raw: bytes) -> None:
    try:
        body = codec.decode(raw)
    except ProtocolError:
        return
    assert isinstance(body, dict)
    codec.encode(body)  # whatever decodes re-encodes


def test_missing_fields_take_defaults() -> None:
    codec = FETCH_REQUEST.codec(12)
    decoded = codec.decode(codec.encode({"topics": [{"topic": "t", "partitions": [{}]}]}))
    assert decoded["replica_id"] == -1
    assert decoded["max_bytes"] == 0x7FFFFFFF
    assert decoded["cluster_id"] is None
    partition = decoded["topics"][0]["partitions"][0]
    assert partition["current_leader_epoch"] == -1
    assert partition["last_fetched_epoch"] == -1
    assert codec.default() == codec.decode(codec.encode({}))


def _keys(fields: tuple[Field, ...], version: int) -> dict[str, Any]:
    return {f.key: _keys(f.fields, version) or None for f in fields if f.present_in(version)}


def test_field_lists_at_our_versions() -> None:
    """Golden field lists, checked by hand against Kafka's schema JSON at these versions."""
    from kraft_spark.protocol import messages as m

    replica_v0 = {"replica_id": None, "log_end_offset": None}
    replica_v1 = replica_v0 | {"last_fetch_timestamp": None, "last_caught_up_timestamp": None}
    for version, replica in [(0, replica_v0), (1, replica_v1)]:
        partition = _keys(m.DESCRIBE_QUORUM_RESPONSE.fields, version)["topics"]["partitions"]
        assert partition["current_voters"] == replica
        assert partition["observers"] == replica
    fetch = _keys(m.FETCH_REQUEST.fields, 12)
    assert list(fetch) == [
        "cluster_id", "replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level",
        "session_id", "session_epoch", "topics", "forgotten_topics_data", "rack_id",
        "kraft_spark_replica_directory_id", "kraft_spark_catching_up",
    ]  # fmt: skip
    assert list(fetch["topics"]["partitions"]) == [
        "partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch",
        "log_start_offset", "partition_max_bytes",
    ]  # fmt: skip
    produce = _keys(m.PRODUCE_RESPONSE.fields, 9)
    assert "current_leader" not in produce["responses"]["partition_responses"]  # v10+
    assert "node_endpoints" not in produce  # v10+
    produce10 = _keys(m.PRODUCE_RESPONSE.fields, 10)
    assert "current_leader" in produce10["responses"]["partition_responses"]
    assert "node_endpoints" in produce10
    assert list(_keys(m.END_QUORUM_EPOCH_REQUEST.fields, 0)["topics"]["partitions"]) == [
        "partition_index", "leader_id", "leader_epoch", "preferred_successors",
    ]  # fmt: skip


def _with_tags(prefix: bytes, tags: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(prefix)
    out.append(len(tags))
    for tag, payload in tags:
        out += bytes([tag, len(payload)]) + payload
    return bytes(out)


def test_unknown_tagged_fields_are_skipped() -> None:
    codec = VOTE_REQUEST.codec(0)
    body: dict[str, Any] = {"cluster_id": None, "topics": []}
    plain = codec.encode(body)
    assert plain.hex() == "000100"  # null cluster id, empty topics, no tags
    with_unknown = _with_tags(plain[:-1], [(5, b"abc"), (9, b"")])
    assert codec.decode(with_unknown) == body


def test_known_tag_must_fill_its_size() -> None:
    codec = FETCH_REQUEST.codec(12)
    plain = codec.encode({})
    assert plain[-1] == 0
    good = _with_tags(plain[:-1], [(0, b"\x02c")])
    assert codec.decode(good)["cluster_id"] == "c"
    with pytest.raises(ProtocolError):
        codec.decode(_with_tags(plain[:-1], [(0, b"\x02cX")]))  # one byte too many
    with pytest.raises(ProtocolError):
        codec.decode(_with_tags(plain[:-1], [(0, b"\x03c")]))  # string overruns the tag


def test_trailing_bytes_are_rejected() -> None:
    codec = VOTE_REQUEST.codec(0)
    with pytest.raises(ProtocolError):
        codec.decode(codec.encode({}) + b"\x00")


@pytest.mark.parametrize(
    "body",
    [
        {"topics": [{"partitions": [{"candidate_epoch": "five"}]}]},
        {"topics": [{"partitions": [{"last_offset": 2**63}]}]},
        {"topics": [{"topic_name": None}]},
        {"topics": None},
        {"topics": [5]},
        {"cluster_id": b"bytes"},
        [],
    ],
)
def test_bad_values_raise_encode_error(body: Any) -> None:
    with pytest.raises(EncodeError):
        VOTE_REQUEST.codec(0).encode(body)


def test_snake_case() -> None:
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("LastCaughtUpTimestamp") == "last_caught_up_timestamp"
    assert snake_case("TopicId") == "topic_id"


def test_schema_validation_catches_mistakes() -> None:
    bad = MessageSchema(
        "Bad", "0", "none", (Field("X", "int32", "0+", tag=0, tagged_versions="0+"),)
    )
    with pytest.raises(SchemaError):
        bad.validate()
    with pytest.raises(SchemaError):
        MessageSchema("Bad", "0", "0+", (Field("X", "Thing", "0+"),)).validate()
    with pytest.raises(SchemaError):
        VOTE_REQUEST.codec(3)
