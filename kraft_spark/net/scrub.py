"""A background scrub of the sealed segments: silent bit rot is found before it is needed.

Recovery at start-up trusts a sealed segment whose index checks out, and a damaged batch is
otherwise found only when somebody reads it (a follower far behind, a restart's replay). The
scrubber re-reads every sealed segment on its own thread, batch by batch with the CRC-32C
checked, at most ``kraft.log.scrub.bytes.per.second`` (default 1 MiB/s; 0 turns it off), and
starts over from the log start after the last sealed segment. A batch that does not check out
is confirmed before anything is done (a truncation or retention may have changed the file
meanwhile): the segment must still be sealed in the log with the same size, and the batch,
read from disk again, must still fail. Then the node handles it as a read that found it
(``log_repair``: noted, the node stops with exit 74, the restart cuts the log there and fetches
the rest from the leader); ``kraft_spark_log_scrub_*_total`` count bytes, passes and damage.

Snapshots are not scrubbed here: each is checked whole (CRCs, header and footer) when it is
loaded at start-up and when a follower downloads it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kraft_spark.log.codec import LOG_OVERHEAD, validate_batch
from kraft_spark.log.errors import CorruptRecordError, CorruptSegmentError
from kraft_spark.log.segmented_log import SegmentedLog

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
_BASE_AND_LENGTH = struct.Struct(">qi")
# Between two passes over a log with nothing sealed yet, or after an error.
_IDLE_S = 5.0


@dataclass
class ScrubStats:
    bytes_verified: int = 0
    passes: int = 0
    damaged: int = 0


class LogScrubber:
    """``on_damage`` runs on the event loop with the damage the log confirmed."""

    def __init__(self, the_log: SegmentedLog, bytes_per_second: int,
                 loop: asyncio.AbstractEventLoop,
                 on_damage: Callable[[CorruptSegmentError], None]) -> None:
        self._log = the_log
        self._rate = bytes_per_second
        self._loop = loop
        self._on_damage = on_damage
        self._stop = threading.Event()
        self.stats = ScrubStats()
        self._thread = threading.Thread(target=self._run, name="log-scrub", daemon=True)

    def start(self) -> LogScrubber:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:  # the segment list belongs to the loop's thread: read it there
                spans = asyncio.run_coroutine_threadsafe(self._spans(), self._loop).result(30)
            except Exception:  # the loop or the log closed under us: the node is stopping
                return
            sealed = spans[:-1]  # the active segment is validated whole by recovery
            scrubbed = False
            for base, end, size, _ in sealed:
                if self._stop.is_set():
                    return
                if end > base >= self._log.start_offset():
                    self._scrub_segment(base, size)
                    scrubbed = True
            self.stats.passes += 1
            # Nothing to read this pass (nothing sealed, or every sealed segment holds the log
            # start, below which retention has cut): idle. Without this, a leader whose only
            # sealed segment held the log start asked the loop for the spans again at once,
            # forever: a core spent (found in a benchmark's voter, 35 CPU-minutes in 47).
            self._stop.wait(0.0 if scrubbed else _IDLE_S)

    async def _spans(self) -> list[tuple[int, int, int, int]]:
        return self._log.segment_spans()

    def _scrub_segment(self, base: int, size: int) -> None:
        path = os.path.join(self._log.partition_dir, f"{base:020d}.log")
        started, done = time.monotonic(), 0
        expected, position = base, 0
        try:
            with open(path, "rb") as fh:
                buf, rel = b"", 0
                while position < size and not self._stop.is_set():
                    if len(buf) - rel < LOG_OVERHEAD:
                        buf, rel = buf[rel:] + fh.read(_CHUNK), 0
                        if len(buf) < LOG_OVERHEAD:
                            return  # the file ends early: a truncation, not damage
                    batch_base, length = _BASE_AND_LENGTH.unpack_from(buf, rel)
                    batch_size = length + LOG_OVERHEAD
                    if batch_base != expected or length <= 0:
                        self._suspect(base, size, position, expected,
                                      f"base offset {batch_base}, batch length {length}")
                        return
                    if len(buf) - rel < batch_size:
                        buf, rel = buf[rel:] + fh.read(max(_CHUNK, batch_size)), 0
                        if len(buf) < batch_size:
                            self._suspect(base, size, position, expected,
                                          "the batch runs past the end of the file")
                            return
                    try:
                        header = validate_batch(buf, rel, rel + batch_size)
                    except CorruptRecordError as exc:
                        self._suspect(base, size, position, expected, str(exc))
                        return
                    rel += batch_size
                    position += batch_size
                    expected = header.next_offset
                    done += batch_size
                    self.stats.bytes_verified += batch_size
                    # At most ``rate`` bytes per second, on average over the segment.
                    ahead = done / self._rate - (time.monotonic() - started)
                    if ahead > 0 and self._stop.wait(ahead):
                        return
        except FileNotFoundError:
            return  # retention or a truncation removed it meanwhile

    def _suspect(self, base: int, size: int, position: int, offset: int, detail: str) -> None:
        """A batch did not check out. The log may have changed the file meanwhile (a
        truncation, retention), and the log's own reads may come from its in-memory tail, so
        the confirmation is: the segment is still sealed in the log with the same size, and
        the batch, read from disk again, still fails."""
        try:
            spans = asyncio.run_coroutine_threadsafe(self._spans(), self._loop).result(30)
        except Exception:
            return
        if (base, size) not in {(b, n) for b, _, n, _ in spans[:-1]}:
            return  # no longer the file it was: nothing to report
        path = os.path.join(self._log.partition_dir, f"{base:020d}.log")
        try:
            with open(path, "rb") as fh:
                fh.seek(position)
                head = fh.read(LOG_OVERHEAD)
                if len(head) == LOG_OVERHEAD:
                    length = _BASE_AND_LENGTH.unpack_from(head)[1]
                    if length > 0:
                        validate_batch(head + fh.read(length), 0, LOG_OVERHEAD + length)
                        return  # it reads fine now: a change we raced with
        except FileNotFoundError:
            return
        except (CorruptRecordError, OSError, struct.error):
            pass
        damage = CorruptSegmentError(path, position, offset, detail)
        self._loop.call_soon_threadsafe(self._report, damage)

    def _report(self, damage: CorruptSegmentError) -> None:
        """On the loop: one report, then the scrub stops (the node stops to repair it)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.stats.damaged += 1
        log.error("log scrub: %s", damage)
        self._on_damage(damage)
