"""The porcupine checker on hand-written histories: linearizable ones (concurrent ops, unknown
outcomes) pass, and each kind of violation it is there to find is rejected."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.lincheck.checker import (
    CheckResult,
    History,
    check_history,
    go_available,
    resolve_unknown,
)


@pytest.fixture(scope="module", autouse=True)
def _checker() -> Iterator[None]:
    reason = go_available()
    if reason is not None:
        pytest.skip(reason)
    yield


def op(kind: str, key: str, call: int, ret: int | None, *, client: int = 0,
       value: str | None = None, expect: int | None = None, ok: bool | None = None,
       present: bool | None = None, out: str | None = None,
       version: int | None = None) -> dict[str, Any]:
    if kind in ("put", "delete") and ret is not None and ok is None:
        ok = True
    return {"client": client, "kind": kind, "key": key, "value": value,
            "expect_version": expect, "call_ns": call, "return_ns": ret, "ok": ok,
            "present": present, "out_value": out, "out_version": version}


def put(key: str, value: str, call: int, ret: int | None, client: int = 0) -> dict[str, Any]:
    return op("put", key, call, ret, client=client, value=value)


def get(key: str, call: int, ret: int, found: tuple[str, int] | None,
        client: int = 0) -> dict[str, Any]:
    if found is None:
        return op("get", key, call, ret, client=client, present=False, version=0)
    return op("get", key, call, ret, client=client, present=True, out=found[0],
              version=found[1])


def cas(key: str, expect: int, value: str | None, call: int, ret: int | None, *,
        ok: bool | None, client: int = 0) -> dict[str, Any]:
    return op("cas", key, call, ret, client=client, value=value, expect=expect, ok=ok)


def delete(key: str, call: int, ret: int | None, client: int = 0) -> dict[str, Any]:
    return op("delete", key, call, ret, client=client)


def check(ops: list[dict[str, Any]], tmp_path: Path) -> CheckResult:
    return check_history(ops, timeout_s=30, out_dir=tmp_path)


def assert_linearizable(ops: list[dict[str, Any]], tmp_path: Path) -> None:
    result = check(ops, tmp_path)
    assert result.ok and result.verdict == "ok", result.summary
    assert result.visualization is None
    assert f"{len(ops)} ops" in result.summary, result.summary


def assert_violation(ops: list[dict[str, Any]], tmp_path: Path) -> None:
    result = check(ops, tmp_path)
    assert not result.ok and result.verdict == "illegal", result.summary
    assert result.visualization is not None and result.visualization.is_file(), result.summary
    assert "<html" in result.visualization.read_text()[:2000].lower()


# ---- linearizable


def test_sequential_history_of_every_kind(tmp_path: Path) -> None:
    assert_linearizable([
        get("a", 0, 1, None),
        put("a", "x", 2, 3),
        get("a", 4, 5, ("x", 1)),
        cas("a", 1, "y", 6, 7, ok=True),
        get("a", 8, 9, ("y", 2)),
        cas("a", 1, "z", 10, 11, ok=False),  # the version is 2 now
        cas("a", 0, "z", 12, 13, ok=False),  # "must be absent": it is not
        put("a", "w", 14, 15),
        get("a", 16, 17, ("w", 3)),
        delete("a", 18, 19),
        get("a", 20, 21, None),
        cas("a", 0, "v", 22, 23, ok=True),  # created again: version 1
        get("a", 24, 25, ("v", 1)),
        cas("a", 1, None, 26, 27, ok=True),  # a conditional delete
        get("a", 28, 29, None),
        delete("a", 30, 31),  # of an absent key: still absent
        put("a", "u", 32, 33),
        get("a", 34, 35, ("u", 1)),
    ], tmp_path)


def test_concurrent_ops_may_take_effect_anywhere_in_their_interval(tmp_path: Path) -> None:
    assert_linearizable([
        put("a", "x", 0, 100, client=0),
        get("a", 10, 20, None, client=1),  # before the put took effect
        get("a", 30, 40, ("x", 1), client=2),  # after
        # Two concurrent creates: one wins, the other's condition fails.
        cas("b", 0, "p", 0, 50, ok=True, client=1),
        cas("b", 0, "q", 5, 60, ok=False, client=2),
        get("b", 70, 80, ("p", 1), client=0),
        # Reads that overlap two writes may see them in either order; both writes finished
        # before the last read, which sees the later one.
        put("c", "1", 0, 50, client=0),
        put("c", "2", 10, 60, client=1),
        get("c", 20, 30, ("2", 1), client=2),  # "2" first...
        get("c", 55, 58, ("1", 2), client=3),  # ...then "1" over it
        get("c", 70, 80, ("1", 2), client=2),
    ], tmp_path)


def test_unknown_outcomes_may_apply_late_or_never(tmp_path: Path) -> None:
    assert_linearizable([
        # A put that timed out is seen absent, then present much later.
        put("a", "x", 0, None, client=0),
        get("a", 10, 20, None, client=1),
        get("a", 1000, 1010, ("x", 1), client=1),
        # A put that timed out never applied: the version goes on from the last known write.
        put("b", "old", 0, 5, client=2),
        put("b", "lost", 10, None, client=2),
        cas("b", 1, "new", 20, 30, ok=True, client=3),
        get("b", 40, 50, ("new", 2), client=3),
        # An unknown cas that applied, and an unknown delete that did not.
        cas("c", 0, "made", 0, None, ok=None, client=4),
        get("c", 100, 110, ("made", 1), client=5),
        delete("c", 120, None, client=6),
        get("c", 130, 140, ("made", 1), client=5),
        # An unknown cas whose condition could not hold: nothing changes.
        put("d", "one", 0, 10, client=7),
        cas("d", 5, "never", 20, None, ok=None, client=7),
        get("d", 30, 40, ("one", 1), client=8),
    ], tmp_path)


def test_an_empty_history_is_linearizable(tmp_path: Path) -> None:
    assert_linearizable([], tmp_path)


def test_outcome_known_but_not_its_time(tmp_path: Path) -> None:
    """No answer came, but the outcome was learned later (``ok`` with ``return_ns`` None): it
    may take effect at any point after its call, and must take it."""
    applied_late = [
        put("a", "x", 0, None),
        get("a", 10, 20, None, client=1),
        get("a", 30, 40, ("x", 1), client=1),
    ]
    applied_late[0]["ok"] = True
    assert_linearizable(applied_late, tmp_path)
    # A cas known to have failed although its condition held from its call on.
    refused = [put("a", "x", 0, 10), cas("a", 1, "y", 20, None, ok=False, client=1)]
    assert_violation(refused, tmp_path / "refused")
    # Nor can it take effect before its call.
    early = [get("a", 0, 10, ("x", 1), client=1), put("a", "x", 20, None)]
    early[1]["ok"] = True
    assert_violation(early, tmp_path / "early")


def generated_history(ops: int, unknown_share: float, seed: int, clients: int = 4,
                      keys: int = 4) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """A linearizable history: ``clients`` sequential clients against a simulated store, each
    op taking effect at a random point within its interval; an unanswered write applies half
    of the time. Returns it with the (key, value) pairs a log would hold."""
    rng = random.Random(seed)
    free_at = [0] * clients
    timed = []
    for i in range(ops):
        client = min(range(clients), key=lambda c: free_at[c])
        call = free_at[client] + rng.randint(1, 5)
        point = call + rng.randint(1, 20)
        free_at[client] = point + rng.randint(1, 20)
        timed.append((point, client, call, free_at[client], i))
    timed.sort()
    state: dict[str, tuple[str, int] | None] = {}
    history: list[dict[str, Any]] = []
    logged: set[tuple[str, str]] = set()
    for _, client, call, ret, i in timed:
        key = f"k{rng.randrange(keys)}"
        now = state.get(key)
        version = now[1] if now else 0
        roll = rng.random()
        if roll < 0.35:
            history.append(get(key, call, ret, now, client=client))
            continue
        answered = rng.random() >= unknown_share
        applies = answered or rng.random() < 0.5
        if roll < 0.55:
            history.append(put(key, f"v{i}", call, ret if answered else None, client=client))
            written: tuple[str, int] | None = (f"v{i}", version + 1)
        elif roll < 0.9:
            expect = version if rng.random() < 0.6 else rng.randrange(3)
            history.append(cas(key, expect, f"v{i}", call, ret if answered else None,
                               ok=(expect == version) if answered else None, client=client))
            applies = applies and expect == version
            written = (f"v{i}", version + 1)
        else:
            history.append(delete(key, call, ret if answered else None, client=client))
            written = None
        if applies or (answered and roll < 0.9 and written is not None):
            logged.add((key, f"v{i}"))  # an answered cas is in the log either way
        if applies:
            state[key] = written
    return history, logged


def test_a_long_history_with_unknown_outcomes(tmp_path: Path) -> None:
    ops, logged = generated_history(4000, 0.01, seed=7)
    assert sum(1 for o in ops if o["return_ns"] is None) >= 20
    assert_linearizable(ops, tmp_path / "raw")
    resolved, stats = resolve_unknown(ops, logged)
    assert stats["dropped"] > 0 and stats["applied"] > 0, stats
    assert_linearizable(resolved, tmp_path / "resolved")
    # One read in the middle made stale: found, with or without the log's help.
    middle = [o for o in ops if o["kind"] == "get" and o["present"]][len(ops) // 6]
    middle["out_version"] -= 1
    assert_violation(ops, tmp_path / "bad-raw")
    resolved, _ = resolve_unknown(ops, logged)
    assert_violation(resolved, tmp_path / "bad-resolved")


def test_resolving_unknown_outcomes_with_the_log(tmp_path: Path) -> None:
    ops = [
        put("a", "in-log", 0, None),
        put("a", "lost", 5, None),
        cas("a", 1, "cas-in-log", 10, None, ok=None),
        cas("a", 1, "cas-lost", 15, None, ok=None),
        delete("a", 20, None),
        put("a", "answered", 25, 30),
        get("a", 40, 50, ("answered", 3)),
    ]
    resolved, stats = resolve_unknown(ops, {("a", "in-log"), ("a", "cas-in-log"),
                                            ("a", "answered")})
    assert stats == {"dropped": 2, "applied": 1, "unknown": 2}
    assert [o["value"] for o in resolved] == ["in-log", "cas-in-log", None, "answered", None]
    assert resolved[0]["ok"] is True and resolved[0]["return_ns"] is None
    assert resolved[1]["ok"] is None
    assert ops[0]["ok"] is None  # the input is left alone
    assert_linearizable(resolved, tmp_path)  # in-log, cas-in-log and answered applied


# ---- violations


def test_stale_read_after_an_acknowledged_put(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        put("a", "y", 20, 30),
        get("a", 40, 50, ("x", 1), client=1),
    ], tmp_path)


def test_read_of_absent_after_an_acknowledged_put(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        get("a", 20, 30, None, client=1),
    ], tmp_path)


def test_two_cas_on_the_same_version_both_succeeding(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        cas("a", 1, "y", 20, 40, ok=True, client=1),
        cas("a", 1, "z", 25, 45, ok=True, client=2),  # concurrent with the first
    ], tmp_path)


def test_two_creates_both_succeeding(tmp_path: Path) -> None:
    assert_violation([
        cas("a", 0, "y", 0, 40, ok=True, client=1),
        cas("a", 0, "z", 5, 45, ok=True, client=2),
    ], tmp_path)


def test_read_of_a_value_never_written(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        get("a", 20, 30, ("ghost", 2), client=1),
    ], tmp_path)


def test_read_with_the_wrong_version(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        get("a", 20, 30, ("x", 2), client=1),
    ], tmp_path)


def test_failed_cas_whose_condition_held(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        cas("a", 1, "y", 20, 30, ok=False, client=1),
    ], tmp_path)


def test_read_present_after_an_acknowledged_delete(tmp_path: Path) -> None:
    assert_violation([
        put("a", "x", 0, 10),
        delete("a", 20, 30),
        get("a", 40, 50, ("x", 1), client=1),
    ], tmp_path)


def test_an_unknown_outcome_cannot_take_effect_before_its_call(tmp_path: Path) -> None:
    assert_violation([
        get("a", 0, 10, ("x", 1), client=1),
        put("a", "x", 20, None),
    ], tmp_path)


def test_one_bad_key_among_good_ones_is_found(tmp_path: Path) -> None:
    good = [put(k, "v", 0, 10, client=i) for i, k in enumerate("bcd")]
    good += [get(k, 20, 30, ("v", 1), client=i) for i, k in enumerate("bcd")]
    assert_violation([*good, put("a", "x", 0, 10), get("a", 20, 30, ("y", 1), client=5)],
                     tmp_path)


def test_malformed_history_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="unknown kind"):
        check([op("increment", "a", 0, 1)], tmp_path)
    with pytest.raises(RuntimeError, match="cannot fail definitely"):
        check([op("put", "a", 0, 1, value="x", ok=False)], tmp_path)


# ---- the recorder


def test_history_recorder_from_threads(tmp_path: Path) -> None:
    """Four threads on one key, each doing put then get of its own value under a shared lock:
    a linearizable history recorded concurrently (the lock makes each pair atomic)."""
    history = History()
    store: dict[str, tuple[str, int]] = {}
    lock = threading.Lock()

    def client(n: int) -> None:
        for i in range(25):
            value = f"c{n}-{i}"
            with lock:
                h = history.invoke(n, "put", "k", value=value)
                version = store.get("k", ("", 0))[1] + 1
                store["k"] = (value, version)
                history.ok(h)
            with lock:
                h = history.invoke(n, "get", "k")
                seen, seen_version = store["k"]
                history.ok(h, present=True, value=seen, version=seen_version)
            h = history.invoke(n, "cas", "k", value="never", expect_version=0)
            history.ok(h, ok=False)  # the key exists from the first put on
            h = history.invoke(n, "put", "k", value="lost")
            history.fail(h)  # refused without effect: dropped

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = history.ops()
    assert len(ops) == 4 * 25 * 3
    counts = history.counts()
    assert counts["put"]["succeeded"] == 100 and counts["get"]["succeeded"] == 100
    assert counts["cas"]["failed"] == 100 and counts["put"]["dropped"] == 100
    assert_linearizable(ops, tmp_path)
    # Tampering with one read makes it a stale read.
    last_get = max((o for o in ops if o["kind"] == "get"), key=lambda o: o["call_ns"])
    last_get["out_version"] -= 1
    assert_violation(ops, tmp_path / "tampered")


def test_history_recorder_from_coroutines(tmp_path: Path) -> None:
    history = History()

    async def main() -> None:
        async def writer() -> None:
            h = history.invoke(0, "put", "k", value="x")
            await asyncio.sleep(0.01)
            history.ok(h)
            h = history.invoke(0, "delete", "k")
            await asyncio.sleep(0.01)
            history.unknown(h)  # timed out: may or may not have applied

        async def reader() -> None:
            await asyncio.sleep(0.02)
            h = history.invoke(1, "get", "k")
            history.ok(h, present=True, value="x", version=1)
            history.invoke(1, "get", "k")  # never answered: dropped (a read has no effect)

        await asyncio.gather(writer(), reader())

    asyncio.run(main())
    ops = history.ops()
    assert [o["kind"] for o in ops] == ["put", "delete", "get"]
    assert ops[1]["return_ns"] is None
    assert history.counts()["get"]["pending"] == 1
    assert_linearizable(ops, tmp_path)


def test_a_temporary_directory_stays_only_for_a_violation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``out_dir`` (the simulator, once per seed) a linearizable history leaves nothing
    behind; a violation keeps its history and visualization to read."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    good = [put("x", "1", 0, 10), get("x", 20, 30, ("1", 1))]
    assert check_history(good, timeout_s=30).ok
    assert list(tmp_path.iterdir()) == []
    bad = [put("x", "1", 0, 10), get("x", 20, 30, ("2", 1))]
    result = check_history(bad, timeout_s=30)
    assert not result.ok and result.visualization is not None
    assert result.visualization.parent.parent == tmp_path
    assert result.visualization.is_file()
