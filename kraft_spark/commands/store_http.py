"""The store API's requests for the short commands (``kv get|put|del|txn``, ``lease ...``), on
the standard library's ``http.client``.

A short command makes one request or a few and exits, so what it costs is its start: httpx's
import (~65 ms: it loads its own command line, click and pygments with it) and its client's
TLS context (~40 ms, certifi's bundle read even for ``http://``) were three quarters of a
``kraft-spark kv get`` (``bench/cli_start.py`` measures it beside ``etcdctl get``). Long-lived
commands (``kv watch``, ``lock``, ``elect``) keep ``KvClient``/``AsyncKvClient``.

It behaves as ``KvClient`` does: the same failover between the endpoints given
(``Endpoints``: a request moves on after no answer or a 502/503/504, and is repeated there only
when ``retry`` says that is harmless or it was never sent), the same bearer token, the same
errors (``KvError``, ``ConditionFailedError`` for a 409), and for ``https://`` the same
certificates as httpx (``$SSL_CERT_FILE``, ``$SSL_CERT_DIR``, else certifi's bundle). One
connection per request: a command's requests are seconds apart at most (a keep-alive loop),
and a reused idle connection the server closed would turn a request never sent into one that
may have been.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Any
from urllib.parse import urlencode, urlsplit

from kraft_spark.client.endpoints import Endpoints
from kraft_spark.client.errors import ConditionFailedError, KvError

__all__ = ["StoreHttp", "Unreachable"]


class Unreachable(Exception):
    """No endpoint answered (the last one's failure is the message)."""


class _NoAnswer(Exception):
    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


def _tls_context() -> Any:
    """httpx's default verification (``httpx._config.create_ssl_context``)."""
    import ssl

    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def checked(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` of a success; the error ``KvClient`` raises for an error answer."""
    if status == 409:
        raise ConditionFailedError(409, str(body.get("error", "")), body)
    if status >= 400:
        raise KvError(status, str(body.get("error", "")), body)
    return body


class StoreHttp:
    """Requests to one HTTP address or several of one quorum (``"http://a,http://b"``)."""

    def __init__(self, urls: str, *, token: str | None, timeout_s: float = 15.0) -> None:
        self.endpoints = Endpoints(urls)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s

    def call(self, method: str, path: str, *, retry: bool, query: dict[str, Any] | None = None,
             body: Any = None, headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, Any]]:
        """The answer's status and JSON body (``{"error": text}`` when it is not JSON), from
        the first endpoint that answers (see the module doc); raises ``Unreachable``."""
        target = path + ("?" + urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        sent = {**self._headers, **(headers or {})}
        if data is not None:
            sent["Content-Type"] = "application/json"
        urls = self.endpoints.order()
        for i, url in enumerate(urls):
            last = i == len(urls) - 1
            try:
                status, answer = self._once(url, method, target, data, sent)
            except _NoAnswer as exc:
                if self.endpoints.after_failure(url, sent=exc.sent, last=last, retry=retry):
                    continue
                raise Unreachable(str(exc)) from None
            if self.endpoints.after_answer(url, status, last=last, retry=retry):
                continue
            return status, answer
        raise AssertionError("unreachable: the last endpoint returns or raises")

    def checked(self, method: str, path: str, *, retry: bool, **kwargs: Any) -> dict[str, Any]:
        return checked(*self.call(method, path, retry=retry, **kwargs))

    def _once(self, url: str, method: str, target: str, data: bytes | None,
              headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(url)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname or "", parts.port,
                                               timeout=self._timeout_s, context=_tls_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port,
                                              timeout=self._timeout_s)
        try:
            try:
                self._connect(conn, parts.scheme)
            except OSError as exc:  # refused, unresolvable, timed out: nothing was sent
                raise _NoAnswer(f"{url}: {exc}", sent=False) from None
            try:
                conn.request(method, parts.path + target, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                raise _NoAnswer(f"{url}: {type(exc).__name__}: {exc}", sent=True) from None
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"error": raw.decode(errors="replace")}
        return response.status, answer if isinstance(answer, dict) else {"error": answer}

    def _connect(self, conn: http.client.HTTPConnection, scheme: str) -> None:
        """``conn.connect()``; for ``http://`` with an ASCII host given to ``getaddrinfo`` as
        bytes: as text it loads the IDNA codec on every start (~14 ms, with ``unicodedata``),
        which an ASCII name or an IP address never needs."""
        if scheme == "https" or not conn.host.isascii():
            conn.connect()
            return
        conn.sock = socket.create_connection((conn.host.encode("ascii"), conn.port),  # type: ignore[arg-type]
                                             self._timeout_s)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as connect() does
