"""Crash-test writer, run as a script: append to a real log until SIGKILLed.

Usage: ``python crash_writer.py LOG_DIR SEED``

Prints ``READY <end offset>`` once the log is open, then after every ``flush()`` returns
``D <flushed offset> <epoch of the record before it>``: the offsets the test may hold the log to.
Record contents are a function of (offset, epoch) (see ``expected_record``), so the test can
check every record it reads back. Appends are written in several ``write`` calls with short
pauses, so a kill often lands in the middle of a batch and leaves a torn tail on disk. It
truncates only what it has not flushed, and each run appends in a new epoch.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time

from kraft_spark.log import RealFileSystem, SegmentedLog
from kraft_spark.raft.records import Batch, Record

SEGMENT_BYTES = 16 * 1024
INDEX_INTERVAL = 1024


def expected_record(offset: int, epoch: int) -> tuple[bytes, bytes]:
    """The key and value the writer stores at ``offset`` in ``epoch``."""
    digest = hashlib.blake2b(f"{offset}:{epoch}".encode(), digest_size=16).digest()
    length = 8 + digest[0] % 120
    return str(offset).encode(), (digest * 9)[:length]


class TearingFileSystem(RealFileSystem):
    """Writes every append in up to three pieces, sometimes pausing in between."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self._rng = rng

    def write_at(self, path: str, position: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            piece = self._rng.randint(1, len(view)) if len(view) > 1 else 1
            super().write_at(path, position, view[:piece])
            position += piece
            view = view[piece:]
            if view and self._rng.random() < 0.3:
                time.sleep(0.0005)


def main() -> None:
    log_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    # Every other run preallocates its segments (as nodes do by default), so kills leave both
    # kinds of tail: torn batches at the end of the file and inside a preallocated range.
    log = SegmentedLog.open(TearingFileSystem(rng), log_dir, segment_bytes=SEGMENT_BYTES,
                            index_interval_bytes=INDEX_INTERVAL, lock_timeout_s=10,
                            preallocate=seed % 2 == 1)
    epoch = log.last_epoch() + 1
    print(f"READY {log.end_offset()}", flush=True)
    while True:
        for _ in range(rng.randint(1, 6)):
            base = log.end_offset()
            records = tuple(
                Record(*expected_record(base + i, epoch), timestamp_ms=base + i)
                for i in range(rng.randint(1, 12))
            )
            log.append(Batch(base, epoch, records))
        if rng.random() < 0.1 and log.end_offset() > log.flushed_offset():
            # Only unflushed records may go: everything reported durable must stay.
            log.truncate_to(rng.randint(log.flushed_offset(), log.end_offset() - 1))
        if rng.random() < 0.05:
            epoch += 1
        flushed = log.flush()
        print(f"D {flushed} {log.last_epoch()}", flush=True)


if __name__ == "__main__":
    main()
