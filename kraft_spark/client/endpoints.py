"""The HTTP addresses a store client talks to, and how a key goes into a URL.

**Several endpoints.** ``KvClient("http://a:8080,http://b:8080")`` (or a list) knows several
nodes of one quorum. Requests go to the current one; a request that cannot be answered there
(a refused or timed-out connection, or 502/503/504: the node has no leader or cannot confirm a
read) makes the next one current, and is tried there at once **only when repeating it is
harmless**: reads, watches before their first event, keep-alives (a second one only extends the
lease again), revocations, and writes that carry an ``Idempotency-Key`` (the server applies a
retried write once). Any other write is retried elsewhere only when it was never sent (the
connection was refused or not made in time); otherwise its error is the caller's, who cannot
know whether it applied. One attempt per endpoint and request: the caller's own deadline (a
lock's keep-alive, ``kraft_spark.client.session``) decides what happens after a full round.

**Keys in URLs.** ``GET /v1/kv/{key}`` takes the key as the rest of the path, percent-decoded
by the server. A key is UTF-8 text of any characters: every byte but the unreserved ones is
percent-encoded here (``/`` too, so the key is a single segment: the server reads it back
whole), and a key that is a dot segment (``.``, ``..``) has its dots encoded as well, since an
HTTP client (httpx, curl) removes dot segments from a path before sending it. Query parameters
(``prefix``, ``key`` of a watch) are encoded by httpx.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

if TYPE_CHECKING:  # imported where used: the command line's requests do without httpx
    import httpx

__all__ = ["Endpoints", "failover_status", "key_path", "not_sent", "parse_endpoints"]

# Answers a node gives when it cannot serve now but another node may: no leader known, the
# leader out of reach, a read not confirmed in time.
FAILOVER_STATUSES: Final = frozenset({502, 503, 504})


def parse_endpoints(urls: str | Sequence[str]) -> list[str]:
    """``"http://a,http://b"`` or a list of them → the addresses, without trailing ``/``."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = [u.strip().rstrip("/") for u in items if u.strip()]
    if not out:
        raise ValueError(f"no HTTP endpoint in {urls!r}")
    return out


def key_path(key: str) -> str:
    """The path of ``GET /v1/kv/{key}`` with ``key`` percent-encoded (see the module doc)."""
    encoded = quote(key, safe="")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return f"/v1/kv/{encoded}"


def not_sent(exc: httpx.TransportError) -> bool:
    """True when the request surely never reached a server: no connection was made."""
    import httpx

    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)


def failover_status(status: int) -> bool:
    return status in FAILOVER_STATUSES


class Endpoints:
    """The addresses in a fixed order and the current one; a failure there moves on."""

    def __init__(self, urls: str | Sequence[str]) -> None:
        self.urls = parse_endpoints(urls)
        self._current = 0

    @property
    def current(self) -> str:
        return self.urls[self._current]

    def order(self) -> list[str]:
        """Every address once, the current one first, then the ones after it (wrapping)."""
        n = len(self.urls)
        return [self.urls[(self._current + i) % n] for i in range(n)]

    def failed(self, url: str) -> None:
        """``url`` did not answer: the next address becomes current (unless another request
        moved on already, then that choice stands)."""
        if self.urls[self._current] == url:
            self._current = (self._current + 1) % len(self.urls)

    def after_error(self, url: str, exc: httpx.TransportError, *, last: bool,
                    retry: bool) -> bool:
        """The request to ``url`` failed with ``exc``: the next address becomes current. True
        when the request goes on to it: ``url`` was not the ``last`` to try, and repeating
        the request is harmless (``retry``) or it was never sent; else the caller raises."""
        return self.after_failure(url, sent=not not_sent(exc), last=last, retry=retry)

    def after_failure(self, url: str, *, sent: bool, last: bool, retry: bool) -> bool:
        """``after_error`` for any transport: the request to ``url`` got no answer (``sent``:
        it may have reached the server)."""
        self.failed(url)
        return not last and (retry or not sent)

    def after_answer(self, url: str, status: int, *, last: bool, retry: bool) -> bool:
        """``url`` answered ``status``: on 502/503/504 the next address becomes current. True
        when the request goes on to it (harmless to repeat, and ``url`` not the ``last``);
        else that answer is the caller's."""
        if not failover_status(status):
            return False
        self.failed(url)
        return retry and not last

    def __str__(self) -> str:
        return ",".join(self.urls)
