"""HTTP/1.1 message boundaries for the append router, sans I/O (httptools, uvicorn's parser).

``RequestReader`` turns the bytes a client sends into whole requests; each is sent upstream
re-serialized (``ProxyRequest.encode``: hop-by-hop headers dropped, the body sent with a
``Content-Length``), so a pipelined or chunked request is split and framed once, here.
``ResponseWatcher`` only watches an upstream answer go by: its bytes are relayed to the client
as they arrive (a streamed watch answer flows on), and the watcher says when it is complete
and whether the upstream connection may carry another request.

Invariant: one upstream connection carries one request at a time, so every byte it sends
between a request and that request's completion belongs to that request's response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final

import httptools

# Kept from the client's request: everything but the hop-by-hop headers (RFC 9110 §7.6.1) and
# the framing, which the proxy writes itself.
_HOP_BY_HOP: Final = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"content-length",
    # The proxy answers ``Expect: 100-continue`` itself (it reads the body before forwarding).
    b"expect",
})
# A request head or body larger than this is refused (413/431): the API's own limits are
# far below (a record's value is at most 1 MiB; a batch at most 8 MiB).
MAX_HEAD_BYTES: Final = 64 * 1024
MAX_BODY_BYTES: Final = 16 * 1024 * 1024


class BadRequest(Exception):
    """The client's bytes are not an HTTP/1.1 request the proxy can forward; ``status`` is
    the answer to give before closing the connection."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(slots=True)
class ProxyRequest:
    method: str
    target: bytes  # path and query, as sent
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    keep_alive: bool = True
    # The request's bytes exactly as the client sent them, when they arrived as one whole
    # chunk: forwarded as they are (the upstream parses the same framing the proxy did).
    raw: bytes | None = None

    @property
    def path(self) -> str:
        return self.target.split(b"?", 1)[0].decode("latin-1")

    def encode(self) -> bytes:
        """The request as sent upstream: as it came when it came whole, else HTTP/1.1, kept
        alive, framed by Content-Length."""
        if self.raw is not None:
            return self.raw
        lines = [b"%s %s HTTP/1.1" % (self.method.encode(), self.target)]
        lines += [b"%s: %s" % (name, value) for name, value in self.headers
                  if name.lower() not in _HOP_BY_HOP]
        lines.append(b"content-length: %d" % len(self.body))
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body


class RequestReader:
    """Feed it a client's bytes; ``feed`` returns the requests they complete, in order."""

    def __init__(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._done: list[ProxyRequest] = []
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self.in_message = False  # part of a request has arrived, not all of it
        # A request's head asked ``Expect: 100-continue`` and its body has not all come: the
        # connection owes the client a ``100 Continue`` (curl waits a second for one).
        self.continue_wanted = False
        self._expects = False

    def feed(self, data: bytes) -> list[ProxyRequest]:
        whole = not self.in_message
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise BadRequest(501, "protocol upgrades are not served on this address") from None
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, BadRequest):  # a limit, raised by a callback
                raise exc.__context__ from None
            raise
        except httptools.HttpParserError as exc:
            raise BadRequest(400, f"malformed HTTP request: {exc}") from None
        done, self._done = self._done, []
        if whole and len(done) == 1 and not self.in_message and not self._expects:
            done[0].raw = data  # the chunk was this request, no more and no less
        return done

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.in_message = True
        self._expects = False
        self._url, self._headers, self._body = b"", [], []
        self._head_bytes = self._body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        self._count_head(len(name) + len(value))

    def on_headers_complete(self) -> None:
        for name, value in self._headers:
            lowered = name.lower()
            if lowered == b"content-length" and value.strip().isdigit() \
                    and int(value) > MAX_BODY_BYTES:
                raise BadRequest(413, f"request body over {MAX_BODY_BYTES} bytes")
            if lowered == b"expect" and value.strip().lower() == b"100-continue":
                self._expects = self.continue_wanted = True

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > MAX_BODY_BYTES:
            raise BadRequest(413, f"request body over {MAX_BODY_BYTES} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.in_message = False
        self.continue_wanted = False  # the body came: nothing to invite any more
        parser = self._parser
        self._done.append(ProxyRequest(
            method=parser.get_method().decode("ascii"), target=self._url,
            headers=self._headers, body=b"".join(self._body),
            keep_alive=parser.should_keep_alive(),
        ))

    def _count_head(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            raise BadRequest(431, f"request head over {MAX_HEAD_BYTES} bytes")


class ResponseWatcher:
    """Watches the responses of one upstream connection go by, one at a time (``feed`` each
    chunk; ``True`` once the current one is complete; ``expect`` before the next)."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._head = False
        self.complete = False
        self.status = 0
        self.keep_alive = True

    def expect(self, *, head: bool = False) -> None:
        self.complete = False
        self._head = head

    def on_headers_complete(self) -> None:
        if self._head and self.status >= 200:
            # A HEAD's answer ends with its head whatever its Content-Length says; the parser
            # cannot be told, so this connection carries nothing more (keep_alive False).
            self.complete, self.keep_alive = True, False

    def feed(self, data: bytes) -> bool:
        if self.complete:
            raise BadRequest(502, "the upstream sent bytes after its complete response")
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise BadRequest(502, f"malformed upstream response: {exc}") from None
        return self.complete

    def on_status(self, status: bytes) -> None:
        self.status = self._parser.get_status_code()

    def on_message_complete(self) -> None:
        if self._head and self.complete:
            return
        if 100 <= self.status < 200:
            return  # an interim answer (100 Continue): the final one follows on the wire
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()


def error_response(status: int, detail: str, *, close: bool = True) -> bytes:
    """A JSON error in the API's shape (``{"detail": ...}``), written by the proxy itself."""
    body = json.dumps({"detail": detail}).encode()
    reason = _REASONS.get(status, b"Error")
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            % (status, reason, len(body)))
    if close:
        head += b"connection: close\r\n"
    return head + b"\r\n" + body


_REASONS: Final = {
    400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    501: b"Not Implemented", 502: b"Bad Gateway", 503: b"Service Unavailable",
    504: b"Gateway Timeout",
}
