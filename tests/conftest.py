"""``--event-loop=uvloop``: run the suite's ``asyncio.run`` calls on uvloop, the loop of every
kraft-spark process (``kraft_spark.aio``), instead of asyncio's own. In-process tests otherwise
run on asyncio's loop, where transports behave a little differently (uvloop's transports do
not subclass ``asyncio.Transport``: a check that held on asyncio's loop once broke every
connection of the real processes). ``make test`` runs the network and API tests both ways."""

from __future__ import annotations

import asyncio

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                     help="the event loop asyncio.run uses in these tests")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--event-loop") == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
