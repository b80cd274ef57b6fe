"""FrameDecoder: chunking independence, size limits, and a fuzz run with the request decoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_spark.protocol import (
    API_SPECS,
    FrameDecoder,
    FrameTooLargeError,
    ProtocolError,
    decode_request,
    encode_request,
    frame,
)

from .strategies import body_strategy

MAX = 1024


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    out: list[bytes] = []
    pos = 0
    for cut in cuts:
        if pos >= len(data):
            break
        out.append(data[pos : pos + cut])
        pos += cut
    out.append(data[pos:])
    return out


def _feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[bytes]:
    frames: list[bytes] = []
    for chunk in chunks:
        frames.extend(decoder.feed(chunk))
    return frames


def test_frames_split_anywhere() -> None:
    stream = frame(b"abc") + frame(b"") + frame(b"x" * 10)
    assert FrameDecoder(MAX).feed(stream) == [b"abc", b"", b"x" * 10]
    decoder = FrameDecoder(MAX)
    assert decoder.feed(stream[:5]) == []
    assert decoder.buffered == 5
    assert decoder.feed(stream[5:]) == [b"abc", b"", b"x" * 10]
    assert decoder.buffered == 0


def test_oversized_frame_fails_before_the_body_arrives() -> None:
    decoder = FrameDecoder(MAX)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", MAX + 1)[2:])  # only the size prefix, no body
    assert (info.value.size, info.value.max_frame_bytes) == (MAX + 1, MAX)
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError):  # the decoder stays failed: the stream is lost
        decoder.feed(frame(b"ok"))


def test_negative_size_is_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder(MAX).feed(b"\xff\xff\xff\xfe")


def test_frame_at_the_limit_is_accepted() -> None:
    assert FrameDecoder(4).feed(frame(b"1234")) == [b"1234"]
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(4).feed(frame(b"12345")[:4])


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), max_size=6),
    cuts=st.lists(st.integers(1, 16), max_size=30),
)
def test_byte_by_byte_equals_whole(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    whole = FrameDecoder(MAX).feed(stream)
    assert whole == payloads
    assert _feed_all(FrameDecoder(MAX), [stream[i : i + 1] for i in range(len(stream))]) == whole
    assert _feed_all(FrameDecoder(MAX), _chunks(stream, cuts)) == whole


def _request_frame(case: tuple[int, int]) -> st.SearchStrategy[bytes]:
    api_key, version = case
    schema = API_SPECS[api_key].request
    return body_strategy(schema, version).map(
        lambda body: encode_request(api_key, version, 7, "fuzz", body)
    )


_CASES = [(k, v) for k, s in API_SPECS.items() for v in range(s.min_version, s.max_version + 1)]
_VALID_FRAME = st.sampled_from(_CASES).flatmap(_request_frame)


@st.composite
def _mutated_frame(draw: st.DrawFn) -> bytes:
    """A valid request whose payload is damaged but whose size prefix stays consistent."""
    payload = bytearray(draw(_VALID_FRAME)[4:])
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, max(len(payload) - 1, 0)))
        if payload and draw(st.booleans()):
            payload[pos] = draw(st.integers(0, 255))
        else:
            del payload[pos:]
    return frame(bytes(payload))


def _garbage_request(case: tuple[int, int], tail: bytes) -> bytes:
    """A supported api key and version followed by random bytes."""
    return frame(struct.pack(">hhi", case[0], case[1], 1) + tail)


_STREAM_ITEM = st.one_of(
    _VALID_FRAME,
    _mutated_frame(),
    st.builds(_garbage_request, st.sampled_from(_CASES), st.binary(max_size=32)),
    st.binary(max_size=24).map(frame),  # well framed garbage
    st.binary(max_size=12),  # raw garbage that may break the framing
)


@settings(
    max_examples=2500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(items=st.lists(_STREAM_ITEM, max_size=4), cuts=st.lists(st.integers(1, 64), max_size=8))
def test_fuzz_frame_decoder_and_request_decoder(items: list[bytes], cuts: list[int]) -> None:
    """A server loop in miniature: any byte stream yields frames, requests or ProtocolError."""
    decoder = FrameDecoder(MAX)
    for chunk in _chunks(b"".join(items), cuts):
        try:
            frames = decoder.feed(chunk)
        except ProtocolError:
            with pytest.raises(ProtocolError):
                decoder.feed(b"")
            return
        for payload in frames:
            try:
                header, body = decode_request(payload)
            except ProtocolError:
                continue
            assert API_SPECS[header.api_key].supports(header.api_version)
            assert isinstance(body, dict)
