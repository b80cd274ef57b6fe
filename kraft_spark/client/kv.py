"""The store's client over HTTP (httpx): ``KvClient`` (blocking) and ``AsyncKvClient``.

Reads, conditional writes and watches are served from a node's own copy of the state, so these
clients speak to a node's HTTP API (``kraft.http.listener``, ``kraft-spark local
--node-http-base-port``, or the Spark application's address), not to the Kafka-protocol port
``QuorumClient`` uses::

    from kraft_spark.client import KvClient
    with KvClient("http://127.0.0.1:8080") as kv:
        kv.put("cfg/a", {"n": 1})
        got = kv.get("cfg/a")                         # linearizable by default
        kv.put("cfg/a", {"n": 2}, if_version=got.version)   # compare-and-set
        # raises ConditionFailedError (HTTP 409) if someone wrote cfg/a in between

    async with AsyncKvClient("http://127.0.0.1:8080") as kv:
        async for event in kv.watch(prefix="cfg/", from_offset=0):
            print(event.offset, event.type, event.key, event.value)
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Literal

import httpx

from kraft_spark.client.endpoints import Endpoints, failover_status, key_path
from kraft_spark.client.kv_types import (
    ConditionFailedError,
    KeyValue,
    KvError,
    LeaseInfo,
    WatchEvent,
    WriteResult,
    _lease,
)

Consistency = Literal["linearizable", "serializable"]

__all__ = ["AsyncKvClient", "ConditionFailedError", "KeyValue", "KvClient", "KvError",
           "LeaseInfo", "WatchEvent", "WriteResult"]


def write_body(records: list[tuple[str, Any]], conditions: list[dict[str, Any]] | None,
               lease_id: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"records": [{"key": k, "value": v} for k, v in records]}
    if conditions:
        body["conditions"] = conditions
    if lease_id is not None:
        body["lease_id"] = lease_id
    return body


def conditions_for(key: str, if_version: int | None, if_mod_offset: int | None,
                   if_absent: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if if_version is not None:
        out.append({"key": key, "version": if_version})
    if if_mod_offset is not None:
        out.append({"key": key, "mod_offset": if_mod_offset})
    if if_absent:
        out.append({"key": key, "exists": False})
    return out


def _verify(endpoints: Endpoints) -> bool:
    """httpx's ``verify``: its default (certificates checked against certifi's bundle) when an
    endpoint is ``https://``; else False, which only skips reading that bundle (~40 ms at every
    client's start, most of a short ``kraft-spark`` command's request): no request of this
    client uses TLS, since every one goes to one of these endpoints and redirects are not
    followed."""
    return any(url.startswith("https:") for url in endpoints.urls)


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _range_params(prefix: str, limit: int, consistency: str, page_token: str | None
                  ) -> dict[str, Any]:
    params: dict[str, Any] = {"prefix": prefix, "limit": limit, "consistency": consistency}
    if page_token:
        params["page_token"] = page_token
    return params


def _checked(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text}
    if response.status_code == 409:
        raise ConditionFailedError(409, body.get("error", ""), body)
    if response.status_code >= 400:
        raise KvError(response.status_code, body.get("error", response.text), body)
    return dict(body)


def _key_value(body: dict[str, Any]) -> KeyValue:
    return KeyValue(body["key"], body["value"], body["create_offset"], body["mod_offset"],
                    body["version"], body["offset"])


def _watch_headers(after: str | None) -> dict[str, str]:
    return {"Last-Event-ID": after} if after is not None else {}


def _watch_params(key: str | None, prefix: str | None, from_offset: int | None
                  ) -> dict[str, Any]:
    if (key is None) == (prefix is None):
        raise ValueError("watch exactly one of key and prefix")
    params: dict[str, Any] = {"key": key} if key is not None else {"prefix": prefix}
    if from_offset is not None:
        params["from_offset"] = from_offset
    return params


def _watch_timeout(client: httpx.Timeout) -> httpx.Timeout:
    """A watch waits for its events as long as it takes (no read timeout), but gives up
    connecting as any request does, so that the next endpoint is tried."""
    return httpx.Timeout(None, connect=client.connect)


class _SseLines:
    """Bytes of an event stream → its lines, which end at CRLF, LF or CR only (the SSE
    grammar). Not httpx's ``iter_lines``: it also breaks at U+0085, U+2028 and every other
    ``str.splitlines`` boundary, which a key or a value may hold raw in a ``data`` line. These
    three bytes never occur inside a UTF-8 sequence, so splitting bytes is exact."""

    def __init__(self) -> None:
        self._rest = b""
        self._after_cr = False  # the last chunk ended with CR: an LF first closes no line

    def feed(self, chunk: bytes) -> list[str]:
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        *lines, self._rest = re.split(rb"\r\n|\r|\n", self._rest + chunk)
        return [line.decode("utf-8", errors="replace") for line in lines]


class _SseParser:
    """Server-Sent Events lines → ``WatchEvent``s."""

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}

    def feed(self, line: str) -> WatchEvent | None:
        if line:
            name, _, value = line.partition(":")
            self._fields[name] = value.removeprefix(" ")
            return None
        fields, self._fields = self._fields, {}
        kind = fields.get("event", "message")
        data = json.loads(fields.get("data") or "{}")
        if kind in ("put", "delete"):
            return WatchEvent(kind, data["offset"], data["key"], data.get("value"),
                              fields.get("id"))
        if kind == "progress":
            return WatchEvent(kind, data["offset"], id=fields.get("id"))
        if kind == "cancelled":
            return WatchEvent(kind, data.get("resume_offset", -1), None, data.get("reason"),
                              data.get("resume_id"))
        return None


class KvClient:
    """Blocking store client for one HTTP address, or several of one quorum (``"http://a,
    http://b"`` or a list: ``kraft_spark.client.endpoints`` tells when it moves on)."""

    def __init__(self, url: str | Sequence[str], *, token: str | None = None,
                 timeout_s: float = 15.0) -> None:
        self.endpoints = Endpoints(url)
        # Every request names its endpoint in full; base_url only serves a relative one made
        # on ``_http`` directly (tests do), which goes to the first endpoint as it always did.
        self._http = httpx.Client(base_url=self.endpoints.urls[0], headers=_auth(token),
                                  timeout=timeout_s, verify=_verify(self.endpoints))

    def _send(self, method: str, path: str, *, retry: bool, timeout_s: float | None = None,
              **kwargs: Any) -> httpx.Response:
        """One attempt per endpoint, the current one first (``retry``: repeating the request
        is harmless; see ``kraft_spark.client.endpoints``)."""
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        urls = self.endpoints.order()
        for i, url in enumerate(urls):
            last = i == len(urls) - 1
            try:
                response = self._http.request(method, url + path, **kwargs)
            except httpx.TransportError as exc:
                if self.endpoints.after_error(url, exc, last=last, retry=retry):
                    continue
                raise
            if self.endpoints.after_answer(url, response.status_code, last=last, retry=retry):
                continue
            return response
        raise AssertionError("unreachable: the last endpoint returns or raises")

    def get(self, key: str, *, consistency: Consistency = "linearizable") -> KeyValue | None:
        response = self._send("GET", key_path(key), retry=True,
                              params={"consistency": consistency})
        if response.status_code == 404:
            return None
        return _key_value(_checked(response))

    def range(self, prefix: str = "", *, limit: int = 100,
              consistency: Consistency = "linearizable") -> Iterator[KeyValue]:
        """Every key under ``prefix`` in key order, fetched ``limit`` at a time."""
        token: str | None = None
        while True:
            page = _checked(self._send(
                "GET", "/v1/kv", retry=True,
                params=_range_params(prefix, limit, consistency, token)))
            yield from (_key_value(kv) for kv in page["kvs"])
            token = page.get("next_page_token")
            if not token:
                return

    def txn(self, records: list[tuple[str, Any]], conditions: list[dict[str, Any]] | None = None,
            *, idempotency_key: str | None = None, lease_id: int | None = None) -> WriteResult:
        """Write ``records`` (value None deletes) if every condition holds, all or none;
        ``lease_id``: attach the keys to that lease."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = _checked(self._send(
            "POST", "/v1/records", retry=idempotency_key is not None,
            json=write_body(records, conditions, lease_id), headers=headers))
        return WriteResult(body["base_offset"], body["last_offset"], body["epoch"])

    def put(self, key: str, value: Any, *, if_version: int | None = None,
            if_mod_offset: int | None = None, if_absent: bool = False,
            lease_id: int | None = None) -> WriteResult:
        return self.txn([(key, value)],
                        conditions_for(key, if_version, if_mod_offset, if_absent),
                        lease_id=lease_id)

    def grant_lease(self, ttl_ms: int) -> LeaseInfo:
        return _lease(_checked(self._send("POST", "/v1/leases", retry=False,
                                          json={"ttl_ms": ttl_ms})))

    def keep_alive(self, lease_id: int, *, timeout_s: float | None = None) -> LeaseInfo:
        """Raises KvError (404) once the lease expired or was revoked; ``timeout_s``: per
        endpoint tried (default: the client's)."""
        return _lease(_checked(self._send("POST", f"/v1/leases/{lease_id}/keepalive",
                                          retry=True, timeout_s=timeout_s)))

    def revoke_lease(self, lease_id: int) -> None:
        _checked(self._send("DELETE", f"/v1/leases/{lease_id}", retry=True))

    def leases(self) -> list[LeaseInfo]:
        return [_lease(x) for x in _checked(self._send("GET", "/v1/leases",
                                                       retry=True))["leases"]]

    def delete(self, key: str, *, if_version: int | None = None,
               if_mod_offset: int | None = None) -> WriteResult:
        return self.txn([(key, None)], conditions_for(key, if_version, if_mod_offset, False))

    def watch(self, *, key: str | None = None, prefix: str | None = None,
              from_offset: int | None = None, after: str | None = None
              ) -> Iterator[WatchEvent]:
        """The stream of events; ``after``: resume right after the event whose ``id`` this
        is (wins over ``from_offset``: exact even between the events of one offset)."""
        params = _watch_params(key, prefix, from_offset)
        parser = _SseParser()
        lines = _SseLines()
        with self._open_watch(params, _watch_headers(after)) as response:
            for chunk in response.iter_bytes():
                for line in lines.feed(chunk):
                    event = parser.feed(line)
                    if event is not None:
                        yield event

    @contextlib.contextmanager
    def _open_watch(self, params: dict[str, Any], headers: dict[str, str]
                    ) -> Iterator[httpx.Response]:
        """The stream from the first endpoint that opens it: nothing was delivered before,
        so trying the next one repeats nothing."""
        urls = self.endpoints.order()
        for i, url in enumerate(urls):
            request = self._http.build_request("GET", url + "/v1/watch", params=params,
                                               headers=headers,
                                               timeout=_watch_timeout(self._http.timeout))
            try:
                response = self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                if self.endpoints.after_error(url, exc, last=i == len(urls) - 1, retry=False):
                    continue
                raise
            try:
                if failover_status(response.status_code) and i < len(urls) - 1:
                    self.endpoints.failed(url)
                    continue
                if response.status_code >= 400:
                    response.read()
                    _checked(response)
                yield response
                return
            finally:
                response.close()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncKvClient:
    """asyncio store client for one HTTP address or several (same methods as ``KvClient``)."""

    def __init__(self, url: str | Sequence[str], *, token: str | None = None,
                 timeout_s: float = 15.0) -> None:
        self.endpoints = Endpoints(url)
        self._http = httpx.AsyncClient(base_url=self.endpoints.urls[0], headers=_auth(token),
                                       timeout=timeout_s,  # base_url: as KvClient's
                                       verify=_verify(self.endpoints))

    async def _send(self, method: str, path: str, *, retry: bool,
                    timeout_s: float | None = None, **kwargs: Any) -> httpx.Response:
        """``KvClient._send``'s twin."""
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        urls = self.endpoints.order()
        for i, url in enumerate(urls):
            last = i == len(urls) - 1
            try:
                response = await self._http.request(method, url + path, **kwargs)
            except httpx.TransportError as exc:
                if self.endpoints.after_error(url, exc, last=last, retry=retry):
                    continue
                raise
            if self.endpoints.after_answer(url, response.status_code, last=last, retry=retry):
                continue
            return response
        raise AssertionError("unreachable: the last endpoint returns or raises")

    async def get(self, key: str, *, consistency: Consistency = "linearizable"
                  ) -> KeyValue | None:
        response = await self._send("GET", key_path(key), retry=True,
                                    params={"consistency": consistency})
        if response.status_code == 404:
            return None
        return _key_value(_checked(response))

    async def txn(self, records: list[tuple[str, Any]],
                  conditions: list[dict[str, Any]] | None = None, *,
                  idempotency_key: str | None = None, lease_id: int | None = None
                  ) -> WriteResult:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = _checked(await self._send(
            "POST", "/v1/records", retry=idempotency_key is not None,
            json=write_body(records, conditions, lease_id), headers=headers))
        return WriteResult(body["base_offset"], body["last_offset"], body["epoch"])

    async def put(self, key: str, value: Any, *, if_version: int | None = None,
                  if_mod_offset: int | None = None, if_absent: bool = False,
                  lease_id: int | None = None) -> WriteResult:
        return await self.txn([(key, value)],
                              conditions_for(key, if_version, if_mod_offset, if_absent),
                              lease_id=lease_id)

    async def range(self, prefix: str = "", *, limit: int = 1000,
                    consistency: Consistency = "linearizable") -> list[KeyValue]:
        """Every key under ``prefix`` in key order."""
        out: list[KeyValue] = []
        token: str | None = None
        while True:
            page = _checked(await self._send(
                "GET", "/v1/kv", retry=True,
                params=_range_params(prefix, limit, consistency, token)))
            out += [_key_value(kv) for kv in page["kvs"]]
            token = page.get("next_page_token")
            if not token:
                return out

    async def range_at(self, prefix: str = "", *, consistency: Consistency = "linearizable"
                       ) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` and an offset a watch may continue this read from: the
        first page's (each page is a read of its own, at an offset no lower than the first's;
        that page's state held every committed write below it and none at or above it)."""
        out: list[KeyValue] = []
        token: str | None = None
        first: int | None = None
        while True:
            page = _checked(await self._send(
                "GET", "/v1/kv", retry=True,
                params=_range_params(prefix, 1000, consistency, token)))
            first = int(page["offset"]) if first is None else first
            out += [_key_value(kv) for kv in page["kvs"]]
            token = page.get("next_page_token")
            if not token:
                return out, first

    async def grant_lease(self, ttl_ms: int) -> LeaseInfo:
        return _lease(_checked(await self._send("POST", "/v1/leases", retry=False,
                                                json={"ttl_ms": ttl_ms})))

    async def keep_alive(self, lease_id: int, *, timeout_s: float | None = None) -> LeaseInfo:
        """Raises KvError (404) once the lease expired or was revoked; ``timeout_s``: per
        endpoint tried (default: the client's)."""
        return _lease(_checked(await self._send("POST", f"/v1/leases/{lease_id}/keepalive",
                                                retry=True, timeout_s=timeout_s)))

    async def revoke_lease(self, lease_id: int) -> None:
        _checked(await self._send("DELETE", f"/v1/leases/{lease_id}", retry=True))

    def lock(self, name: str, *, ttl_ms: int = 10_000) -> Any:
        """``async with kv.lock("name") as held:`` (``held.token``: the fencing token);
        see ``kraft_spark.client.concurrency``."""
        from kraft_spark.client.concurrency import Lock

        return Lock(self, name, ttl_ms=ttl_ms)

    async def delete(self, key: str, *, if_version: int | None = None,
                     if_mod_offset: int | None = None) -> WriteResult:
        return await self.txn([(key, None)],
                              conditions_for(key, if_version, if_mod_offset, False))

    async def watch(self, *, key: str | None = None, prefix: str | None = None,
                    from_offset: int | None = None, after: str | None = None
                    ) -> AsyncIterator[WatchEvent]:
        """The stream as an async iterator; resume after a disconnect with ``after`` = the
        last event's ``id`` (a progress event's too): exact even between the events of one
        offset, which ``from_offset`` (whole offsets) is not."""
        params = _watch_params(key, prefix, from_offset)
        parser = _SseParser()
        lines = _SseLines()
        response = await self._open_watch(params, _watch_headers(after))
        try:
            async for chunk in response.aiter_bytes():
                for line in lines.feed(chunk):
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        finally:
            await response.aclose()

    async def _open_watch(self, params: dict[str, Any], headers: dict[str, str]
                          ) -> httpx.Response:
        """``KvClient._open_watch``'s twin: the open stream (the caller closes it)."""
        urls = self.endpoints.order()
        for i, url in enumerate(urls):
            request = self._http.build_request("GET", url + "/v1/watch", params=params,
                                               headers=headers,
                                               timeout=_watch_timeout(self._http.timeout))
            try:
                response = await self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                if self.endpoints.after_error(url, exc, last=i == len(urls) - 1, retry=False):
                    continue
                raise
            if failover_status(response.status_code) and i < len(urls) - 1:
                self.endpoints.failed(url)
                await response.aclose()
                continue
            if response.status_code >= 400:
                await response.aread()
                await response.aclose()
                _checked(response)
            return response
        raise AssertionError("unreachable: the last endpoint returns or raises")

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncKvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
