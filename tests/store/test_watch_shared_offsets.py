"""Several watch events at one offset (a lease revoked or expired there deletes each of its
keys): all delivered, in order, to every matching watch, live and from the log; each with an
identity (offset, index) that resumes between them, after a disconnect, a slow consumer's
cut-off or a progress event, never skipping nor repeating one."""

from __future__ import annotations

import asyncio

import pytest

from kraft_spark.raft.records import Batch, Record
from kraft_spark.store.watch import (
    Cancelled,
    Progress,
    Watcher,
    WatchEvent,
    WatchHub,
    WatchItem,
    batch_events,
    event_id,
    log_reader,
    parse_event_id,
    resume_id,
)
from tests.store.test_watch_hub import BatchLog, pull

pytestmark = pytest.mark.timeout(60)

LEASE_KEYS = (b"svc/a", b"svc/b", b"svc/c")


def history() -> tuple[list[Batch], dict[int, tuple[bytes, ...]]]:
    """Puts of three keys on a lease (0..2), an unrelated put (3), the lease's revocation at
    offset 4 (a keyless record: its deletes are the state's), then two puts (5, 6)."""
    puts = Batch(0, 1, tuple(Record(k, b"1") for k in LEASE_KEYS))
    other = Batch(3, 1, (Record(b"cfg/x", b"2"),))
    revoke = Batch(4, 1, (Record(None, b""),))
    after = Batch(5, 1, (Record(b"svc/d", b"3"), Record(b"svc/e", b"4")))
    return [puts, other, revoke, after], {4: LEASE_KEYS}


def events_of(batches: list[Batch], deleted: dict[int, tuple[bytes, ...]]
              ) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    for batch in batches:
        batch_events(batch, out=out, deleted_by=lambda o: deleted.get(o, ()))
    return out


async def writes(watcher: Watcher, count: int) -> list[WatchEvent]:
    seen: list[WatchEvent] = []
    while len(seen) < count:
        item: WatchItem = await pull(watcher)
        assert not isinstance(item, Cancelled), item
        if isinstance(item, WatchEvent):
            seen.append(item)
    return seen


def test_a_lease_deleting_three_keys_gives_three_numbered_events_at_its_offset() -> None:
    batches, deleted = history()
    events = events_of(batches, deleted)
    assert [(e.offset, e.key, e.index, e.last) for e in events if e.offset == 4] == [
        (4, b"svc/a", 0, False), (4, b"svc/b", 1, False), (4, b"svc/c", 2, True)]
    assert [event_id(e) for e in events] == ["0", "1", "2", "3", "4.0", "4.1", "4", "5", "6"]
    # An id names where to resume: after it, and back.
    assert parse_event_id("4.0") == (4, 1) and parse_event_id("4") == (5, 0)
    assert resume_id(4, 1) == "4.0" and resume_id(5, 0) == "4" and resume_id(0, 0) is None
    for bad in ("", "4.", ".1", "4.1.2", "-1", "x", "4.-1", "٣"):
        with pytest.raises(ValueError, match="event id"):
            parse_event_id(bad)


def test_every_matching_watch_gets_every_delete_of_one_offset_in_order_live() -> None:
    async def body() -> None:
        batches, deleted = history()
        events = events_of(batches, deleted)
        hub = WatchHub(log_reader(BatchLog([]), lambda: 0, lambda: None), applied_offset=0)
        everything, prefix, one_key = (hub.watch(prefix=b""), hub.watch(prefix=b"svc/"),
                                       hub.watch(key=b"svc/b"))
        hub.publish(events[:4], 4)
        hub.publish(events[4:7], 5)  # refused (ValueError) before: offsets had to grow
        hub.publish(events[7:], 7)
        assert await writes(everything, 9) == events
        assert await writes(prefix, 8) == [e for e in events if e.key.startswith(b"svc/")]
        assert await writes(one_key, 2) == [events[1], events[5]]
        assert hub.events_published == 9

    asyncio.run(body())


def test_a_resume_between_the_events_of_one_offset_neither_skips_nor_repeats() -> None:
    async def body() -> None:
        batches, deleted = history()
        events = events_of(batches, deleted)
        the_log = BatchLog(batches)
        end = 7
        read = log_reader(the_log, lambda: end, lambda: None,
                          deleted_by=lambda o: deleted.get(o, ()))
        hub = WatchHub(read, applied_offset=end, catch_up_events=1)
        for after in range(len(events)):  # every event a consumer may have stopped after
            offset, index = parse_event_id(event_id(events[after]))
            watcher = hub.watch(prefix=b"", from_offset=offset, from_index=index)
            await watcher.start()
            assert await writes(watcher, len(events) - after - 1) == events[after + 1:]
            progress = await pull(watcher)
            assert progress == Progress(7), progress
            await watcher.aclose()

        # Live: a watch opened between the events of the applied offset's predecessor.
        live = WatchHub(read, applied_offset=4)
        watcher = live.watch(prefix=b"svc/", from_offset=4, from_index=2)
        assert await pull(watcher) == Progress(4, 2)  # where it stands: id "4.1"
        live.publish(events[4:7], 5)
        assert await writes(watcher, 1) == [events[6]]

    asyncio.run(body())


def test_a_slow_consumer_cut_off_mid_offset_resumes_at_the_next_event_of_it() -> None:
    async def body() -> None:
        batches, deleted = history()
        events = events_of(batches, deleted)
        the_log = BatchLog(batches)
        applied = 4
        read = log_reader(the_log, lambda: applied, lambda: None,
                          deleted_by=lambda o: deleted.get(o, ()))
        hub = WatchHub(read, applied_offset=4, max_queue=3)
        slow = hub.watch(prefix=b"svc/")
        assert await pull(slow) == Progress(4)
        hub.publish(events[4:7], 5)  # the queue is full
        first = await pull(slow)
        assert first == events[4]
        hub.publish(events[7:8], 6)  # full again
        hub.publish(events[8:], 7)  # cut off, having taken one of offset 4's three events
        applied = 7
        received = [first]
        while not isinstance(item := await pull(slow), Cancelled):
            assert isinstance(item, WatchEvent)
            received.append(item)
        assert (item.resume_offset, item.resume_index) == (4, 1)
        assert "Last-Event-ID: 4.0" in item.reason
        again = hub.watch(prefix=b"svc/", from_offset=item.resume_offset,
                          from_index=item.resume_index)
        await again.start()
        received += await writes(again, 4)
        assert received == [e for e in events[4:] if e.key.startswith(b"svc/")]

    asyncio.run(body())


def test_publish_still_refuses_events_out_of_order_within_an_offset() -> None:
    hub = WatchHub(log_reader(BatchLog([]), lambda: 0, lambda: None), applied_offset=4)
    watcher = hub.watch(prefix=b"")
    repeated = [WatchEvent(4, b"a", None, 0, False), WatchEvent(4, b"b", None, 0, True)]
    with pytest.raises(ValueError, match="order"):
        hub.publish(repeated, 5)
    assert hub.applied_offset == 4 and hub.events_published == 0 and not watcher.ended


def test_abort_ends_every_watch_at_what_its_consumer_received() -> None:
    async def body() -> None:
        batches, deleted = history()
        events = events_of(batches, deleted)
        hub = WatchHub(log_reader(BatchLog([]), lambda: 0, lambda: None), applied_offset=4)
        watcher = hub.watch(prefix=b"svc/")
        assert await pull(watcher) == Progress(4)
        hub.publish(events[4:7], 5)
        assert await pull(watcher) == events[4]
        hub.abort("publishing failed", 6)
        final = await pull(watcher)
        assert isinstance(final, Cancelled) and (final.resume_offset, final.resume_index) == (
            4, 1)
        assert hub.applied_offset == 6 and hub.watchers == 0
        later = hub.watch(prefix=b"")
        assert await pull(later) == Progress(6)

    asyncio.run(body())
