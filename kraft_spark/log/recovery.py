"""Opening a partition directory after any kind of stop: clean, SIGKILL, power cut, bit rot.

What is trusted and why:

* Sealed segments (all but the last) were fsync'd with their index by the flush that followed
  the roll. Their index is adopted if its last entry and the batches after it check out (CRC
  included); otherwise the segment is validated batch by batch and the index rebuilt.
* The last segment is where crashes leave damage, so every batch of it is validated (length,
  magic, CRC, contiguous offsets, epochs never decreasing) and the file is cut after the last
  good batch, with a warning naming the file, the position and the offset.
* Segments must be contiguous; a segment that does not start where the previous one ends is the
  leftover of a truncation whose directory change did not reach the disk, and is removed with
  everything after it.
* The epoch checkpoint is checked against the batches it describes (each entry's batch has that
  epoch, the batch before it has the previous one, the last sealed batch has the last epoch);
  if anything disagrees, or the file is missing, the epochs are rebuilt from batch headers.
"""

from __future__ import annotations

import logging
import posixpath
from bisect import bisect_right
from dataclasses import dataclass

from kraft_spark.log.checkpoints import EPOCH_CHECKPOINT_FILE, TMP_SUFFIX
from kraft_spark.log.codec import BatchHeader
from kraft_spark.log.epoch_cache import EpochCache, parse_checkpoint
from kraft_spark.log.errors import CorruptRecordError, LogError
from kraft_spark.log.fs import FileSystem
from kraft_spark.log.segment import INDEX_SUFFIX, Segment, parse_segment_name

log = logging.getLogger(__name__)


@dataclass
class Recovered:
    segments: list[Segment]
    epochs: EpochCache
    checkpoint_stale: bool
    """The checkpoint file does not say what ``epochs`` says and must be rewritten."""
    dir_changed: bool
    """Files were created or removed: the directory needs an fsync."""


def recover_partition(
    fs: FileSystem, pdir: str, index_interval_bytes: int, preallocate_to: int = 0
) -> Recovered:
    """``preallocate_to``: the size to which the log preallocates segments (0: it does not),
    given to every segment: a tail of zeros up to that size is then recognised as a reservation,
    not damage, and any segment (a truncation may make an older one active again) reserves
    space when appended to."""
    names = fs.listdir(pdir)
    dir_changed = False
    for name in names:
        if name.endswith(TMP_SUFFIX):
            log.info("%s: removing leftover temporary file", posixpath.join(pdir, name))
            fs.remove(posixpath.join(pdir, name))
            dir_changed = True
    bases = sorted(b for b in map(parse_segment_name, names) if b is not None)
    logs = {f"{b:020d}" for b in bases}
    for name in names:
        if name.endswith(INDEX_SUFFIX) and name[: -len(INDEX_SUFFIX)] not in logs:
            log.info("%s: removing index without a segment", posixpath.join(pdir, name))
            fs.remove(posixpath.join(pdir, name))
            dir_changed = True

    segments: list[Segment] = []
    if not bases:
        first = Segment(fs, pdir, 0, index_interval_bytes)
        first.preallocate_to = preallocate_to
        first.create()
        segments.append(first)
        dir_changed = True
    for k, base in enumerate(bases):
        seg = Segment(fs, pdir, base, index_interval_bytes)
        seg.preallocate_to = preallocate_to
        if segments and base != segments[-1].end_offset:
            log.warning(
                "%s: starts at offset %d but the log before it ends at %d; removing it and "
                "%d later segment(s) (left over from an interrupted truncation)",
                seg.log_path, base, segments[-1].end_offset, len(bases) - k - 1,
            )
            _remove(fs, pdir, bases[k:], index_interval_bytes)
            dir_changed = True
            break
        if k < len(bases) - 1 and not seg.load_sealed():
            result = seg.recover()
            seg.write_index()
            fs.fsync(seg.index_path)
            dir_changed = True
            if result.error is not None:
                log.warning(
                    "%s: sealed segment cut at position %d (offset %d); removing %d later "
                    "segment(s), which can no longer be reached",
                    seg.log_path, result.end_position, result.next_offset, len(bases) - k - 1,
                )
                _remove(fs, pdir, bases[k + 1 :], index_interval_bytes)
                segments.append(seg)
                break
        segments.append(seg)

    last = segments[-1]
    tail_marks = _recover_last(last)
    if fs.exists(last.index_path):  # the active segment keeps its index in memory only
        fs.remove(last.index_path)
        dir_changed = True
    epochs, stale = _reconcile_epochs(fs, pdir, segments, tail_marks)
    return Recovered(segments, epochs, stale, dir_changed)


def _remove(fs: FileSystem, pdir: str, bases: list[int], interval: int) -> None:
    for base in bases:
        Segment(fs, pdir, base, interval).remove_files()


def _recover_last(last: Segment) -> list[tuple[int, int]]:
    """Validate the whole last segment; return its epoch changes as (epoch, start offset)."""
    marks: list[tuple[int, int]] = []

    def visit(position: int, header: BatchHeader) -> None:
        if marks and header.epoch < marks[-1][0]:
            raise CorruptRecordError(
                f"epoch {header.epoch} after epoch {marks[-1][0]}: epochs never decrease"
            )
        if not marks or header.epoch != marks[-1][0]:
            marks.append((header.epoch, header.base_offset))

    last.recover(visit=visit)
    return marks


def _header_at(segments: list[Segment], offset: int) -> BatchHeader | None:
    bases = [s.base_offset for s in segments]
    k = bisect_right(bases, offset) - 1
    if k < 0 or offset >= segments[k].end_offset:
        return None
    try:
        return segments[k].locate(offset)[1]
    except CorruptRecordError:
        return None


def _prefix_matches(segments: list[Segment], prefix: list[tuple[int, int]]) -> bool:
    """Whether ``prefix`` lists exactly the epochs of the sealed segments (see module doc)."""
    sealed_end = segments[-1].base_offset
    if not prefix or prefix[0][1] != segments[0].base_offset:
        return False
    for i, (epoch, start) in enumerate(prefix):
        header = _header_at(segments, start)
        if header is None or header.base_offset != start or header.epoch != epoch:
            return False
        if i > 0:
            before = _header_at(segments, start - 1)
            if before is None or before.epoch != prefix[i - 1][0]:
                return False
    last = _header_at(segments, sealed_end - 1)
    return last is not None and last.epoch == prefix[-1][0]


def _scan_epochs(sealed: list[Segment]) -> list[tuple[int, int]]:
    marks: list[tuple[int, int]] = []

    def visit(position: int, header: BatchHeader) -> None:
        if marks and header.epoch < marks[-1][0]:
            raise CorruptRecordError(f"epoch {header.epoch} after epoch {marks[-1][0]}")
        if not marks or header.epoch != marks[-1][0]:
            marks.append((header.epoch, header.base_offset))

    for seg in sealed:
        result = seg.scan(0, seg.base_offset, verify_crc=False, visit=visit)
        if result.error is not None or result.end_position != seg.size:
            raise LogError(
                f"{seg.log_path}: position {result.end_position} (offset {result.next_offset}): "
                f"{result.error or 'segment shorter than its index says'}; the sealed part of "
                "the log is damaged and cannot be recovered automatically (move the directory "
                "away and let the node re-replicate)"
            )
    return marks


def _reconcile_epochs(
    fs: FileSystem, pdir: str, segments: list[Segment], tail_marks: list[tuple[int, int]]
) -> tuple[EpochCache, bool]:
    path = posixpath.join(pdir, EPOCH_CHECKPOINT_FILE)
    stored: list[tuple[int, int]] | None = None
    if fs.exists(path):
        try:
            stored = parse_checkpoint(fs.read(path))
        except ValueError as exc:
            log.warning("%s: unreadable (%s); rebuilding the epoch cache", path, exc)
    sealed = segments[:-1]
    prefix: list[tuple[int, int]] = []
    if sealed:
        last_base = segments[-1].base_offset
        prefix = [(e, s) for e, s in stored or [] if s < last_base]
        if stored is None or not _prefix_matches(segments, prefix):
            if stored is not None:
                log.warning("%s: does not match the log; rebuilding the epoch cache", path)
            prefix = _scan_epochs(sealed)
    entries = list(prefix)
    last = segments[-1]
    if tail_marks and entries and tail_marks[0][0] < entries[-1][0]:
        log.warning(
            "%s: starts with epoch %d after epoch %d; removing its %d bytes (offset %d on)",
            last.log_path, tail_marks[0][0], entries[-1][0], last.size, last.base_offset,
        )
        last.truncate(0, last.base_offset)
        fs.fsync(last.log_path)
        tail_marks = []
    for epoch, start in tail_marks:
        if not entries or epoch != entries[-1][0]:
            entries.append((epoch, start))
    return EpochCache(entries), stored != entries
