"""One segment: ``<20-digit base offset>.log`` and its sparse ``.index``.

A segment holds whole batches with contiguous offsets, starting at ``base_offset``. Its size
and end offset are tracked in memory (appends through this object are the only writer while the
log is open), so reads never look past what the log has accepted.

Preallocation (``preallocate_to`` > 0, Kafka's ``log.preallocate``): the first append reserves
the file to the segment's full size, so every later append writes inside allocated space and its
fsync flushes data only, without a journal commit for the new file size. The reserved tail reads
as zeros. It is trimmed when the segment is sealed or the log closed; after a crash, recovery
finds it where the batches end and drops it quietly (zeros up to exactly ``preallocate_to`` are
the reservation; anything else there is a torn write and is cut with a warning).
"""

from __future__ import annotations

import logging
import posixpath
import struct
from collections.abc import Callable
from dataclasses import dataclass

from kraft_spark.log.codec import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    read_header,
    validate_batch,
)
from kraft_spark.log.errors import CorruptRecordError
from kraft_spark.log.fs import FileSystem
from kraft_spark.log.index import OffsetIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_SCAN_CHUNK = 1 << 20
_BASE_AND_LENGTH = struct.Struct(">qi")


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> int | None:
    """The base offset of a ``.log`` file name, None for any other name."""
    stem, dot, ext = name.partition(".")
    if dot and "." + ext == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


@dataclass(frozen=True, slots=True)
class ScanResult:
    """How far a scan got: the position and offset after the last good batch, and why it
    stopped early (``error`` is None when it reached the end of the file)."""

    end_position: int
    next_offset: int
    error: str | None = None
    error_offset: int | None = None


class Segment:
    """A ``.log`` file plus its in-memory index. Not thread-safe."""

    def __init__(
        self, fs: FileSystem, directory: str, base_offset: int, index_interval_bytes: int
    ) -> None:
        self.fs = fs
        self.base_offset = base_offset
        self.log_path = posixpath.join(directory, segment_name(base_offset))
        self.index_path = posixpath.join(directory, segment_name(base_offset, INDEX_SUFFIX))
        self.index = OffsetIndex(base_offset, index_interval_bytes)
        self.size = 0
        """Bytes of whole, accepted batches (the file is never longer while the log is open)."""
        self.end_offset = base_offset
        """The offset after the last batch (== base_offset when empty)."""
        self.preallocate_to = 0
        """Reserve the file to this size at the first append past its end (0: never)."""
        self._reserved = 0
        """The file's length when it is longer than ``size`` (a preallocated tail), else 0."""

    def __repr__(self) -> str:
        return f"Segment({self.log_path}, [{self.base_offset}, {self.end_offset}), {self.size} B)"

    # -- writing ----------------------------------------------------------------------------

    def create(self) -> None:
        self.fs.write_file(self.log_path, b"")

    def append(self, data: bytes | bytearray, base_offset: int, next_offset: int) -> None:
        position = self.size
        end = position + len(data)
        if end > self._reserved and self.preallocate_to:
            self._reserve(max(self.preallocate_to, end))
        self.fs.write_at(self.log_path, position, data)
        self.index.on_append(base_offset, position, len(data))
        self.size = end
        self.end_offset = next_offset

    def _reserve(self, size: int) -> None:
        try:
            self.fs.preallocate(self.log_path, size)
        except OSError as exc:
            # Only an optimisation: appends still work without it (a full disk fails them next,
            # with the cause named there).
            log.warning(
                "%s: cannot preallocate %d bytes (%s); appending without preallocation",
                self.log_path, size, exc,
            )
            self.preallocate_to = 0
            return
        self._reserved = size

    def trim(self) -> bool:
        """Drop the preallocated tail (sealing, closing); True if the file changed."""
        if self._reserved <= self.size:
            return False
        self.fs.truncate(self.log_path, self.size)
        self._reserved = 0
        return True

    def truncate(self, position: int, offset: int) -> None:
        """Cut the file at ``position``, the start of the batch with base ``offset``."""
        self.fs.truncate(self.log_path, position)
        self.index.truncate_to(offset)
        self.size = position
        self.end_offset = offset
        self._reserved = 0

    def write_index(self) -> None:
        """Write the index file (done when the segment is sealed; fsync'd by the next flush)."""
        self.fs.write_file(self.index_path, self.index.to_bytes())

    def remove_files(self) -> None:
        self.fs.close(self.log_path)
        self.fs.remove(self.log_path)
        if self.fs.exists(self.index_path):
            self.fs.remove(self.index_path)

    # -- locating ---------------------------------------------------------------------------

    def locate(self, offset: int) -> tuple[int, BatchHeader]:
        """Position and header of the batch holding ``offset`` (``base ≤ offset < end``).

        Starts from the index and walks headers forward (about ``interval`` bytes). Raises
        ``CorruptRecordError`` naming file and position if the chain of headers is broken.
        """
        if not self.base_offset <= offset < self.end_offset:
            raise ValueError(f"offset {offset} is not in {self!r}")
        expected, pos = self.index.lookup(offset)
        step = self.index.interval_bytes + HEADER_SIZE
        buf = b""
        buf_start = pos
        while pos < self.size:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf = self.fs.read(self.log_path, pos, min(step, self.size - pos))
                buf_start, rel = pos, 0
            try:
                header = read_header(buf, rel, whole=False)
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"{self.log_path}: position {pos} (offset {expected}): {exc}"
                ) from exc
            if header.base_offset != expected or pos + header.size > self.size:
                raise CorruptRecordError(
                    f"{self.log_path}: position {pos}: batch with base offset "
                    f"{header.base_offset} and {header.size} bytes where offset {expected} "
                    "was expected"
                )
            if offset < header.next_offset:
                return pos, header
            pos += header.size
            expected = header.next_offset
        raise CorruptRecordError(f"{self.log_path}: offset {offset} not found before the end")

    # -- scanning (recovery) ----------------------------------------------------------------

    def scan(
        self,
        start_position: int,
        start_offset: int,
        *,
        verify_crc: bool,
        visit: Callable[[int, BatchHeader], None] | None = None,
    ) -> ScanResult:
        """Walk the file's batches from ``start_position`` to its end.

        Each batch must start at the expected offset, have a sane header and (if
        ``verify_crc``) a matching CRC. ``visit(position, header)`` sees every good batch and may
        raise ``CorruptRecordError`` to reject one. Stops at the first bad or incomplete batch.
        """
        file_size = self.fs.size(self.log_path)
        pos = start_position
        expected = start_offset
        buf = b""
        buf_start = pos
        while pos < file_size:
            rel = pos - buf_start
            if len(buf) - rel < LOG_OVERHEAD:
                buf = self.fs.read(self.log_path, pos, min(_SCAN_CHUNK, file_size - pos))
                buf_start, rel = pos, 0
                if len(buf) < LOG_OVERHEAD:
                    return ScanResult(
                        pos, expected, f"{len(buf)} stray bytes at the end", expected
                    )
            _base, length = _BASE_AND_LENGTH.unpack_from(buf, rel)
            size = length + LOG_OVERHEAD
            if length < MIN_BATCH_LENGTH:
                return ScanResult(pos, expected, f"invalid batch length {length}", expected)
            if pos + size > file_size:
                return ScanResult(
                    pos, expected,
                    f"incomplete batch: {size} bytes but the file ends after {file_size - pos}",
                    expected,
                )
            if rel + size > len(buf):
                buf = self.fs.read(self.log_path, pos, max(size, min(_SCAN_CHUNK, file_size - pos)))
                buf_start, rel = pos, 0
            try:
                if verify_crc:
                    header = validate_batch(buf, rel, rel + size)
                else:
                    header = read_header(buf, rel, rel + size)
                if header.base_offset != expected:
                    raise CorruptRecordError(
                        f"base offset {header.base_offset}, expected {expected}"
                    )
                if visit is not None:
                    visit(pos, header)
            except CorruptRecordError as exc:
                return ScanResult(pos, expected, str(exc), expected)
            pos += size
            expected = header.next_offset
        return ScanResult(pos, expected)

    def recover(
        self, *, visit: Callable[[int, BatchHeader], None] | None = None
    ) -> ScanResult:
        """Validate every batch (length, magic, CRC, offsets), rebuild the index, and cut the
        file after the last good batch. Logs what it cut, naming file, position and offset."""
        index = OffsetIndex(self.base_offset, self.index.interval_bytes)

        def on_batch(position: int, header: BatchHeader) -> None:
            if visit is not None:
                visit(position, header)
            index.on_append(header.base_offset, position, header.size)

        result = self.scan(0, self.base_offset, verify_crc=True, visit=on_batch)
        file_size = self.fs.size(self.log_path)
        if result.end_position < file_size:
            if file_size == self.preallocate_to and self._zeros_from(
                result.end_position, file_size
            ):
                log.info(
                    "%s: dropping the %d-byte preallocated tail at position %d (offset %d)",
                    self.log_path, file_size - result.end_position, result.end_position,
                    result.next_offset,
                )
                result = ScanResult(result.end_position, result.next_offset)
            else:
                log.warning(
                    "%s: truncating %d bytes at position %d (offset %d): %s",
                    self.log_path, file_size - result.end_position, result.end_position,
                    result.next_offset, result.error or "invalid data",
                )
            self.fs.truncate(self.log_path, result.end_position)
            self.fs.fsync(self.log_path)
        self.index = index
        self.size = result.end_position
        self.end_offset = result.next_offset
        return result

    def _zeros_from(self, position: int, file_size: int) -> bool:
        """Whether every byte from ``position`` to the end is zero. With a file exactly as long
        as preallocation makes it, that is a reserved tail no write reached. (A torn write whose
        surviving bytes happen to be zero there is dropped the same way, only logged at info.)"""
        while position < file_size:
            chunk = self.fs.read(self.log_path, position, min(_SCAN_CHUNK, file_size - position))
            if not chunk or chunk.count(0) != len(chunk):
                return False
            position += len(chunk)
        return True

    def load_sealed(self) -> bool:
        """Adopt the index file of a sealed segment if it checks out; False if it is missing or
        stale (the caller then calls ``recover``).

        Checks: the file parses; its last entry points inside the file at a batch with the
        entry's offset; and the batches from there to the end of the file are valid (CRC
        included) and end exactly at the end of the file.
        """
        if not self.fs.exists(self.index_path):
            log.info("%s: index missing, rebuilding", self.index_path)
            return False
        try:
            index = OffsetIndex.from_bytes(
                self.base_offset, self.fs.read(self.index_path), self.index.interval_bytes
            )
        except ValueError as exc:
            log.warning("%s: unreadable index (%s), rebuilding", self.index_path, exc)
            return False
        loaded_entries = len(index)
        last = index.last_entry()
        file_size = self.fs.size(self.log_path)
        if last is None or last[1] >= file_size:
            log.warning("%s: index does not match %s, rebuilding", self.index_path, self.log_path)
            return False

        def extend_index(position: int, header: BatchHeader) -> None:
            # The file may hold only a prefix of the entries (a crash while it was written):
            # entries for the batches after the last one are added back here.
            if position == last[1]:
                index.resume(header.size)
            else:
                index.on_append(header.base_offset, position, header.size)

        result = self.scan(last[1], last[0], verify_crc=True, visit=extend_index)
        if result.error is not None or result.end_position != file_size:
            log.warning(
                "%s: index is stale (%s), rebuilding", self.index_path, result.error or "short"
            )
            return False
        self.index = index
        self.size = file_size
        self.end_offset = result.next_offset
        if len(index) > loaded_entries:  # the file held a prefix only: store the whole index
            self.write_index()
            self.fs.fsync(self.index_path)
        return True
