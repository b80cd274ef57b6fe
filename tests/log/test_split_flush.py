"""The node's off-loop flush: begin on the loop, fsync on a worker thread, end on the loop."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from kraft_spark.log import SegmentedLog
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.simfs import SimulatedFileSystem

from .helpers import fill


def test_appends_during_a_flush_stay_unflushed(tmp_path: Path) -> None:
    log = SegmentedLog.open(RealFileSystem(), str(tmp_path))
    fill(log, [1, 1])
    ticket = log.begin_flush()
    assert ticket is not None and ticket.end_offset == 6
    fill(log, [1])  # arrives while the worker fsyncs
    worker = threading.Thread(target=log.sync_flush, args=(ticket,))
    worker.start()
    worker.join()
    assert log.end_flush(ticket) == 6  # not 9: the last batch was not in the ticket
    second = log.begin_flush()
    assert second is not None
    log.sync_flush(second)
    assert log.end_flush(second) == 9
    assert log.begin_flush() is None  # nothing dirty
    log.close()


def test_a_truncation_voids_the_ticket_in_flight(tmp_path: Path) -> None:
    log = SegmentedLog.open(RealFileSystem(), str(tmp_path), segment_bytes=200)
    fill(log, [1, 1, 1, 1])  # several segments
    assert len(log.segment_paths()) > 1
    ticket = log.begin_flush()
    assert ticket is not None
    log.truncate_to(6)  # flushes the cut and everything the ticket covered
    fill(log, [2, 2])  # new records where the old ones were
    log.sync_flush(ticket)
    assert log.end_flush(ticket) == 6  # the void ticket claims nothing of offsets 6..
    log.close()


def test_a_crash_after_end_flush_keeps_what_the_ticket_covered(tmp_path: Path) -> None:
    fs = SimulatedFileSystem()
    log = SegmentedLog.open(fs, "/d")
    written = fill(log, [1, 1, 2])
    ticket = log.begin_flush()
    assert ticket is not None
    fill(log, [2])  # never flushed
    log.sync_flush(ticket)
    durable = log.end_flush(ticket)
    fs.crash(random.Random(3), torn=True)
    again = SegmentedLog.open(fs, "/d")
    assert again.end_offset() >= durable == written[-1].next_offset
    assert again.read(0, 1 << 20)[: len(written)] == written
    again.close()


def test_retention_deleting_a_segment_in_the_ticket_in_flight_is_no_failure(
        tmp_path: Path) -> None:
    """KIP-630 retention may delete a segment whose files a ticket names before the worker
    fsyncs them (seen in CI: ENOENT on a deleted .index stopped the node): the deleted files
    need no fsync, the rest of the ticket is flushed."""
    log = SegmentedLog.open(RealFileSystem(), str(tmp_path), segment_bytes=200)
    fill(log, [1, 1, 1, 1])  # several segments, all dirty
    ticket = log.begin_flush()
    assert ticket is not None and len(log.segment_paths()) > 1
    first_active = log.segment_paths()[-1]
    log.advance_start_offset(log.end_offset())  # every segment but the active one goes
    assert log.segment_paths() == [first_active]
    log.sync_flush(ticket)
    assert log.end_flush(ticket) == ticket.end_offset
    log.close()
