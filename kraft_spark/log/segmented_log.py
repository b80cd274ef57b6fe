"""``SegmentedLog``: the durable ``RaftLog`` of a node, in Kafka's on-disk layout.

Use::

    log = SegmentedLog.open(fs, "/data/node-1", node_id=1, cluster_id="abc")
    log.append(batch)          # visible to read() at once
    durable = log.flush()      # one fsync for every append since the last flush
    log.close()

Invariants:

* Offsets are contiguous from 0; ``end_offset()`` is the next offset to write. Epochs never
  decrease along the log, and the epoch cache has one entry per epoch present.
* ``flushed_offset() <= end_offset()``, and every offset below ``flushed_offset()`` is on disk
  (data fsync'd, directory entries fsync'd). Appends are durable only after ``flush()``;
  ``truncate_to`` is durable when it returns, and a crash inside it leaves either the old log
  or the cut one (so records after the cut can never come back next to newer records written
  in their place).
* Every batch that ``read`` returns passed its CRC check (or is the very object appended).
* After an I/O error the log refuses further writes (a failed fsync cannot be retried safely);
  reopen it to recover.

Group commit off the event loop: the node calls ``begin_flush`` on its loop thread (it captures
what is dirty and the end offset it covers), runs ``sync_flush`` on a worker thread (the fsyncs;
appends may continue meanwhile on the loop thread), then ``end_flush`` back on the loop thread,
which raises ``flushed_offset`` to what the ticket covered. A truncation while a ticket is in
flight waits for its fsyncs (``_io_lock``) and voids it (``_generation``), because the offsets it
covered may since have been rewritten.

File-system work goes through a ``FileSystem``, so the simulator runs this exact code on
``SimulatedFileSystem``.

``preallocate=True`` reserves each segment to ``segment_bytes`` at its first append (see
``kraft_spark.log.segment``): appends then land in allocated space and a flush is a data-only
fsync. Sealed segments and a closed log hold no preallocated tail.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kraft_spark.log.checkpoints import (
    EPOCH_CHECKPOINT_FILE,
    atomic_write,
    ensure_dir,
    partition_dir,
    read_quorum_state,
    write_quorum_state,
)
from kraft_spark.log.codec import HEADER_SIZE, LOG_OVERHEAD, decode_batch, encode_batch
from kraft_spark.log.epoch_cache import EpochCache, format_checkpoint
from kraft_spark.log.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    InvalidAppendError,
    LogError,
)
from kraft_spark.log.fs import FileLock, FileSystem
from kraft_spark.log.index import DEFAULT_INTERVAL_BYTES, MAX_RELATIVE
from kraft_spark.log.log_start import read_log_start, write_log_start
from kraft_spark.log.meta import LOCK_FILE, MetaProperties, check_meta_properties
from kraft_spark.log.recovery import recover_partition
from kraft_spark.log.segment import Segment
from kraft_spark.log.tail_cache import TailCache
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch

if TYPE_CHECKING:
    from kraft_spark.log.fs import RealFileSystem
    from kraft_spark.log.simfs import SimulatedFileSystem
    from kraft_spark.raft.log_api import RaftLog

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
"""Smaller than Kafka's 1 GiB: the whole last segment is validated on every open."""
DEFAULT_TAIL_CACHE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FlushTicket:
    """What one off-loop flush covers (see the module docstring)."""

    end_offset: int
    paths: tuple[str, ...]
    fsync_dir: bool
    checkpoint: bytes | None
    generation: int


class SegmentedLog:
    """A log directory opened for exclusive use. Create with ``SegmentedLog.open``."""

    def __init__(
        self,
        fs: FileSystem,
        log_dir: str,
        lock: FileLock,
        segments: list[Segment],
        epochs: EpochCache,
        *,
        segment_bytes: int,
        tail_cache_bytes: int,
        meta: MetaProperties | None,
        preallocate_to: int = 0,
    ) -> None:
        self._fs = fs
        self.log_dir = log_dir
        self.partition_dir = partition_dir(log_dir)
        self.meta = meta
        """``meta.properties`` when ids were checked at open, else None."""
        self._lock: FileLock | None = lock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._epochs = epochs
        self._segment_bytes = segment_bytes
        # For segments rolled from here on (recovery gave the recovered ones the same value).
        self._preallocate_to = preallocate_to
        self._tail = TailCache(tail_cache_bytes)
        self._end = segments[-1].end_offset
        self._flushed = self._end
        self._dirty: set[str] = set()
        self._dir_dirty = False
        self._checkpoint_dirty = False
        self._failed: str | None = None
        # Held by every fsync and by truncation, so a worker thread's fsyncs never race a cut.
        self._io_lock = threading.RLock()
        # Files of segments deleted (retention) since the ticket in flight was begun: it may
        # name them, and a deleted file needs no fsync (cleared when no ticket is in flight).
        self._removed: set[str] = set()
        self._generation = 0
        self._ticket: FlushTicket | None = None  # the one begun and not yet ended
        # The persisted log start offset (log-start-offset-checkpoint); see start_offset().
        self._start = 0

    # -- opening and closing ----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        log_dir: str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INTERVAL_BYTES,
        node_id: int | None = None,
        cluster_id: str | None = None,
        lock_timeout_s: float = 0.0,
        tail_cache_bytes: int = DEFAULT_TAIL_CACHE_BYTES,
        preallocate: bool = False,
    ) -> SegmentedLog:
        """Lock ``log_dir`` (the ``log.dirs`` directory), check its identity, recover its log.

        If ``node_id`` or ``cluster_id`` is given the directory must be formatted for them
        (``NotFormattedError`` / ``MetaPropertiesError`` otherwise). Waits up to
        ``lock_timeout_s`` for another owner to go away (``LogDirLockedError``). Recovery may cut
        a damaged tail (logged as a warning); what remains is durable when this returns.
        """
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        ensure_dir(fs, log_dir)
        lock = fs.lock(posixpath.join(log_dir, LOCK_FILE), lock_timeout_s)
        try:
            meta = None
            if node_id is not None or cluster_id is not None:
                meta = check_meta_properties(log_dir, fs, cluster_id=cluster_id, node_id=node_id)
            pdir = partition_dir(log_dir)
            ensure_dir(fs, pdir)
            preallocate_to = segment_bytes if preallocate else 0
            recovered = recover_partition(fs, pdir, index_interval_bytes, preallocate_to)
            self = cls(
                fs, log_dir, lock, recovered.segments, recovered.epochs,
                segment_bytes=segment_bytes, tail_cache_bytes=tail_cache_bytes, meta=meta,
                preallocate_to=preallocate_to,
            )
            # What recovery kept may be in the page cache only (the previous owner was killed
            # before its flush): make it durable before reporting it as flushed.
            fs.fsync(self._segments[-1].log_path)
            if recovered.dir_changed:
                fs.fsync_dir(pdir)
            if recovered.checkpoint_stale:
                self._write_checkpoint()
            self._start = read_log_start(fs, log_dir)
            if self._start > self._end:
                # A crash inside truncate_fully_to, after the new start was persisted.
                self.truncate_fully_to(self._start)
            elif self._epochs.truncate_before(self.start_offset()):
                self._write_checkpoint()
        except BaseException:
            lock.release()
            raise
        return self

    def close(self) -> None:
        """Flush (unless the log failed or lost its lock), release handles and the lock."""
        if self._lock is None:
            return
        try:
            if self._failed is None and self._lock.held():
                self._trim_active()
                self.flush()
        finally:
            for seg in self._segments:
                self._fs.close(seg.log_path)
            self._lock.release()
            self._lock = None

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- RaftLog queries --------------------------------------------------------------------

    def start_offset(self) -> int:
        """The log start offset (KIP-630): the persisted logical start, which may lie inside
        the first segment (retention deletes whole segments only)."""
        return max(self._start, self._segments[0].base_offset)

    def end_offset(self) -> int:
        return self._end

    def last_epoch(self) -> int:
        return self._epochs.latest_epoch()

    def flushed_offset(self) -> int:
        return self._flushed

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self._epochs.end_offset_for_epoch(epoch, self._end)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the batch holding ``offset``; None outside the log."""
        if not self.start_offset() <= offset < self._end:
            return None
        return self._epochs.epoch_for_offset(offset)

    def epoch_entries(self) -> list[tuple[int, int]]:
        """``(epoch, start offset)`` for every epoch in the log, in order."""
        return self._epochs.entries()

    def segment_paths(self) -> list[str]:
        return [s.log_path for s in self._segments]

    # -- writes -----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._lock is None or not self._lock.held():
            raise LogError(
                f"{self.partition_dir}: the log is closed or lost its directory lock (after a "
                "simulated crash, open the directory again)"
            )
        if self._failed is not None:
            raise LogError(f"{self.partition_dir}: the log failed earlier ({self._failed}); "
                           "reopen it to recover")

    def _fail(self, what: str, exc: OSError) -> LogError:
        self._failed = f"{what}: {exc}"
        return LogError(f"{self.partition_dir}: {what} failed: {exc}")

    def append(self, batch: Batch) -> None:
        """Append one whole batch at ``end_offset()``; visible at once, durable on ``flush``."""
        self._check_usable()
        if batch.base_offset != self._end:
            raise InvalidAppendError(
                f"batch base offset {batch.base_offset} is not the log end offset {self._end}"
            )
        last_epoch = self._epochs.latest_epoch()
        if batch.epoch < last_epoch:
            raise InvalidAppendError(
                f"batch epoch {batch.epoch} is below the log's last epoch {last_epoch}"
            )
        data = encode_batch(batch)
        try:
            seg = self._segments[-1]
            if seg.size > 0 and (
                seg.size + len(data) > self._segment_bytes
                or batch.last_offset - seg.base_offset > MAX_RELATIVE
            ):
                seg = self._roll()
            seg.append(data, batch.base_offset, batch.next_offset)
        except OSError as exc:
            raise self._fail(f"append at offset {batch.base_offset}", exc) from exc
        self._dirty.add(seg.log_path)
        if self._epochs.assign(batch.epoch, batch.base_offset):
            self._checkpoint_dirty = True
        self._end = batch.next_offset
        self._tail.add(batch, len(data))

    def _trim_active(self) -> None:
        try:
            if self._segments[-1].trim():
                self._dirty.add(self._segments[-1].log_path)
        except OSError as exc:
            raise self._fail("trimming the preallocated tail", exc) from exc

    def _roll(self) -> Segment:
        sealed = self._segments[-1]
        # Sealed segments end exactly at their last batch; the trim is fsync'd by the next
        # flush, before the new segment's data (flush fsyncs paths in offset order).
        if sealed.trim():
            self._dirty.add(sealed.log_path)
        sealed.write_index()
        self._dirty.add(sealed.index_path)
        seg = Segment(self._fs, self.partition_dir, self._end, sealed.index.interval_bytes)
        seg.preallocate_to = self._preallocate_to
        seg.create()
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        return seg

    def flush(self) -> int:
        """Make every append and truncation durable; returns the new flushed offset.

        Order: file contents, then directory entries, then the epoch checkpoint (which therefore
        never describes data that is not on disk). Files first makes a crash inside
        ``truncate_to`` leave the old log or the new one, never a mix: the cut segment is durable
        before the removal of later segments is, and a later segment that comes back after the
        cut starts past the cut's end, so recovery drops it. (Nothing is appended between a cut
        and this flush: ``truncate_to`` calls it before returning.)
        """
        with self._io_lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        self._check_usable()
        if not self._dirty and not self._dir_dirty and not self._checkpoint_dirty:
            self._flushed = self._end
            return self._flushed
        try:
            for path in sorted(self._dirty):
                self._fs.fsync(path)
            self._dirty.clear()
            if self._dir_dirty:
                self._fs.fsync_dir(self.partition_dir)
                self._dir_dirty = False
            self._flushed = self._end
            if self._checkpoint_dirty:
                self._write_checkpoint()
        except OSError as exc:
            raise self._fail("flush", exc) from exc
        return self._flushed

    def begin_flush(self) -> FlushTicket | None:
        """Loop thread: capture what a flush must make durable; None when nothing is dirty."""
        self._check_usable()
        if not self._dirty and not self._dir_dirty and not self._checkpoint_dirty:
            self._flushed = self._end
            return None
        ticket = FlushTicket(
            end_offset=self._end,
            paths=tuple(sorted(self._dirty)),
            fsync_dir=self._dir_dirty,
            checkpoint=(
                format_checkpoint(self._epochs.entries()) if self._checkpoint_dirty else None
            ),
            generation=self._generation,
        )
        self._dirty.clear()
        self._dir_dirty = False
        self._checkpoint_dirty = False
        self._ticket = ticket
        return ticket

    def sync_flush(self, ticket: FlushTicket) -> None:
        """Worker thread: the fsyncs of ``ticket`` (files, directory, then the checkpoint)."""
        with self._io_lock:
            if ticket.generation != self._generation or self._failed is not None:
                return  # a truncation flushed (and voided) this ticket meanwhile
            try:
                for path in ticket.paths:
                    if path not in self._removed:
                        self._fs.fsync(path)
                if ticket.fsync_dir:
                    self._fs.fsync_dir(self.partition_dir)
                if ticket.checkpoint is not None:
                    path = posixpath.join(self.partition_dir, EPOCH_CHECKPOINT_FILE)
                    atomic_write(self._fs, path, ticket.checkpoint)
            except OSError as exc:
                raise self._fail("flush", exc) from exc

    def end_flush(self, ticket: FlushTicket) -> int:
        """Loop thread: ``ticket``'s offsets are durable; returns the flushed offset."""
        self._check_usable()
        if self._ticket is ticket:
            self._ticket = None
            with self._io_lock:
                self._removed.clear()
        if ticket.generation == self._generation:
            self._flushed = max(self._flushed, min(ticket.end_offset, self._end))
        return self._flushed

    def _write_checkpoint(self) -> None:
        path = posixpath.join(self.partition_dir, EPOCH_CHECKPOINT_FILE)
        atomic_write(self._fs, path, format_checkpoint(self._epochs.entries()))
        self._checkpoint_dirty = False

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset``; durable when this returns.

        If ``offset`` falls inside a batch the whole batch goes (as in Kafka), so afterwards
        ``end_offset() <= offset``; callers truncate at batch boundaries in practice.
        """
        with self._io_lock:
            self._truncate_locked(offset)

    def _truncate_locked(self, offset: int) -> None:
        self._check_usable()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._end:
            return
        self._generation += 1
        if self._ticket is not None:
            # Void the ticket in flight, and flush what it covered together with the cut.
            self._dirty.update(self._ticket.paths)
            self._dir_dirty = self._dir_dirty or self._ticket.fsync_dir
            self._checkpoint_dirty = True
            self._ticket = None
        offset = max(offset, self.start_offset())
        k = bisect_right(self._bases, offset) - 1
        seg = self._segments[k]
        try:
            if offset < seg.end_offset:
                position, header = seg.locate(offset)
                cut = header.base_offset
            else:  # offset == seg.end_offset: the cut is the start of the next segment
                position, cut = seg.size, seg.end_offset
            for later in self._segments[k + 1 :]:
                later.remove_files()
                self._dirty.discard(later.log_path)
                self._dirty.discard(later.index_path)
                self._dir_dirty = True
            del self._segments[k + 1 :]
            del self._bases[k + 1 :]
            if self._fs.exists(seg.index_path):  # it is the active segment again
                self._fs.remove(seg.index_path)
                self._dirty.discard(seg.index_path)
                self._dir_dirty = True
            if cut != offset:
                log.info("%s: truncating to batch start %d (asked %d)", seg.log_path, cut, offset)
            seg.truncate(position, cut)
        except OSError as exc:
            raise self._fail(f"truncate to {offset}", exc) from exc
        self._dirty.add(seg.log_path)
        if self._epochs.truncate_from(cut):
            self._checkpoint_dirty = True
        self._tail.truncate_from(cut)
        self._end = cut
        self.flush()

    # -- the log start (KIP-630: snapshots and retention) ------------------------------------

    def segment_spans(self) -> list[tuple[int, int, int, int]]:
        """``(base offset, end offset, bytes, newest record timestamp ms)`` of every segment,
        oldest first (-1 for the timestamp of an empty segment)."""
        spans = []
        for seg in self._segments:
            newest = -1
            if seg.end_offset > seg.base_offset:
                newest = seg.locate(seg.end_offset - 1)[1].max_timestamp
            spans.append((seg.base_offset, seg.end_offset, seg.size, newest))
        return spans

    def advance_start_offset(self, offset: int) -> int:
        """Move the log start offset (KIP-630: to a snapshot's end offset) forward to
        ``offset`` (≤ the end), persist it in ``log-start-offset-checkpoint``, then delete the
        segments wholly below it (never the active one). Durable when this returns: the
        checkpoint comes first, so a crash leaves the new start with, at worst, old segments
        that the next advance deletes. Returns the log start."""
        with self._io_lock:
            self._check_usable()
            if offset <= self._start:
                return self.start_offset()
            if offset > self._end:
                raise ValueError(f"log start {offset} beyond the log end {self._end}")
            try:
                write_log_start(self._fs, self.log_dir, offset)
                self._start = offset
                if self._epochs.truncate_before(offset):
                    self._write_checkpoint()
                doomed = 0
                while (doomed < len(self._segments) - 1
                       and self._segments[doomed].end_offset <= offset):
                    doomed += 1
                for seg in self._segments[:doomed]:
                    self._remove_segment(seg)
                del self._segments[:doomed]
                del self._bases[:doomed]
                if doomed:
                    self._fs.fsync_dir(self.partition_dir)
            except OSError as exc:
                raise self._fail(f"advancing the log start to {offset}", exc) from exc
            log.info("%s: log start offset is now %d (%d segment(s) deleted)",
                     self.partition_dir, offset, doomed)
            return self.start_offset()

    def _remove_segment(self, seg: Segment) -> None:
        self._removed.update((seg.log_path, seg.index_path))
        seg.remove_files()
        if self._fs.exists(seg.index_path):
            self._fs.remove(seg.index_path)
        self._dirty.discard(seg.log_path)
        self._dirty.discard(seg.index_path)

    def truncate_fully_to(self, offset: int) -> None:
        """Replace the whole log by an empty one that starts at ``offset`` (a snapshot ending
        at ``offset`` was installed). Durable when this returns. A crash inside leaves either
        a contiguous part of the old log or the new empty one; the node's start-up compares it
        with its newest snapshot and finishes the job (``truncate_fully_to`` again)."""
        with self._io_lock:
            self._check_usable()
            self._generation += 1
            self._ticket = None
            try:
                write_log_start(self._fs, self.log_dir, offset)
                self._start = offset
                for seg in self._segments:
                    self._remove_segment(seg)
                self._fs.fsync_dir(self.partition_dir)
                seg = Segment(self._fs, self.partition_dir, offset,
                              self._segments[-1].index.interval_bytes)
                seg.preallocate_to = self._preallocate_to
                seg.create()
                self._fs.fsync(seg.log_path)
                self._fs.fsync_dir(self.partition_dir)
                self._segments = [seg]
                self._bases = [offset]
                self._dirty.clear()
                self._dir_dirty = False
                self._epochs.clear()
                self._write_checkpoint()
            except OSError as exc:
                raise self._fail(f"restarting the log at offset {offset}", exc) from exc
            self._tail.clear()
            self._end = self._flushed = offset
            log.info("%s: log restarted empty at offset %d", self.partition_dir, offset)

    # -- reads ------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one holding ``start_offset``: at least one if any exists,
        then more while the encoded total stays within ``max_bytes``.

        Raises ``CorruptRecordError`` naming file, position and offset if a batch on disk fails
        its checks; nothing unvalidated is returned.
        """
        if self._lock is None or not self._lock.held():
            raise LogError(f"{self.partition_dir}: the log is closed or lost its directory lock")
        if start_offset < 0:
            raise ValueError(f"negative offset {start_offset}")
        start_offset = max(start_offset, self.start_offset())
        if start_offset >= self._end:
            return []
        cached = self._tail.read(start_offset, max_bytes)
        if cached is not None:
            return cached
        k = bisect_right(self._bases, start_offset) - 1
        out: list[Batch] = []
        total = 0
        position, header = self._segments[k].locate(start_offset)
        expected = header.base_offset
        for seg in self._segments[k:]:
            while position < seg.size:
                budget = max(max_bytes - total, LOG_OVERHEAD)
                chunk = self._fs.read(seg.log_path, position, min(seg.size - position, budget))
                if len(chunk) < LOG_OVERHEAD:  # cannot happen for a recovered segment
                    raise CorruptRecordError(
                        f"{seg.log_path}: position {position} (offset {expected}): the file "
                        "ends inside a batch"
                    )
                rel = 0
                while rel + LOG_OVERHEAD <= len(chunk):
                    size = int.from_bytes(chunk[rel + 8 : rel + 12], "big", signed=True) \
                        + LOG_OVERHEAD
                    if out and total + size > max_bytes:
                        return out
                    if size < HEADER_SIZE or position + size > seg.size:
                        raise CorruptSegmentError(
                            seg.log_path, position, expected,
                            f"batch length {size - LOG_OVERHEAD} does not fit the segment")
                    if rel + size > len(chunk):
                        if rel > 0:
                            break  # read again from this batch
                        chunk = self._fs.read(seg.log_path, position, max(size, LOG_OVERHEAD))
                    try:
                        batch, _ = decode_batch(chunk, rel, rel + size)
                        if batch.base_offset != expected:
                            raise CorruptRecordError(
                                f"base offset {batch.base_offset}, expected {expected}"
                            )
                    except CorruptRecordError as exc:
                        raise CorruptSegmentError(seg.log_path, position, expected,
                                                  str(exc)) from exc
                    out.append(batch)
                    total += size
                    rel += size
                    position += size
                    expected = batch.next_offset
                if total >= max_bytes:
                    return out
            position = 0
        return out

    # -- quorum-state, through the same file system -----------------------------------------

    def read_quorum_state(self) -> dict[str, Any] | None:
        return read_quorum_state(self.log_dir, self._fs)

    def write_quorum_state(self, state: Mapping[str, Any]) -> None:
        """Atomic and durable when it returns (persisted before any message depending on it)."""
        self._check_usable()
        write_quorum_state(self.log_dir, state, self._fs)


if TYPE_CHECKING:  # static proof that the log and both disks fit the interfaces they serve

    def _is_raft_log(log: SegmentedLog) -> RaftLog:
        return log

    def _is_file_system(real: RealFileSystem, sim: SimulatedFileSystem) -> list[FileSystem]:
        return [real, sim]
