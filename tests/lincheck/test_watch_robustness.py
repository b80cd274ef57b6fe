"""Watches under faults, on real processes (in the manner of etcd's robustness tests and their
watch validation): ``kraft-spark local`` with three voters, each serving the HTTP API.

* Writers (``watch_traffic.Writer``) put, write conditionally (many fail), delete, write outside
  the watched prefix, and grant leases with several keys each that they revoke or leave to
  expire, through any node, retrying as a user would (Idempotency-Key on appends).
* Watchers (``watch_traffic.SseWatcher``) follow prefixes and keys on every node, some from
  offset 0 and some from now on, resuming after every disconnect with ``Last-Event-ID`` on
  their node or, when it is down, on the next; they also drop their stream on purpose, most
  often between the deletes of one lease (an id ``N.M``), and resume on a random node.
* A nemesis kills (kill -9, then a restart) or freezes (SIGSTOP / SIGCONT) one node at a time,
  the leader about half the time.

Then the last writes go in, the watchers read up to them, the quorum stops, and the committed
history is read from the voters' logs on disk and judged by the state machine
(``watch_history``): each watcher must have received exactly the history's events that match
it, from where it started to the last point it reached (no event lost, none twice, in (offset,
index) order, every delete of a lease's revocation or expiry), and every watcher must name each
event with the same id. A failure names the watcher, the first divergence, its connections and
the nodes' log tails.

``LINCHECK_SEED`` replays the same choices (not the timing); ``WATCH_ROBUSTNESS_RUN_S`` sets the
time under faults (default 16 s; the whole test takes about 30 s). The ``slow`` variant
(``[long]``) runs 75 s under faults."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from .nemesis import KvQuorum, Nemesis, Unexpected, log_tails, wait_ready
from .watch_history import History, check_agreement, check_watch, read_history
from .watch_traffic import SseWatcher, Writer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

WRITERS = 3
RUN_S = float(os.environ.get("WATCH_ROBUSTNESS_RUN_S", "16"))
SLOW_RUN_S = 75.0  # the `slow` variant: more faults, longer streams (about 95 s in all)
# One put each once the faults are over: every watcher reads until it saw its own.
FINAL_KEYS = ["w/k0", "w/l/a", "w/l/b"]


def make_watchers(quorum: KvQuorum, seed: int, stop: threading.Event) -> list[SseWatcher]:
    watchers = []
    for node in range(len(quorum.http_urls)):
        watchers.append(SseWatcher(f"prefix w/ on node {node}", quorum, node,
                                   seed=seed + 10 + node, stop=stop, prefix="w/"))
        watchers.append(SseWatcher(f"prefix w/l/ from 0 on node {node}", quorum, node,
                                   seed=seed + 20 + node, stop=stop, prefix="w/l/",
                                   from_offset=0))
    watchers.append(SseWatcher("key w/k0 on node 0", quorum, 0, seed=seed + 30, stop=stop,
                               key="w/k0"))
    watchers.append(SseWatcher("key w/l/a from 0 on node 1", quorum, 1, seed=seed + 31,
                               stop=stop, key="w/l/a", from_offset=0))
    watchers.append(SseWatcher("key w/l/b on node 2", quorum, 2, seed=seed + 32, stop=stop,
                               key="w/l/b"))
    return watchers


def final_puts(quorum: KvQuorum, seed: int, unexpected: Unexpected) -> dict[str, int]:
    """One acknowledged put to each of ``FINAL_KEYS`` (retried under its Idempotency-Key):
    key -> its offset."""
    writer = Writer(WRITERS, quorum, seed, threading.Event(), unexpected)
    offsets = {}
    try:
        for key in FINAL_KEYS:
            answer = writer.request("POST", "/v1/records",
                                    {"records": [{"key": key, "value": "final"}]})
            assert answer is not None and answer[0] == 200, f"the final put of {key}: {answer}"
            offsets[key] = int(answer[1]["base_offset"])
    finally:
        writer.conn.close()
    return offsets


def report(watchers: list[SseWatcher], writers: list[Writer], nemesis: Nemesis | None,
           history: History | None) -> str:
    lines = []
    if nemesis is not None:
        lines.append(f"nemesis: {nemesis.kills} kills, {nemesis.pauses} pauses "
                     f"({nemesis.leader_faults} of the leader)")
        lines.extend(f"  {e}" for e in nemesis.events)
    for writer in writers:
        lines.append(f"{writer.name}: {dict(sorted(writer.counts.items()))}")
    for w in watchers:
        lines.append(f"{w.name}: {len(w.log.events())} events, start {w.log.start}, cursor "
                     f"{w.cursor}, {w.resumes} resumes ({w.fallbacks} to the next node, "
                     f"{w.dropped} dropped on purpose, {w.dropped_mid} of them mid-offset)"
                     + (f", error {w.error!r}" if w.error else ""))
        lines.append(f"  streams ended: {dict(w.reasons.most_common())}")
        lines.extend(f"  {c}" for c in w.log.connections if "(cancelled" in c)
    if history is not None:
        lines.append(f"history: {history.summary()}")
    return "\n".join(lines)


@pytest.mark.parametrize("run_s", [
    pytest.param(RUN_S, id="short"),
    pytest.param(SLOW_RUN_S, id="long", marks=pytest.mark.slow),
])
def test_watches_lose_and_repeat_nothing_under_kills_and_pauses(tmp_path: Path,
                                                                run_s: float) -> None:
    seed = int(os.environ.get("LINCHECK_SEED", str(time.time_ns() % 1_000_000)))
    print(f"\nLINCHECK_SEED={seed}")
    began = time.monotonic()
    data_dir = tmp_path / "data"
    quorum = KvQuorum(data_dir)
    unexpected = Unexpected()
    writers_stop, watchers_stop = threading.Event(), threading.Event()
    watchers: list[SseWatcher] = []
    writers: list[Writer] = []
    nemesis: Nemesis | None = None
    history: History | None = None
    try:
        quorum.start()
        wait_ready(quorum)
        watchers = make_watchers(quorum, seed, watchers_stop)
        for watcher in watchers:
            watcher.start()
        deadline = time.monotonic() + 15
        while any(w.log.start is None for w in watchers):
            assert time.monotonic() < deadline, report(watchers, writers, nemesis, None)
            time.sleep(0.05)
        writers = [Writer(i, quorum, seed + i, writers_stop, unexpected)
                   for i in range(WRITERS)]
        started = [quorum.pid(i) for i in range(quorum.voters)]  # `local`'s own children
        nemesis = Nemesis(quorum, seed)
        for writer in writers:
            writer.start()
        nemesis.start()
        writers_stop.wait(run_s)
        nemesis.finish()
        writers_stop.set()
        for writer in writers:
            writer.join(15)
        assert not any(w.is_alive() for w in writers), "a writer did not stop"
        assert nemesis.error is None, f"the nemesis failed: {nemesis.error!r}"
        wait_ready(quorum)

        finals = final_puts(quorum, seed, unexpected)
        for watcher in watchers:
            watcher.target = max(o for k, o in finals.items() if watcher.log.matches(k))
        deadline = time.monotonic() + 30
        for watcher in watchers:
            watcher.join(max(0.1, deadline - time.monotonic()))
        late = [w.name for w in watchers if w.is_alive()]
        watchers_stop.set()
        for watcher in watchers:
            watcher.join(10)
        faults = f"{nemesis.kills + nemesis.pauses} faults"
        code = quorum.stop()  # graceful: SIGTERM to `local` and to the nodes restarted here
        # `local` exits 1 by itself once every node it started has died (all were killed and
        # restarted by the nemesis, as the long run does); else 0 on SIGTERM.
        if any(quorum.pid(i) == pid for i, pid in enumerate(started)):
            assert code == 0, f"kraft-spark local exited {code} on SIGTERM"

        end = max(finals.values()) + 1
        for watcher in watchers:
            if watcher.cursor is not None:
                end = max(end, watcher.cursor[0] + (watcher.cursor[1] > 0))
        history, problems = read_history([quorum.log_dir(i) for i in range(quorum.voters)],
                                          end)
        checked = 0
        for watcher in watchers:
            if watcher.error is not None:
                problems.append(f"{watcher.name} failed: {watcher.error!r}")
            count, found = check_watch(watcher.log, history)
            checked += count
            problems.extend(found)
        problems.extend(check_agreement([w.log for w in watchers]))
        if late:
            problems.append(f"watchers that did not reach the final puts {finals} in 30 s: "
                            f"{late}")
        summary = report(watchers, writers, nemesis, history)
        print(summary)
        print(f"{checked} events checked over {len(watchers)} watchers, {faults}, "
              f"{time.monotonic() - began:.1f} s")
        if problems:
            pytest.fail("\n\n".join(problems) + f"\n\n{summary}\n\n{log_tails(data_dir)}",
                        pytrace=False)
        assert not unexpected.items, "unexpected answers:\n" + "\n".join(unexpected.items)
        # Not vacuous: faults happened, leases of several keys were revoked and expired,
        # conditional writes failed, streams were resumed, also between one offset's deletes.
        assert nemesis.kills >= 1 and nemesis.pauses >= 1, summary
        ops = history.lease_ops
        assert ops["revoke deleting"] >= 1 and ops["expire deleting"] >= 1, summary
        assert any(len(keys) > 1 for keys in history.lease_deletes.values()), summary
        assert history.failed_writes >= 1, summary
        assert sum(w.dropped_mid for w in watchers) >= 1, summary
        assert sum(w.fallbacks for w in watchers) >= 1, summary
    except BaseException:
        if history is None:
            print(report(watchers, writers, nemesis, None))
            print(log_tails(data_dir))
        raise
    finally:
        writers_stop.set()
        watchers_stop.set()
        if nemesis is not None and nemesis.is_alive():  # it heals what it broke as it ends
            nemesis.finish()
        for thread in [*writers, *watchers]:
            thread.join(10)
        quorum.stop()
