"""Sans-I/O framing: Kafka's ``int32`` big-endian size prefix followed by that many bytes.

:class:`FrameDecoder` turns an arbitrary chunking of a byte stream into whole frames. Feeding the
stream in one piece or one byte at a time yields the same frames. A negative size or one above
``max_frame_bytes`` raises as soon as the 4 size bytes have arrived, before any of the body is
buffered, and leaves the decoder failed: the connection must be closed, because the stream can
no longer be re-synchronized.
"""

from __future__ import annotations

import struct

from kraft_spark.protocol.exceptions import FrameTooLargeError, ProtocolError

_SIZE = struct.Struct(">i")


def frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix."""
    return _SIZE.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental decoder of size-prefixed frames.

    Invariants: between calls ``_buf`` holds exactly the bytes received but not yet returned
    (a prefix of one incomplete frame), so it never exceeds ``4 + max_frame_bytes`` plus the
    size of the last chunk fed; once an error has been raised, every later :meth:`feed` raises
    it again. Frames completed in the same call as an error are dropped with the connection.
    """

    __slots__ = ("_buf", "_error", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame (payload without its prefix) now complete.

        Raises :class:`FrameTooLargeError` or :class:`ProtocolError` as soon as a bad size
        prefix is complete, without waiting for (or keeping) the body.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        end = len(buf)
        pos = 0
        frames: list[bytes] = []
        limit = self.max_frame_bytes
        while end - pos >= 4:
            size: int = _SIZE.unpack_from(buf, pos)[0]
            if size < 0 or size > limit:
                self._error = (
                    ProtocolError(f"negative frame size {size}")
                    if size < 0
                    else FrameTooLargeError(size, limit)
                )
                buf.clear()
                raise self._error
            start = pos + 4
            if end - start < size:
                break
            pos = start + size
            frames.append(bytes(buf[start:pos]))
        if pos:
            del buf[:pos]
        return frames
