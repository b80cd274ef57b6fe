"""WatchHub: exact-key and prefix watches, catch-up from the log racing live publishes with no
gap and no duplicate, progress while idle, slow consumers cut off without holding up anyone,
the log start, thousands of watchers, closing; and the log reader a node feeds it with."""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable, Sequence

import pytest

from kraft_spark.raft.records import Batch, Record
from kraft_spark.store.txn import TXN_HEADER, encode_header
from kraft_spark.store.watch import (
    BelowLogStart,
    Cancelled,
    Progress,
    Watcher,
    WatchEvent,
    WatchHub,
    WatchHubClosed,
    WatchItem,
    batch_events,
    log_reader,
)

pytestmark = pytest.mark.timeout(60)


class CommittedLog:
    """An in-memory committed log that feeds a hub, as a node's state keeper would: each write
    lands at the next offset and is published at once. ``gap`` stands for records that are not
    writes (control batches, keyless records). ``read`` is the hub's ``read_committed``; it
    gives the loop a turn before answering, so publishes race every catch-up read."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.end = start
        self.writes: list[WatchEvent] = []
        self.offsets: list[int] = []
        self.snapshot: str | None = None
        self.reads = 0
        self.hub: WatchHub | None = None
        self.unpublished: list[WatchEvent] = []

    def make_hub(self, **options: float) -> WatchHub:
        self.hub = WatchHub(self.read, applied_offset=self.end, **options)  # type: ignore[arg-type]
        return self.hub

    def write(self, *pairs: tuple[bytes, bytes | None], publish: bool = True
              ) -> list[WatchEvent]:
        """Commit these writes in one batch and publish them (``publish=False``: later, with
        :meth:`publish`; reads see them meanwhile, as committed but not yet applied)."""
        events = []
        for key, value in pairs:
            event = WatchEvent(self.end, key, value)
            self.end += 1
            events.append(event)
            self.writes.append(event)
            self.offsets.append(event.offset)
        self.unpublished.extend(events)
        if publish:
            self.publish()
        return events

    def publish(self) -> None:
        if self.hub is not None:
            self.hub.publish(self.unpublished, self.end)
        self.unpublished = []

    def gap(self, records: int = 1) -> None:
        self.end += records
        if self.hub is not None:
            self.hub.publish([], self.end)

    async def read(self, from_offset: int, max_events: int) -> tuple[list[WatchEvent], int]:
        self.reads += 1
        if from_offset < self.start:
            raise BelowLogStart(from_offset, self.start, self.snapshot)
        first = bisect.bisect_left(self.offsets, from_offset)
        found = self.writes[first:first + max_events]
        next_offset = found[-1].offset + 1 if len(found) == max_events else self.end
        await asyncio.sleep(0)  # publishes happen between reading and answering
        return found, next_offset


async def pull(watcher: Watcher, timeout_s: float = 10.0) -> WatchItem:
    """The next item (no task in between: an item already there costs no loop iteration)."""
    async with asyncio.timeout(timeout_s):
        return await watcher.__anext__()


async def events_until(watcher: Watcher, last_offset: int) -> list[WatchEvent]:
    """The writes ``watcher`` reports up to and including ``last_offset`` (progress skipped;
    a Cancelled fails the test)."""
    seen: list[WatchEvent] = []
    while not seen or seen[-1].offset < last_offset:
        item = await pull(watcher)
        assert not isinstance(item, Cancelled), item
        if isinstance(item, WatchEvent):
            seen.append(item)
    return seen


def keyed(*keys: str) -> list[tuple[bytes, bytes | None]]:
    return [(k.encode(), f'"{k}"'.encode()) for k in keys]


# --------------------------------------------------------------------------- matching


def test_a_key_watch_gets_only_its_key_a_prefix_watch_every_key_under_it() -> None:
    async def body() -> None:
        log = CommittedLog()
        hub = log.make_hub()
        a, ab = hub.watch(key=b"a"), hub.watch(key=b"ab")
        under_a, everything, under_b = (hub.watch(prefix=b"a"), hub.watch(prefix=b""),
                                        hub.watch(prefix=b"b"))
        assert hub.watchers == 5
        for watcher in (a, ab, under_a, everything, under_b):
            assert await pull(watcher) == Progress(0)  # from now on: nothing to catch up
        log.write(*keyed("a", "ab", "b"))
        log.gap()  # offset 3: a control batch
        log.write(*keyed("abc", "ba"), (b"a", None))  # 4, 5, 6 (a deleted)
        assert [e.offset for e in await events_until(a, 6)] == [0, 6]
        assert [e.offset for e in await events_until(ab, 1)] == [1]
        assert [e.offset for e in await events_until(under_a, 6)] == [0, 1, 4, 6]
        assert [e.offset for e in await events_until(everything, 6)] == [0, 1, 2, 4, 5, 6]
        assert [e.offset for e in await events_until(under_b, 5)] == [2, 5]
        assert log.reads == 0  # live watches never read the log
        assert hub.events_published == 6
        assert hub.events_delivered == 2 + 1 + 4 + 6 + 2

    asyncio.run(body())


def test_a_delete_is_an_event_without_value_and_events_carry_the_stored_bytes() -> None:
    async def body() -> None:
        log = CommittedLog()
        hub = log.make_hub()
        watcher = hub.watch(key=b"k")
        log.write((b"k", b'{"v":1}'), (b"k", None))
        assert await pull(watcher) == Progress(0)
        assert await pull(watcher) == WatchEvent(0, b"k", b'{"v":1}')
        assert await pull(watcher) == WatchEvent(1, b"k", None)
        assert watcher.position == 2 and watcher.delivered == 2

    asyncio.run(body())


def test_a_watch_from_a_future_offset_reports_from_there_only() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed(*["k"] * 10))
        hub = log.make_hub()
        watcher = hub.watch(key=b"k", from_offset=15)
        assert not watcher.catching_up
        assert await pull(watcher) == Progress(15)
        log.write(*keyed(*["k"] * 10))  # 10..19
        assert [e.offset for e in await events_until(watcher, 19)] == [15, 16, 17, 18, 19]
        assert log.reads == 0

    asyncio.run(body())


# --------------------------------------------------------------------------- catch-up


@pytest.mark.parametrize(("max_queue", "publish_late"), [(1000, False), (5, False), (5, True)],
                         ids=["roomy-queue", "queue-overflows", "reads-ahead-of-publishes"])
def test_catch_up_then_live_has_no_gap_and_no_duplicate_while_publishes_race_it(
    max_queue: int, publish_late: bool,
) -> None:
    """The catch-up reads race a publisher writing between every two reads; with a tiny queue
    the writes queued meanwhile overflow it, and the catch-up reads further instead. With
    ``publish_late`` the reads also see writes before they are published (the log is read
    up to what is committed, the hub hears of it a turn later)."""

    async def body() -> None:
        log = CommittedLog()
        for i in range(2000):
            log.write(*keyed(f"k{i % 5}"))
            if i % 97 == 0:
                log.gap(2)
        hub = log.make_hub(max_queue=max_queue, catch_up_events=7, progress_interval_s=0.05)
        everything = hub.watch(prefix=b"k", from_offset=0)
        one_key = hub.watch(key=b"k1", from_offset=50)
        assert everything.catching_up and one_key.catching_up
        done = asyncio.Event()

        async def publisher() -> None:
            for i in range(600):
                log.write(*keyed(*(f"k{(i + j) % 5}" for j in range(3))),
                          publish=not publish_late)
                await asyncio.sleep(0)
                log.publish()
            done.set()

        writing = asyncio.create_task(publisher())
        await asyncio.sleep(0)
        seen_all, seen_one = await asyncio.gather(
            collect_while(everything, done, log, lambda _: True),
            collect_while(one_key, done, log, lambda w: w.key == b"k1" and w.offset >= 50))
        await writing
        assert [e.offset for e in seen_all] == [e.offset for e in log.writes]
        assert seen_all == log.writes
        assert [e.offset for e in seen_one] == [
            e.offset for e in log.writes if e.key == b"k1" and e.offset >= 50]
        assert hub.watchers == 2 and hub.cancelled_slow == 0
        assert not everything.catching_up
        if max_queue == 5:
            assert hub.catch_up_overflows > 0
        assert log.reads > 2000 / 7

    asyncio.run(body())


async def collect_while(watcher: Watcher, done: asyncio.Event, log: CommittedLog,
                        wanted: Callable[[WatchEvent], bool]) -> list[WatchEvent]:
    """Every write reported until the publisher is done and the last wanted write is in;
    each progress must come after all the writes below it."""
    seen: list[WatchEvent] = []
    while True:
        item = await pull(watcher)
        assert not isinstance(item, Cancelled), item
        if isinstance(item, WatchEvent):
            assert not seen or item.offset > seen[-1].offset
            seen.append(item)
        elif seen:
            assert item.offset > seen[-1].offset
        if done.is_set() and seen and seen[-1] == [w for w in log.writes if wanted(w)][-1]:
            return seen


def test_a_catch_up_that_read_past_the_published_offset_drops_those_publishes() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed(*["k"] * 10))
        hub = log.make_hub()
        log.write(*keyed(*["k"] * 5), publish=False)  # 10..14: committed, not yet applied
        watcher = hub.watch(key=b"k", from_offset=0)
        await watcher.start()  # reads 0..14
        log.publish()  # 10..14 reach the hub after the read
        log.write(*keyed("k"))
        items = [await pull(watcher) for _ in range(17)]
        assert items == [*log.writes[:15], Progress(15), log.writes[15]]

    asyncio.run(body())


def test_progress_right_after_catch_up_then_every_interval_while_nothing_matches() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed("x", "y", "y"))
        hub = log.make_hub(progress_interval_s=0.05)
        watcher = hub.watch(key=b"x", from_offset=0)
        assert await pull(watcher) == WatchEvent(0, b"x", b'"x"')
        assert await pull(watcher) == Progress(3)  # caught up: all below 3 reported
        log.write(*keyed("y", "y"))
        started = time.monotonic()
        assert await pull(watcher) == Progress(5)  # nothing matched: the hub's offset
        assert time.monotonic() - started >= 0.04
        log.write(*keyed("x"))
        assert await pull(watcher) == WatchEvent(5, b"x", b'"x"')
        assert await pull(watcher) == Progress(6)
        assert watcher.position == 6

    asyncio.run(body())


def test_a_long_catch_up_without_matches_reports_progress_too() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed(*["other"] * 3000))
        hub = log.make_hub(progress_interval_s=0.0001, catch_up_events=10)
        watcher = hub.watch(key=b"x", from_offset=0)
        item = await pull(watcher)
        assert isinstance(item, Progress) and 0 < item.offset < 3000
        assert watcher.catching_up

    asyncio.run(body())


# --------------------------------------------------------------------------- slow consumers


def test_a_slow_consumer_is_cut_off_naming_its_resume_offset_and_holds_up_no_one() -> None:
    async def body() -> None:
        log = CommittedLog()
        hub = log.make_hub(max_queue=10)
        slow, fast = hub.watch(prefix=b""), hub.watch(prefix=b"")
        assert await pull(slow) == Progress(0)
        fast_seen: list[WatchEvent] = []

        async def consume_fast() -> None:
            fast_seen.extend(await events_until(fast, 49))

        consuming = asyncio.create_task(consume_fast())
        longest = 0.0
        for i in range(50):
            started = time.perf_counter()
            log.write(*keyed(f"k{i}"))  # publish: synchronous, returns at once
            longest = max(longest, time.perf_counter() - started)
            if i < 3:
                assert await pull(slow) == log.writes[i]
            await asyncio.sleep(0)
        await asyncio.wait_for(consuming, 10)
        assert fast_seen == log.writes  # the fast watcher got everything
        assert longest < 1.0  # never waited for anyone (generous: shared CI machines)
        assert hub.cancelled_slow == 1 and hub.watchers == 1  # cut off at once
        item = await pull(slow)
        assert isinstance(item, Cancelled)
        assert item.resume_offset == 3
        assert "slow consumer: resume from offset 3" in item.reason
        with pytest.raises(StopAsyncIteration):
            await pull(slow)
        log.write(*keyed("after"))
        assert await pull(fast) == log.writes[-1]

    asyncio.run(body())


# --------------------------------------------------------------------------- log start


def test_a_watch_below_the_log_start_is_refused_before_any_event() -> None:
    async def body() -> None:
        log = CommittedLog(start=100)
        log.snapshot = "100-3"
        log.write(*keyed("k", "k"))
        hub = log.make_hub()
        watcher = hub.watch(key=b"k", from_offset=40)
        with pytest.raises(BelowLogStart) as refused:
            await watcher.start()
        assert (refused.value.log_start_offset, refused.value.snapshot) == (100, "100-3")
        assert "load snapshot 100-3 first" in str(refused.value)
        assert hub.watchers == 0
        # Without start(), the first __anext__ raises it.
        second = hub.watch(prefix=b"", from_offset=0)
        with pytest.raises(BelowLogStart):
            await pull(second)
        assert hub.watchers == 0
        ok = hub.watch(key=b"k", from_offset=100)
        await ok.start()
        assert [e.offset for e in await events_until(ok, 101)] == [100, 101]

    asyncio.run(body())


def test_the_log_start_passing_a_catch_up_ends_it_after_what_it_read() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.snapshot = "30-1"
        log.write(*keyed(*["k"] * 50))
        hub = log.make_hub(catch_up_events=5)
        watcher = hub.watch(key=b"k", from_offset=0)
        await watcher.start()
        log.start = 30  # retention ran
        items = [await pull(watcher) for _ in range(6)]
        assert [i.offset for i in items[:5] if isinstance(i, WatchEvent)] == [0, 1, 2, 3, 4]
        final = items[5]
        assert isinstance(final, Cancelled) and final.resume_offset == 30
        assert "load snapshot 30-1 first" in final.reason
        assert hub.watchers == 0
        with pytest.raises(StopAsyncIteration):
            await pull(watcher)

    asyncio.run(body())


def test_an_installed_snapshot_ends_the_watches_that_needed_the_skipped_writes() -> None:
    async def body() -> None:
        log = CommittedLog()
        hub = log.make_hub()
        live = hub.watch(key=b"k")
        ahead = hub.watch(key=b"k", from_offset=500)
        log.write(*keyed("k", "k"))
        hub.skip_to(400, "400-7")
        assert hub.applied_offset == 400 and hub.watchers == 1
        assert await pull(live) == Progress(0)
        assert [await pull(live) for _ in range(2)] == log.writes  # what it had, then the end
        final = await pull(live)
        assert isinstance(final, Cancelled) and final.resume_offset == 400
        assert "load snapshot 400-7 first" in final.reason
        assert await pull(ahead) == Progress(500)
        hub.publish([WatchEvent(500, b"k", b"1")], 501)
        assert await pull(ahead) == WatchEvent(500, b"k", b"1")

    asyncio.run(body())


def test_an_installed_snapshot_mid_catch_up_hands_out_only_what_was_read() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed(*["k"] * 20))
        hub = log.make_hub(catch_up_events=4)
        watcher = hub.watch(key=b"k", from_offset=0)
        await watcher.start()  # read 0..3
        log.write(*keyed("k", "k"))  # 20, 21: queued, past the unread 4..19
        hub.skip_to(100, "100-2")
        items = [await pull(watcher) for _ in range(5)]
        assert items[:4] == log.writes[:4]
        final = items[4]
        assert isinstance(final, Cancelled) and final.resume_offset == 100
        with pytest.raises(StopAsyncIteration):
            await pull(watcher)

    asyncio.run(body())


# --------------------------------------------------------------------------- scale, close


def test_two_thousand_watchers_each_get_their_one_event_from_one_publish() -> None:
    async def body() -> None:
        log = CommittedLog()
        hub = log.make_hub()
        by_key = [hub.watch(key=f"k/{i}".encode()) for i in range(1000)]
        by_prefix = [hub.watch(prefix=f"p/{i}/".encode()) for i in range(1000)]
        watchers = by_key + by_prefix
        assert hub.watchers == 2000
        for watcher in watchers:
            assert await pull(watcher) == Progress(0)

        async def first_event(watcher: Watcher) -> WatchItem:
            return await watcher.__anext__()

        waiting = [asyncio.create_task(first_event(w)) for w in watchers]
        await asyncio.sleep(0)  # every one of them idle, waiting
        started = time.perf_counter()
        log.write(*[(f"k/{i}".encode(), b"1") for i in range(1000)],
                  *[(f"p/{i}/x".encode(), b"2") for i in range(1000)],
                  *[(f"q/{i}".encode(), b"3") for i in range(1000)])  # matches no one
        got = await asyncio.wait_for(asyncio.gather(*waiting), 30)
        assert time.perf_counter() - started < 30
        assert [item.offset for item in got if isinstance(item, WatchEvent)] == list(range(2000))
        assert hub.events_delivered == 2000
        for watcher in watchers:
            await watcher.aclose()
        assert hub.watchers == 0
        assert hub._by_key == {} and hub._by_prefix == {} and hub._prefix_lengths == []

    asyncio.run(body())


def test_close_ends_every_watch_and_refuses_new_ones() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed(*["k"] * 20))
        hub = log.make_hub(catch_up_events=2)
        idle = hub.watch(key=b"k")
        catching_up = hub.watch(prefix=b"", from_offset=0)
        await catching_up.start()
        assert await pull(idle) == Progress(20)

        async def drain(watcher: Watcher) -> list[WatchItem]:
            return [item async for item in watcher]

        tasks = [asyncio.create_task(drain(w)) for w in (idle, catching_up)]
        await asyncio.sleep(0)
        hub.close()
        idle_items, catch_up_items = await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert len(idle_items) == 1 and isinstance(idle_items[0], Cancelled)
        assert idle_items[0].resume_offset == 20
        final = catch_up_items[-1]
        assert isinstance(final, Cancelled) and "stopped serving watches" in final.reason
        assert all(isinstance(i, WatchEvent) for i in catch_up_items[:-1])
        assert hub.watchers == 0
        with pytest.raises(WatchHubClosed):
            hub.watch(key=b"k")
        log.write(*keyed("k"))  # publishing to a closed hub is harmless
        assert hub.applied_offset == 21
        hub.close()

    asyncio.run(body())


def test_aclose_ends_an_iteration_in_progress_and_leaves_the_indexes() -> None:
    async def body() -> None:
        log = CommittedLog()
        hub = log.make_hub()
        watcher = hub.watch(prefix=b"a")
        assert await pull(watcher) == Progress(0)
        waiting = asyncio.create_task(pull(watcher))
        await asyncio.sleep(0)
        await watcher.aclose()
        with pytest.raises(StopAsyncIteration):
            await waiting
        assert hub.watchers == 0 and hub._prefix_lengths == [] and hub._by_prefix == {}
        log.write(*keyed("abc"))  # nobody to hand it to
        under_a, under_b = hub.watch(prefix=b"a"), hub.watch(prefix=b"b")
        await under_a.aclose()  # the other prefix of that length stays indexed
        log.write(*keyed("a1", "b1"))
        assert [e.offset for e in await events_until(under_b, 2)] == [2]
        await under_b.aclose()
        async with hub.watch(key=b"a") as again:
            assert await pull(again) == Progress(3)
        assert hub.watchers == 0 and hub._by_key == {}

    asyncio.run(body())


def test_publish_refuses_offsets_out_of_order_before_anything_takes_effect() -> None:
    async def body() -> None:
        log = CommittedLog()
        log.write(*keyed("k"))
        hub = log.make_hub()
        watcher = hub.watch(key=b"k")
        for events, next_offset in (
            ([WatchEvent(0, b"k", b"1")], 2),  # below the applied offset
            ([WatchEvent(2, b"k", b"1"), WatchEvent(1, b"k", b"1")], 3),  # backwards
            ([WatchEvent(3, b"k", b"1")], 3),  # at next_offset
            ([], 0),
        ):
            with pytest.raises(ValueError, match="offset"):
                hub.publish(events, next_offset)
        assert hub.applied_offset == 1 and hub.events_published == 0
        assert await pull(watcher) == Progress(1)
        with pytest.raises(ValueError, match="exactly one"):
            hub.watch(key=b"k", prefix=b"k")
        with pytest.raises(ValueError, match="from_offset"):
            hub.watch(key=b"k", from_offset=-1)

    asyncio.run(body())


# --------------------------------------------------------------------------- from the log


class BatchLog:
    def __init__(self, batches: Sequence[Batch], start: int = 0) -> None:
        self.batches = list(batches)
        self.start = start

    def start_offset(self) -> int:
        return self.start

    def read(self, start_offset: int, max_bytes: int) -> list[Batch]:
        return [b for b in self.batches if b.next_offset > start_offset][:2]


def data(base: int, *records: tuple[bytes | None, bytes | None]) -> Batch:
    return Batch(base, 1, tuple(Record(k, v) for k, v in records))


def test_batch_events_skip_control_keyless_and_failed_conditional_records() -> None:
    control = Batch(3, 1, (Record(b"\x00\x00\x00\x02", b"x"),), is_control=True)
    failed = {6: 2}  # the conditional write at 6..7 failed
    batch = data(4, (b"a", b"1"), (None, b"2"), (b"b", b"3"), (b"c", None), (b"d", None))
    assert batch_events(control) == []
    assert batch_events(batch, lambda o: failed.get(o, 0)) == [
        WatchEvent(4, b"a", b"1"), WatchEvent(8, b"d", None)]
    assert batch_events(batch, None, 7) == [WatchEvent(7, b"c", None), WatchEvent(8, b"d", None)]


def _group(base: int, *records: tuple[bytes, bytes | None]) -> Batch:
    """A conditional group (no conditions) of ``records`` at ``base``, after a plain write."""
    header = ((TXN_HEADER, encode_header(len(records), [])),)
    grouped = (Record(k, v, headers=header if i == 0 else ()) for i, (k, v) in enumerate(records))
    return Batch(base, 1, (Record(b"p", b"0"), *grouped))


def test_a_groups_events_carry_its_first_offset_as_their_revision() -> None:
    batch = _group(3, (b"a", b"1"), (b"b", b"2"), (b"c", None))  # plain at 3, group 4..6
    events = batch_events(batch, lambda o: 0)
    assert [(e.offset, e.revision) for e in events] == [(3, 3), (4, 4), (5, 4), (6, 4)]
    assert batch_events(batch, lambda o: 0, 5) == events[2:]  # log positions, as before
    assert batch_events(batch, lambda o: 4 if o == 4 else 0) == events[:1]  # it failed


def test_poll_hands_out_the_rest_of_a_group_published_together() -> None:
    """etcd's one WatchResponse per revision gathers a group's events with ``poll``: ready
    at once, live (one publish) and on catch-up (one read), never past what is ready."""
    async def body() -> None:
        batch = _group(0, (b"k/a", b"1"), (b"k/b", b"2"))
        the_log = BatchLog([batch])
        end = 0
        hub = WatchHub(log_reader(the_log, lambda: end, lambda: None), applied_offset=0)
        live = hub.watch(prefix=b"k/")
        assert isinstance(await live.__anext__(), Progress)
        assert live.poll() is None
        hub.publish(batch_events(batch, lambda o: 0), 3)
        end = 3
        first = await live.__anext__()
        assert isinstance(first, WatchEvent) and (first.key, first.revision) == (b"k/a", 1)
        rest = live.poll()
        assert isinstance(rest, WatchEvent) and (rest.key, rest.revision) == (b"k/b", 1)
        assert live.poll() is None
        late = hub.watch(prefix=b"k/", from_offset=1)
        await late.start()
        caught = [await late.__anext__(), late.poll()]
        assert [(e.offset, e.revision) for e in caught if isinstance(e, WatchEvent)] == [
            (1, 1), (2, 1)]
        assert late.poll() is None  # what follows needs the next catch-up step
        inside = hub.watch(prefix=b"k/", from_offset=2)  # a log position inside the group
        await inside.start()
        caught = [await inside.__anext__()]
        assert [(e.offset, e.revision) for e in caught if isinstance(e, WatchEvent)] == [
            (2, 1)]
        for watcher in (live, late, inside):
            await watcher.aclose()

    asyncio.run(body())


def test_log_reader_reads_whole_batches_below_the_end_and_refuses_below_the_start() -> None:
    async def body() -> None:
        batches = [data(0, (b"a", b"1"), (b"b", b"2")),
                   Batch(2, 1, (Record(b"\x00\x00\x00\x02", b"x"),), is_control=True),
                   data(3, (b"a", b"3")), data(4, (b"c", b"4"), (b"a", None)),
                   data(6, (b"z", b"5"))]
        the_log = BatchLog(batches)
        end = 6
        read = log_reader(the_log, lambda: end, lambda: "2-1")
        assert await read(0, 100) == ([WatchEvent(0, b"a", b"1"), WatchEvent(1, b"b", b"2"),
                                       WatchEvent(3, b"a", b"3"), WatchEvent(4, b"c", b"4"),
                                       WatchEvent(5, b"a", None)], 6)
        assert await read(1, 1) == ([WatchEvent(1, b"b", b"2")], 2)  # whole batch, then stop
        assert await read(5, 100) == ([WatchEvent(5, b"a", None)], 6)
        assert await read(6, 100) == ([], 6)  # nothing applied there yet
        the_log.start = 2
        with pytest.raises(BelowLogStart) as refused:
            await read(1, 100)
        assert (refused.value.log_start_offset, refused.value.snapshot) == (2, "2-1")
        higher = log_reader(the_log, lambda: end, lambda: None, start=lambda: 4)
        with pytest.raises(BelowLogStart, match="load the newest snapshot"):
            await higher(3, 100)

        # Fed to a hub: catch-up from the log, then live.
        hub = WatchHub(read, applied_offset=end, catch_up_events=1)
        watcher = hub.watch(key=b"a", from_offset=2)
        await watcher.start()
        assert [await pull(watcher) for _ in range(3)] == [
            WatchEvent(3, b"a", b"3"), WatchEvent(5, b"a", None), Progress(6)]

    asyncio.run(body())
