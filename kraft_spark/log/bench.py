"""``kraft-spark bench storage``: the log's append and read speed next to the disk's fsync floor.

What is measured, in one run:

* **append**: ``SegmentedLog.append`` + ``flush`` per batch on a real directory (encode, CRC,
  write, index and epoch bookkeeping, fsync) from ``Batch`` objects built beforehand, with the
  segments preallocated as a node's are (``kraft.log.preallocate``; ``--no-preallocate``: not).
* **floor**: the very same encoded bytes made durable batch by batch in a plain file in the
  same directory, in two ways: appended with ``os.write`` and ``os.fsync``'d, and written in
  place into space reserved beforehand (``posix_fallocate``) and ``os.fdatasync``'d, as
  preallocated segments are. Each is measured before and after the append run; the fastest
  of the four is reported (and named), so the ratio is the strict one.
* **warm-up**: when there is more than one batch, the first one is appended and flushed before
  the clock starts, and likewise written and fsync'd first for the floor; the rates of both
  count the other batches only. The first flush of a fresh log writes the leader-epoch
  checkpoint (temp file, fsync, rename, directory fsync: milliseconds on some disks, once per
  epoch), which would otherwise swamp a run of a few dozen batches. Its time is shown apart.
* **read**: reopen the log (its tail cache is then empty) and read everything back through
  ``read``: disk (page cache, in practice), CRC checks and decoding.
* **encode** / **decode**: the codec alone, in memory, to show where the time goes.

The log is left in ``<dir>/log``; the floor file is removed.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass

from kraft_spark.log.codec import decode_batch, encode_batch_buffer
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.meta import format_log_dir, read_meta_properties
from kraft_spark.log.segmented_log import DEFAULT_SEGMENT_BYTES, SegmentedLog
from kraft_spark.raft.records import Batch, Record

BENCH_CLUSTER_ID = "kraft-spark-bench"
READ_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class StorageBenchResult:
    records: int
    batch: int
    value_bytes: int
    batches: int
    bytes: int
    timed_records: int
    """Records, batches and bytes behind the append and floor rates (all but the warm-up)."""
    timed_batches: int
    timed_bytes: int
    append_s: float
    floor_s: float
    floor_kind: str
    """Which durable write the floor is (the faster): ``FLOOR_APPEND`` or ``FLOOR_RESERVED``."""
    preallocate: bool
    """Whether the log's segments were preallocated."""
    read_s: float
    open_s: float
    encode_s: float
    decode_s: float
    warmup_s: float
    """The untimed first append + flush (it writes the leader-epoch checkpoint)."""

    def _rate(self, seconds: float, *, timed: bool = False) -> tuple[float, float]:
        seconds = max(seconds, 1e-9)
        if timed:
            return self.timed_records / seconds, self.timed_bytes / seconds / 1e6
        return self.records / seconds, self.bytes / seconds / 1e6

    def as_json(self) -> dict[str, float | int]:
        records_per_s, mb_per_s = self._rate(self.append_s, timed=True)
        floor_rps, floor_mbps = self._rate(self.floor_s, timed=True)
        read_rps, read_mbps = self._rate(self.read_s)
        out: dict[str, float | int] = dict(asdict(self))
        out.update(
            records_per_s=round(records_per_s, 1),
            mb_per_s=round(mb_per_s, 3),
            floor_records_per_s=round(floor_rps, 1),
            floor_mb_per_s=round(floor_mbps, 3),
            read_records_per_s=round(read_rps, 1),
            read_mb_per_s=round(read_mbps, 3),
            ratio_to_floor=round(self.floor_s / max(self.append_s, 1e-9), 3),
            encode_us_per_batch=round(self.encode_s / self.batches * 1e6, 1),
            append_us_per_batch=round(self.append_s / self.timed_batches * 1e6, 1),
            floor_us_per_batch=round(self.floor_s / self.timed_batches * 1e6, 1),
        )
        return out

    def table(self) -> str:
        rows = [
            ("append + fsync per batch", self.append_s, True),
            (f"floor: {self.floor_kind}", self.floor_s, True),
            ("read back (reopened log)", self.read_s, False),
            ("encode only, in memory", self.encode_s, False),
            ("decode only, in memory", self.decode_s, False),
        ]
        lines = [
            f"storage bench: {self.records} records in {self.batches} batches of {self.batch}, "
            f"values of {self.value_bytes} B, {self.bytes / 1e6:.2f} MB of batches",
            f"segments {'preallocated' if self.preallocate else 'not preallocated'}",
            f"{'':36}{'seconds':>10}{'records/s':>14}{'MB/s':>10}",
        ]
        for name, seconds, timed in rows:
            rps, mbps = self._rate(seconds, timed=timed)
            lines.append(f"{name:36}{seconds:>10.4f}{rps:>14,.0f}{mbps:>10.1f}")
        per_batch = 1e6 / self.batches
        per_timed = 1e6 / self.timed_batches
        warm = self.batches - self.timed_batches
        lines.append(
            f"append reaches {self.floor_s / max(self.append_s, 1e-9):.2f} of the fsync floor; "
            f"per batch: append {self.append_s * per_timed:.0f} us, of which encoding "
            f"{self.encode_s * per_batch:.0f} us; floor {self.floor_s * per_timed:.0f} us; "
            f"reopen (validates the last segment) {self.open_s * 1e3:.1f} ms"
        )
        if warm:
            lines.append(
                f"append and floor rates cover {self.timed_batches} batches: the first, appended "
                f"before the clock (it writes the epoch checkpoint), took "
                f"{self.warmup_s * 1e3:.1f} ms"
            )
        return "\n".join(lines)


def _prepare_dir(directory: str) -> str:
    log_dir = os.path.join(directory, "log")
    if os.path.exists(log_dir):
        meta = read_meta_properties(log_dir)
        if meta is None or meta.cluster_id != BENCH_CLUSTER_ID:
            raise ValueError(
                f"{log_dir} exists and is not a previous storage bench log; choose another --dir"
            )
        shutil.rmtree(log_dir)
    os.makedirs(directory, exist_ok=True)
    format_log_dir(log_dir, cluster_id=BENCH_CLUSTER_ID, node_id=0)
    return log_dir


# A batch the bench builds in memory at most (a quorum's own limit is 1 MiB by default).
MAX_BENCH_BATCH_BYTES = 64 * 1024 * 1024


def _build_batches(records: int, batch: int, value_bytes: int) -> list[Batch]:
    value = bytes(i % 251 for i in range(value_bytes))
    base_ts = 1_700_000_000_000
    batches = []
    offset = 0
    while offset < records:
        n = min(batch, records - offset)
        recs = tuple(Record(None, value, base_ts + offset + i) for i in range(n))
        batches.append(Batch(base_offset=offset, epoch=1, records=recs))
        offset += n
    return batches


FLOOR_APPEND = "append + fsync"
FLOOR_RESERVED = "pwrite, reserved + fdatasync"


class DurableFile:
    """A scratch file made durable after every write, in one of the two ways a log can be:
    appended and fsync'd (``reserve`` 0), or written in place inside ``reserve`` bytes reserved
    beforehand with ``posix_fallocate`` and fdatasync'd, as preallocated segments are. The
    reservation is made durable before the first write, so no write pays for it. Raises
    ``OSError`` when the file system cannot reserve space. The file is removed on close. Both
    floors use it: this storage bench's and the comparison bench's (``bench/floor.py``)."""

    def __init__(self, path: str, reserve: int = 0) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._sync = os.fdatasync if reserve else os.fsync
        self._position = 0
        try:
            if reserve:
                os.posix_fallocate(self._fd, 0, reserve)
                os.fsync(self._fd)
        except BaseException:
            self.close()
            raise

    def write(self, data: bytes) -> None:
        """``data`` after what was written before, durable on return."""
        os.pwrite(self._fd, data, self._position)
        self._sync(self._fd)
        self._position += len(data)

    def close(self) -> None:
        os.close(self._fd)
        os.remove(self.path)

    def __enter__(self) -> DurableFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _floor(path: str, encoded: list[bytes], warm: int, *, reserved: bool) -> float | None:
    """Seconds to make ``encoded[warm:]`` durable one batch at a time (after ``encoded[:warm]``):
    appended and fsync'd, or (``reserved``) written in place into space reserved for all of
    them and fdatasync'd. None when this file system cannot reserve space."""
    try:
        durable = DurableFile(path, max(1, sum(len(data) for data in encoded)) if reserved else 0)
    except OSError:
        if not reserved:
            raise
        return None
    with durable:
        for data in encoded[:warm]:
            durable.write(data)
        start = time.perf_counter()
        for data in encoded[warm:]:
            durable.write(data)
        return time.perf_counter() - start


def _floors(path: str, encoded: list[bytes], warm: int) -> list[tuple[float, str]]:
    """Both kinds of floor, as (seconds, kind)."""
    out = []
    for reserved, kind in ((False, FLOOR_APPEND), (True, FLOOR_RESERVED)):
        seconds = _floor(path, encoded, warm, reserved=reserved)
        if seconds is not None:
            out.append((seconds, kind))
    return out


def run_storage_bench(
    directory: str,
    *,
    records: int,
    batch: int,
    value_bytes: int,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    preallocate: bool = True,
) -> StorageBenchResult:
    if records < 1 or batch < 1 or value_bytes < 0:
        raise ValueError("--records and --batch must be ≥ 1 and --value-bytes ≥ 0")
    if value_bytes * batch > MAX_BENCH_BATCH_BYTES:
        raise ValueError(
            f"--batch {batch} x --value-bytes {value_bytes} is over {MAX_BENCH_BATCH_BYTES:,} "
            "bytes per batch: use fewer or smaller records per batch"
        )
    log_dir = _prepare_dir(directory)
    batches = _build_batches(records, batch, value_bytes)

    # Encoded apart from the batches: encode_batch would keep the bytes on each batch, and the
    # log's append below must encode them itself, as it does for a batch it is handed.
    encoded = [bytes(encode_batch_buffer(b)) for b in batches]
    start = time.perf_counter()
    for b in batches:  # as the log does it: one buffer at a time, then dropped
        encode_batch_buffer(b)
    encode_s = time.perf_counter() - start
    start = time.perf_counter()
    for data in encoded:
        decode_batch(data)
    decode_s = time.perf_counter() - start

    warm = 1 if len(batches) > 1 else 0
    floor_path = os.path.join(directory, "fsync-floor.bin")
    floors = _floors(floor_path, encoded, warm)

    fs = RealFileSystem()
    log = SegmentedLog.open(fs, log_dir, segment_bytes=segment_bytes, preallocate=preallocate)
    try:
        start = time.perf_counter()
        for b in batches[:warm]:
            log.append(b)
            log.flush()
        warmup_s = time.perf_counter() - start
        start = time.perf_counter()
        for b in batches[warm:]:
            log.append(b)
            log.flush()
        append_s = time.perf_counter() - start
    finally:
        log.close()
    floor_s, floor_kind = min(floors + _floors(floor_path, encoded, warm))

    start = time.perf_counter()
    log = SegmentedLog.open(fs, log_dir, segment_bytes=segment_bytes)
    open_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        offset = 0
        count = 0
        while offset < log.end_offset():
            got = log.read(offset, READ_MAX_BYTES)
            for b in got:
                count += len(b.records)
            offset = got[-1].next_offset
        read_s = time.perf_counter() - start
    finally:
        log.close()
    if count != records:
        raise RuntimeError(f"read back {count} records, wrote {records}")
    return StorageBenchResult(
        records=records, batch=batch, value_bytes=value_bytes, batches=len(batches),
        bytes=sum(len(e) for e in encoded),
        timed_records=sum(len(b.records) for b in batches[warm:]),
        timed_batches=len(batches) - warm, timed_bytes=sum(len(e) for e in encoded[warm:]),
        append_s=append_s, floor_s=floor_s, floor_kind=floor_kind, preallocate=preallocate,
        read_s=read_s, open_s=open_s, encode_s=encode_s,
        decode_s=decode_s, warmup_s=warmup_s,
    )
