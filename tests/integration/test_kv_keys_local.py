"""Keys of any text round-trip through ``KvClient``, ``AsyncKvClient``, ``kraft-spark kv`` and
the HTTP API of a real `kraft-spark local`: ``/``, ``?``, ``#``, ``%``, spaces, ``+``, ``&``,
dot segments and non-ASCII characters included (a key is the rest of ``GET /v1/kv/{key}``'s
path, percent-decoded by the server; ``kraft_spark.client.endpoints.key_path``)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kraft_spark.cli import main
from kraft_spark.client.kv import AsyncKvClient, KvClient
from tests.lincheck.nemesis import KvQuorum

from .harness import running, store_ready

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# Any text a key may be: no NUL (refused by the store's text keys), no lone surrogates (not
# encodable as UTF-8, so never sent by a client).
KEYS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
               min_size=1, max_size=24)
# Through real processes too (argv): one of each kind, as the property test covers the rest.
NASTY = ["a/b", "a?b=c&d=e", "#frag", "100%", "a b+c", "..", "é/日本語 🎉", "-starts-with-dash"]


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvQuorum]:
    quorum = KvQuorum(tmp_path_factory.mktemp("keys") / "data")
    with running(quorum):
        store_ready(quorum)
        yield quorum


def cli(quorum: KvQuorum, *args: str) -> tuple[int, str]:
    """``kraft-spark kv ...`` in this process (its parsing and its client), with the key
    after ``--`` as a shell user would pass one that starts with ``-``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["kv", *args])
    return code, out.getvalue()


# 25 drawn keys besides the explicit ones: each costs about 0.5 s of real processes' work (a
# put, reads, a watch, both clients and three CLI calls), and the suite's budget is 10 min;
# hypothesis draws new keys on every run (its database keeps the failures it found).
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=KEYS)
@example(key="a?b=c&d=e")
@example(key="#frag")
@example(key="100%")
@example(key="..")
def test_any_key_round_trips_through_the_clients_and_the_cli(quorum: KvQuorum, key: str
                                                             ) -> None:
    value = {"key": key}
    with KvClient(quorum.http_urls, token=quorum.token, timeout_s=10) as kv:
        written = kv.put(key, value)
        got = kv.get(key)
        assert got is not None and (got.key, got.value) == (key, value)
        assert key in [x.key for x in kv.range(key)]  # a prefix as a query parameter
        event = next(iter(kv.watch(key=key, from_offset=written.base_offset)))
        assert (event.type, event.key, event.value) == ("put", key, value)

        async def async_side() -> None:
            async with AsyncKvClient(quorum.http_urls, token=quorum.token) as akv:
                got = await akv.get(key, consistency="serializable")
                assert got is None or got.key == key  # a follower may not have it yet
                got = await akv.get(key)
                assert got is not None and got.value == value
                await akv.put(key, [1])
                assert key in [x.key for x in await akv.range(key)]

        asyncio.run(async_side())

        endpoint = ["--endpoint", quorum.http_urls[0], "--token", quorum.token or ""]
        code, out = cli(quorum, "get", *endpoint, "-w", "json", "--", key)
        assert code == 0 and json.loads(out)["key"] == key and json.loads(out)["value"] == [1]
        assert cli(quorum, "put", *endpoint, "--", key, '"cli"')[0] == 0
        assert kv.get(key).value == "cli"  # type: ignore[union-attr]
        assert cli(quorum, "delete", *endpoint, "--", key)[0] == 0
        assert kv.get(key) is None


def test_nasty_keys_through_the_command_line_process(quorum: KvQuorum) -> None:
    """The same through real `kraft-spark kv` processes: the keys pass through argv."""
    env = {**os.environ, "KRAFT_SPARK_HTTP": ",".join(quorum.http_urls),
           "KRAFT_SPARK_HTTP_TOKEN": quorum.token or ""}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "kraft_spark", "kv", *args], env=env,
                              check=False,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    for key in NASTY:
        run("put", "--", f"nasty/{key}", json.dumps(key))
    listed = [json.loads(line) for line in run("get", "-w", "json", "--prefix", "--",
                                                "nasty/").splitlines()]
    assert sorted((x["key"], x["value"]) for x in listed) == sorted(
        (f"nasty/{k}", k) for k in NASTY)
    assert json.loads(run("get", "-w", "json", "--", "nasty/a?b=c&d=e"))["value"] == "a?b=c&d=e"
