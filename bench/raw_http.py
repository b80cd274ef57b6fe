"""A minimal HTTP/1.1 client connection on asyncio streams, for the lease bench's load.

Why not httpx: the keep-alive load is 3,000 requests per second from one Python process that
shares two cores with the six server processes it measures. httpx spends a few hundred
microseconds of CPU per request in its own layers; this connection spends a fraction of that, so
more of the machine is left to the systems under test, and both systems are driven by the very
same bytes-on-the-wire code. It does only what the bench needs: one request at a time on a
keep-alive connection, a JSON body, the same extra headers on every request (kraft-spark's
``Authorization: Bearer <token>``), answers with ``Content-Length`` or chunked (etcd's gateway
streams its ``/v3/lease/keepalive`` answers chunked).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from urllib.parse import urlsplit


class HttpConnectionError(Exception):
    """The connection failed or closed before a whole answer arrived."""


class HttpConnection:
    """One keep-alive connection to ``url``'s host; reconnects when the server closed it.
    ``headers`` go with every request."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        # Built once: the load sends thousands of requests a second from one process.
        self._extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # A connection the server closed while idle (its keep-alive timeout) shows as EOF on
        # the reader: open a new one before sending, so no request is sent into a closed
        # socket (a grant sent there could be taken and its answer lost).
        if self._reader is None or self._writer is None or self._reader.at_eof():
            await self.close()
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request and read its whole answer: (status, body)."""
        reader, writer = await self._connect()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self._extra}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        try:
            writer.write(head.encode("ascii") + body)
            status, chunked, length, close = await _read_head(reader)
            payload = await (_read_chunked(reader) if chunked
                             else reader.readexactly(length))
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            await self.close()
            raise HttpConnectionError(f"{method} {path}: {exc!r}") from None
        except BaseException:
            # A cancelled request (a timeout) leaves the answer half read: the connection
            # cannot carry another request.
            await self.close()
            raise
        if close:
            await self.close()
        return status, payload

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, bool, int, bool]:
    """(status, chunked?, content length, connection closes after?) of an answer's head."""
    line = await reader.readline()
    if not line:
        raise asyncio.IncompleteReadError(b"", None)
    status = int(line.split(b" ", 2)[1])
    chunked, length, close = False, 0, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n"):
            return status, chunked, length, close
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value
        elif name == b"connection":
            close = value == b"close"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # trailers (none expected) up to the blank line that ends the answer
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF after each chunk
