"""The append router's HTTP framing, sans I/O."""

from __future__ import annotations

import pytest

from kraft_spark.proxy.messages import (
    MAX_HEAD_BYTES,
    BadRequest,
    RequestReader,
    ResponseWatcher,
    error_response,
)


def test_a_whole_request_is_forwarded_as_it_came() -> None:
    raw = b"POST /v1/records?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}"
    (request,) = RequestReader().feed(raw)
    assert (request.method, request.path, request.body, request.keep_alive) == (
        "POST", "/v1/records", b"{}", True)
    assert request.encode() == raw


def test_pipelined_and_split_requests_are_cut_at_their_boundaries() -> None:
    reader = RequestReader()
    first = b"POST /v1/records HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    second = b"GET /v1/quorum HTTP/1.1\r\nConnection: close\r\n\r\n"
    assert reader.feed(first[:10]) == []
    assert reader.in_message
    done = reader.feed(first[10:] + second)
    assert [(r.method, r.path, r.body, r.keep_alive) for r in done] == [
        ("POST", "/v1/records", b"abc", True), ("GET", "/v1/quorum", b"", False)]
    # Neither came as one whole chunk: re-framed, hop-by-hop headers dropped.
    assert done[0].raw is None
    assert done[1].encode() == b"GET /v1/quorum HTTP/1.1\r\ncontent-length: 0\r\n\r\n"


def test_a_chunked_body_is_sent_on_with_a_length() -> None:
    reader = RequestReader()
    head = b"POST /v1/records HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert reader.feed(head + b"2\r\n{}\r\n") == []
    (request,) = reader.feed(b"0\r\n\r\n")
    assert request.body == b"{}"
    assert b"content-length: 2\r\n" in request.encode()
    assert b"chunked" not in request.encode().lower()


@pytest.mark.parametrize(("data", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 1) + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 501),
], ids=["garbage", "huge-head", "upgrade"])
def test_bad_requests_get_a_status_and_a_reason(data: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as bad:
        RequestReader().feed(data)
    assert bad.value.status == status and bad.value.detail


def test_the_watcher_sees_each_response_of_a_connection_end() -> None:
    watcher = ResponseWatcher()
    assert not watcher.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab")
    assert watcher.feed(b"cd") and watcher.keep_alive and watcher.status == 200
    with pytest.raises(BadRequest):  # bytes after the answer, before the next request
        watcher.feed(b"HTTP/1.1 200 OK\r\n")
    watcher.expect()
    assert watcher.feed(b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n"
                        b"transfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
    assert (watcher.status, watcher.keep_alive) == (503, False)


def test_the_routers_own_errors_are_the_apis_shape() -> None:
    watcher = ResponseWatcher()
    assert watcher.feed(error_response(502, "upstream gone"))
    assert watcher.status == 502 and not watcher.keep_alive
    assert error_response(502, "upstream gone").endswith(b'{"detail": "upstream gone"}')


def test_expect_100_continue_is_answered_here_and_not_forwarded() -> None:
    reader = RequestReader()
    head = (b"POST /v1/records HTTP/1.1\r\nContent-Length: 2\r\n"
            b"Expect: 100-continue\r\n\r\n")
    assert reader.feed(head) == [] and reader.continue_wanted
    (request,) = reader.feed(b"{}")
    assert not reader.continue_wanted
    assert b"expect" not in request.encode().lower()


def test_an_interim_answer_is_relayed_and_the_final_one_awaited() -> None:
    watcher = ResponseWatcher()
    assert not watcher.feed(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert watcher.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    assert watcher.status == 200
