"""Kafka's wire protocol, sans I/O: primitives, schemas as data, one generic codec, framing.

Public API (everything a node, a client or a test needs):

* framing: :class:`FrameDecoder` (``feed(bytes) -> list[payload]``), :func:`frame`;
* whole messages: :func:`encode_request` / :func:`decode_request`,
  :func:`encode_response` / :func:`decode_response` (encoders return a complete frame with its
  size prefix; decoders take a payload without it);
* tables: :class:`ApiKey`, :data:`API_SPECS`, :func:`supported_api_versions`,
  :func:`request_header_version`, :func:`response_header_version`, :class:`ErrorCode`;
* errors: :class:`ProtocolError` (bad bytes from a peer; the only exception decoders raise),
  :class:`UnsupportedVersionError` (carries api key, version and correlation id),
  :class:`FrameTooLargeError`, :class:`EncodeError` (local misuse).

Message bodies are plain dicts keyed by the snake_case names of Kafka's fields, nested dicts
for structs and lists for arrays, e.g. a Vote request::

    {"cluster_id": "abc", "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "candidate_epoch": 5, "candidate_id": 1,
         "last_offset_epoch": 4, "last_offset": 100}]}]}

Decoded bodies hold every field of their version; bodies to encode may omit fields, which then
take Kafka's defaults. Error codes are plain ints (compare with :class:`ErrorCode`).
"""

from kraft_spark.protocol.api import (
    API_SPECS,
    ApiKey,
    ApiSpec,
    Body,
    RequestHeader,
    api_spec,
    decode_request,
    decode_request_body,
    decode_response,
    decode_response_body,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
    supported_api_versions,
)
from kraft_spark.protocol.error_codes import ErrorCode, error_name
from kraft_spark.protocol.exceptions import (
    EncodeError,
    FrameTooLargeError,
    ProtocolError,
    SchemaError,
    UnsupportedVersionError,
)
from kraft_spark.protocol.framing import FrameDecoder, frame

METADATA_TOPIC = "__cluster_metadata"
"""The one topic of the quorum's log (partition 0) named in every request."""

__all__ = [
    "API_SPECS",
    "METADATA_TOPIC",
    "ApiKey",
    "ApiSpec",
    "Body",
    "EncodeError",
    "ErrorCode",
    "FrameDecoder",
    "FrameTooLargeError",
    "ProtocolError",
    "RequestHeader",
    "SchemaError",
    "UnsupportedVersionError",
    "api_spec",
    "decode_request",
    "decode_request_body",
    "decode_response",
    "decode_response_body",
    "encode_request",
    "encode_response",
    "error_name",
    "frame",
    "request_header_version",
    "response_header_version",
    "supported_api_versions",
]
