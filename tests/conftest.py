"""The suite's event loops: every kraft-spark process runs on uvloop (``kraft_spark.aio``), while
in-process tests make theirs through asyncio's policy, where transports behave a little
differently (uvloop's transports do not subclass ``asyncio.Transport``: a check that held on
asyncio's loop once broke every connection of the real processes). So the network and API tests
(``tests/net``, ``tests/api``) run twice in one pass, ``[asyncio]`` and ``[uvloop]``;
``--event-loop=asyncio`` or ``--event-loop=uvloop`` runs every test once on that loop instead."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import leak_origin

# Every JVM the suite starts (Spark's, the application's executors, Kafka's tools) is short-lived
# and shares two cores with the others: C2's compilations and the parallel collector's threads
# cost more than they return there (test_resize alone: 59 s -> 46 s with these). The JVM reads
# them from the environment (and says so on stderr); they change no behaviour.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--event-loop", choices=("both", "asyncio", "uvloop"), default="both",
                     help="the event loop asyncio.run uses in these tests (both: the network "
                          "and API tests on each, the others on asyncio's)")


# The packages whose tests run on both loops (by default): what makes and serves connections.
BOTH_LOOPS = ("net", "api")


def _on_both_loops(config: pytest.Config, path: Any, module: Any) -> bool:
    if config.getoption("--event-loop") != "both":
        return False
    parts = path.relative_to(config.rootpath / "tests").parts
    marks = getattr(module, "pytestmark", [])
    marks = marks if isinstance(marks, list) else [marks]
    return parts[0] in BOTH_LOOPS and not any(m.name == "loop_free" for m in marks)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "event_loop_kind" in metafunc.fixturenames and _on_both_loops(
            metafunc.config, metafunc.definition.path, metafunc.module):
        metafunc.parametrize("event_loop_kind", ["asyncio", "uvloop"], indirect=True)


@pytest.fixture(autouse=True)
def event_loop_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The loop this test's ``asyncio.run`` calls make: the parameter on both loops, else the
    session's (set in pytest_configure)."""
    kind = getattr(request, "param", None)
    if kind != "uvloop":
        yield kind or str(request.config.getoption("--event-loop"))
        return
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        yield kind
    finally:
        asyncio.set_event_loop_policy(None)


# Event loops made through asyncio's policy (asyncio.run, new_event_loop): what the loop
# parameter changes. kraft_spark.aio's loops (every server thread of the product) are uvloop's
# whatever the policy, so a module that never makes one through the policy runs the same code on
# both loops: marked ``loop_free``, it runs once (a third of the uvloop half), and each run
# checks the mark still holds.
_POLICY_LOOPS = [0]


def _count_policy_loops() -> None:
    policy_class: Any = asyncio.events.BaseDefaultEventLoopPolicy
    make = policy_class.new_event_loop

    def new_event_loop(self: Any) -> asyncio.AbstractEventLoop:
        _POLICY_LOOPS[0] += 1
        loop: asyncio.AbstractEventLoop = make(self)
        return loop

    policy_class.new_event_loop = new_event_loop


@pytest.fixture(autouse=True)
def _loop_free_mark_holds(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("loop_free") is None:
        yield
        return
    before = _POLICY_LOOPS[0]
    yield
    assert _POLICY_LOOPS[0] == before, (
        f"{request.node.nodeid} is marked loop_free but made an event loop through asyncio's "
        "policy: remove the mark from its module, so it runs on uvloop too")


def pytest_configure(config: pytest.Config) -> None:
    leak_origin.install()
    _count_policy_loops()
    if config.getoption("--event-loop") == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


@pytest.fixture(autouse=True, scope="module")
def _collect_leaks_where_they_happen() -> Iterator[None]:
    """A socket, transport or file left open is reported by the garbage collector whenever it
    next runs, which is in some later, innocent test (``filterwarnings = error`` makes the
    ResourceWarning a failure there). Collecting at the end of every module pins the failure on
    the module that leaked (and ``leak_origin`` names the test and code that made a leaked
    transport), at a cost of a few milliseconds per module."""
    yield
    gc.collect()


# Spark's modules in two groups of about equal length (the one-worker Spark group was the long
# pole: 12 min of a 2-worker run, one core idle for the last third): each group's first test
# that needs the session JVM starts one on its worker.
SPARK_GROUPS = {
    "test_multihost.py": "spark-a", "test_spark_submit.py": "spark-a",
    "test_app_http.py": "spark-a", "test_application.py": "spark-a",
}


# Packages whose modules hold the longest single tests (tens of seconds each), handed out
# after the Spark groups.
LONG_PACKAGES = ("sim", "lincheck", "integration", "kafka")


def _start_rank(parts: tuple[str, ...]) -> int:
    if parts[0] == "spark":
        return 0 if SPARK_GROUPS.get(parts[-1]) == "spark-a" else 1
    return 2 if parts[0] in LONG_PACKAGES else 3


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """For ``pytest -n N --dist loadgroup`` (pytest-xdist, what ``make test`` runs): the Spark
    tests share two workers' groups (no more than two Spark applications competing for two
    cores, one user of Ivy's cache per worker), Kafka's tools one (one Maven cache), and every
    other module stays whole on one worker (its module-scoped quorum starts once).

    Longest first (``make test`` passes ``--no-loadscope-reorder``: xdist's default order, by
    number of tests, handed out the 9 tests of spark-a, 5 minutes in one group, after every
    module of ten tests or more): the Spark groups, then the simulator's and the checker's seed
    campaigns and the real-process scenarios, then the rest in collection order. Measured once
    each, this order alone did not shorten the pass (CI run 217: 639 s after the install,
    against 631 s for run 216 without it): the suite is bound by its CPU time."""
    root = config.rootpath / "tests"
    for item in items:
        parts = item.path.relative_to(root).parts
        if parts[0] == "spark":
            group = SPARK_GROUPS.get(parts[-1], "spark-b")
        else:
            group = "kafka" if parts[0] == "kafka" else "/".join(parts)
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: _start_rank(item.path.relative_to(root).parts))


@pytest.hookimpl(trylast=True)  # after xdist's hook, which appends "@<group>" to node ids
def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker of ``--dist loadgroup``: the groups above must have reached xdist.
    They once silently did not (pytest 9.2 with pytest-xdist 3.8: the Spark modules then ran
    on every worker at once and module-scoped quorums started up to three times)."""
    config = session.config
    grouped = getattr(config.option, "loadgroup", False) and session.items
    if grouped and "@" not in session.items[0].nodeid:
        raise pytest.UsageError(
            "pytest-xdist ignored the test groups (tests/conftest.py): use a pytest and "
            "pytest-xdist pair that supports --dist loadgroup (pyproject.toml pins it)")


# Where each test ran and when, for finding the pass's critical path (which worker's chain of
# tests ends last): KRAFT_SPARK_TEST_TIMELINE=<file> appends one line per test, "worker start
# end node-id" (wall-clock seconds). Off by default.
TIMELINE = os.environ.get("KRAFT_SPARK_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started = time.time()
    yield
    if TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(TIMELINE, "a", encoding="utf-8") as out:
            out.write(f"{worker}\t{started:.1f}\t{time.time():.1f}\t{item.nodeid}\n")
