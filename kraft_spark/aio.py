"""The event loop every kraft-spark process runs on: uvloop when it is installed (it is a
dependency; uvicorn picks it for the HTTP sidecar too), else asyncio's own.

uvloop roughly halves the per-message cost of the asyncio shell on this project's hot paths
(socket reads and writes, call_soon, futures), which is most of a commit's CPU time. Set
``KRAFT_SPARK_EVENT_LOOP=asyncio`` to use the standard loop (to compare, or to debug).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def settle_future(future: asyncio.Future[T], result: T | None,
                  error: BaseException | None) -> None:
    """Resolve ``future`` with a callback's outcome, ``(result, None)`` or ``(None, error)``,
    unless it is done already (its waiter gave up, or it was settled before): the adapter
    from the callbacks of the append and local-request paths to coroutines."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert result is not None  # a success always carries its result
        future.set_result(result)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new event loop for this process."""
    if os.environ.get("KRAFT_SPARK_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
            return factory
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on this process's loop kind."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def stop_thread_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread,
                     timeout_s: float = 5.0) -> None:
    """Stop a loop running ``run_forever`` on ``thread`` and close it as ``asyncio.run`` ends
    its own: what is left is cancelled and allowed to finish, so a transport closed in the last
    turn (its socket is closed a turn later, by a callback) or a connection accepted just
    before the stop is closed, not left for the garbage collector to report."""
    if loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout_s)
    if thread.is_alive():  # still busy: closing under it would break it; leave it be
        return
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()

    async def finish() -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        await loop.shutdown_asyncgens()

    loop.run_until_complete(finish())
    loop.close()
