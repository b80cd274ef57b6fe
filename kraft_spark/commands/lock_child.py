"""The command ``kraft-spark lock NAME -- COMMAND`` runs, and what becomes of it when the lock
is lost (``kraft_spark.client.session``: no keep-alive acknowledged for the TTL by this
process's clock, or the quorum expired the lease).

``--on-lost stop`` (the default): the command must not go on believing it holds the lock,
so its **process group** gets ``--signal`` (TERM) and, if it is still running ``--grace-s``
later, SIGKILL; a process group so that what it started goes too (``sh -c`` and its
children). ``signal``: the group gets the signal once and the command decides (it may wind
down, or check its fencing token). ``keep``: the command keeps running, as before this option
existed; only a line on stderr says its token is stale. Whatever the choice, the loss is
written to stderr when it happens, and the exit status is never 0 after a loss unless
``keep`` (the command's, or 1 if that was 0).

The command runs in a process group of its own, so the terminal's Ctrl-C no longer reaches it
directly: SIGINT, SIGTERM and SIGHUP sent to ``kraft-spark lock`` are passed on to its group,
and the lock is released once it exits. (A command that reads the terminal is in a background
group and is stopped by it: ``kraft-spark lock`` is for batch work, as ``etcdctl lock`` is.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from kraft_spark.client.concurrency import Held

__all__ = ["ON_LOST", "LockedCommand", "signal_arg"]

ON_LOST: Final = ("stop", "signal", "keep")
FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def signal_arg(text: str) -> signal.Signals:
    """``TERM``, ``SIGTERM`` or ``15`` → the signal."""
    name = text.upper()
    try:
        return signal.Signals(int(name)) if name.isdigit() else signal.Signals[
            name if name.startswith("SIG") else f"SIG{name}"]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"no such signal: {text}") from None


def exit_status(returncode: int) -> int:
    """A child's return code as a shell reports it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


class LockedCommand:
    def __init__(self, argv: list[str], env: dict[str, str], *, on_lost: str = "stop",
                 signum: signal.Signals = signal.SIGTERM, grace_s: float = 10.0) -> None:
        self.argv, self.env = argv, env
        self.on_lost, self.signum, self.grace_s = on_lost, signum, grace_s

    def _signal_group(self, pid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            os.killpg(pid, signum)

    async def run(self, held: Held) -> int:
        proc = await asyncio.create_subprocess_exec(*self.argv, env=self.env, process_group=0)
        loop = asyncio.get_running_loop()
        for signum in FORWARDED:
            loop.add_signal_handler(signum, self._signal_group, proc.pid, signum)
        try:
            lost = asyncio.ensure_future(held.lost.wait())
            done = asyncio.ensure_future(proc.wait())
            await asyncio.wait({lost, done}, return_when=asyncio.FIRST_COMPLETED)
            lost.cancel()
            if held.lost.is_set() and not done.done():
                await self._lost(held, proc.pid, done)
            code = exit_status(await done)
        finally:
            for signum in FORWARDED:
                loop.remove_signal_handler(signum)
        if held.lost.is_set() and self.on_lost != "keep":
            return code or 1
        return code

    async def _lost(self, held: Held, pid: int, done: asyncio.Future[int]) -> None:
        what = {"stop": f"stopping the command ({self.signum.name} to its process group, "
                        f"SIGKILL after {self.grace_s:g} s)",
                "signal": f"sent {self.signum.name} to the command's process group",
                "keep": "the command keeps running"}[self.on_lost]
        print(f"kraft-spark lock: lost the lock {held.key}: {held.reason}; its fencing token "
              f"{held.token} is stale: {what}", file=sys.stderr, flush=True)
        if self.on_lost == "keep":
            return
        self._signal_group(pid, self.signum)
        if self.on_lost == "signal":
            return
        try:
            await asyncio.wait_for(asyncio.shield(done), self.grace_s)
        except TimeoutError:
            self._signal_group(pid, signal.SIGKILL)
