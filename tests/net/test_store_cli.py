"""``kraft-spark kv`` (a real child process) against real nodes' HTTP APIs, and the Python
``AsyncKvClient`` (its watch as an async iterator)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from kraft_spark.client.kv import AsyncKvClient, ConditionFailedError
from kraft_spark.net.node import RaftNode

from .helpers import the_leader
from .test_node_http import http_nodes, run_nodes, url_of

pytestmark = pytest.mark.timeout(120)


async def kv(url: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kraft_spark", "kv", *args, "--endpoint", url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def test_kv_command_line(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        follower = next(n for n in nodes if n is not the_leader(nodes))
        url = url_of(follower)
        assert await kv(url, "put", "cfg/a", '{"n": 1}') == (0, "OK (offset 1, epoch 1)\n", "")
        code, out, _ = await kv(url, "get", "cfg/a", "-w", "json")
        assert code == 0
        got = json.loads(out)
        assert (got["value"], got["version"], got["mod_offset"]) == ({"n": 1}, 1, 1)
        assert (await kv(url, "put", "cfg/a", "two", "--if-version", "1"))[0] == 0
        code, _, err = await kv(url, "put", "cfg/a", "3", "--if-version", "1")
        assert code == 1 and "conditions failed" in err and "version 2" in err, err
        code, _, err = await kv(url, "txn", stdin=json.dumps({
            "conditions": [{"key": "cfg/b", "exists": False}],
            "records": [{"key": "cfg/b", "value": [1]}, {"key": "cfg/c", "value": None}]}))
        assert code == 0, err
        code, out, _ = await kv(url, "get", "cfg/", "--prefix", "--print-value-only")
        assert out == "two\n[1]\n"
        assert await kv(url, "get", "missing") == (0, "", "")
        code, _, err = await kv(url, "watch", "", "--from-offset", "0")
        assert code == 1 and "HTTP 422" in err, err
        code, _, err = await kv("http://127.0.0.1:9", "get", "x")
        assert code == 1 and "cannot reach" in err, err

        async with AsyncKvClient(url) as client:
            seen = []
            async for event in client.watch(prefix="cfg/", from_offset=0):
                if event.type in ("put", "delete"):
                    seen.append((event.key, event.value))
                if len(seen) == 3:
                    break
            assert seen == [("cfg/a", {"n": 1}), ("cfg/a", "two"), ("cfg/b", [1])]
            current = await client.get("cfg/a")
            assert current is not None and current.version == 2
            with pytest.raises(ConditionFailedError) as failed:
                await client.put("cfg/a", 9, if_mod_offset=current.mod_offset - 1)
            assert failed.value.failed[0]["key"] == "cfg/a"

    asyncio.run(run_nodes(http_nodes(tmp_path), body))
