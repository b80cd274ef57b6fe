"""Where a leaked asyncio transport came from. A transport left open is reported by the garbage
collector whenever it next runs, in some later and innocent test; the report names only its file
descriptor. Each transport (asyncio's selector loop: uvloop's are compiled and keep their own
repr) notes the test that was running and the code that made it, and its repr says so with its
protocol's class, which is what the ResourceWarning prints. A few microseconds per connection,
in tests only."""

from __future__ import annotations

import os
import traceback
from asyncio import selector_events
from typing import Any

_Transport: Any = selector_events._SelectorTransport
_FRAMES = 6


def install() -> None:
    if getattr(_Transport, "_kraft_origin_installed", False):
        return
    init, describe = _Transport.__init__, _Transport.__repr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "no test").rsplit(" ", 1)[0]
        frames = traceback.extract_stack(limit=_FRAMES + 3)[:-3]
        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                            for f in reversed(frames))
        self._kraft_origin = f"made during {test}: {where}"
        init(self, *args, **kwargs)

    def __repr__(self: Any) -> str:
        protocol = type(getattr(self, "_protocol", None))
        return (f"{describe(self)[:-1]} protocol={protocol.__module__}.{protocol.__qualname__} "
                f"{getattr(self, '_kraft_origin', '')}>")

    _Transport.__init__ = __init__
    _Transport.__repr__ = __repr__
    _Transport._kraft_origin_installed = True
