"""Exceptions of the wire codec, split by side.

* :class:`ProtocolError` means *the bytes we received are bad*: a remote peer sent a truncated,
  malformed, oversized or unsupported message. Decoders raise nothing else on any input, so a
  server can catch this one type, answer an error where it can and close the connection.
* :class:`EncodeError` means *we were asked to encode something impossible*: a local misuse
  (a value out of range, a missing required field, an unsupported API version). It is a
  :class:`ValueError`, never a :class:`ProtocolError`, so it is never mistaken for a peer's fault.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Received bytes violate Kafka's wire protocol (truncated, malformed or unsupported)."""


class UnsupportedVersionError(ProtocolError):
    """A request names an API key or version this codec does not implement.

    ``correlation_id`` is set when the header was readable that far, so a server can still answer
    with UNSUPPORTED_VERSION (for ApiVersions: a v0 response, as Kafka's KIP-511 does).
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int | None = None) -> None:
        super().__init__(f"unsupported api key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class FrameTooLargeError(ProtocolError):
    """A frame's size prefix exceeds the configured maximum; raised before the body is buffered."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {max_frame_bytes}")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class EncodeError(ValueError):
    """A local value cannot be encoded (wrong type, out of range, unsupported version)."""


class SchemaError(Exception):
    """A schema definition is inconsistent; raised when a schema is compiled (a programming bug)."""
