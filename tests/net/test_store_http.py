"""The store API on real nodes' HTTP APIs (in-process quorum on loopback): reads by key and by
prefix from any node, linearizable by default; conditional writes (200 / 409) judged by the
state machine; a deposed leader refusing linearizable reads; watches over SSE."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.net.node import RaftNode

from .helpers import STEADY, alone_as_leader, the_leader
from .test_node_http import http, http_nodes, run_nodes, url_of

pytestmark = pytest.mark.timeout(120)


async def put(node: RaftNode, key: str, value: Any, conditions: list[Any] | None = None
              ) -> tuple[int, Any]:
    body: dict[str, Any] = {"records": [{"key": key, "value": value}]}
    if conditions is not None:
        body["conditions"] = conditions
    return await http(url_of(node), "POST", "/v1/records", body)


async def put_expecting(status: int, node: RaftNode, key: str, value: Any,
                        conditions: list[Any] | None = None) -> Any:
    """``put`` that must get ``status``; a failure shows the answer (a 504's names its timeout)
    and what the node reports of itself (role, epoch, leader, high watermark) by then."""
    got, answer = await put(node, key, value, conditions)
    assert got == status, (got, answer, node.describe())
    return answer


def test_reads_conditional_writes_and_revisions_on_every_node(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        status, first = await put(follower, "cfg/a", {"n": 1})
        assert status == 200, first
        for node in nodes:  # linearizable: every node sees the acknowledged write at once
            status, got = await http(url_of(node), "GET", "/v1/kv/cfg/a")
            assert status == 200, got
            assert got["value"] == {"n": 1}
            assert (got["create_offset"], got["mod_offset"], got["version"]) == (
                first["base_offset"], first["base_offset"], 1)
            assert got["offset"] > first["base_offset"]
        # compare-and-set on version: the first wins, the second (same version) gets 409
        status, won = await put(follower, "cfg/a", {"n": 2}, [{"key": "cfg/a", "version": 1}])
        assert status == 200, won
        status, lost = await put(leader, "cfg/a", {"n": 3}, [{"key": "cfg/a", "version": 1}])
        assert status == 409, lost
        assert lost["failed"] == [{"key": "cfg/a", "mod_offset": won["base_offset"],
                                   "version": 2}]
        # all or nothing: a create guarded by absence fails as a whole with the other key
        status, both = await put(leader, "cfg/b", 1, [{"key": "cfg/b", "exists": False},
                                                      {"key": "cfg/a", "mod_offset": 0}])
        assert status == 409, both
        assert [f["key"] for f in both["failed"]] == ["cfg/a"]
        status, missing = await http(url_of(follower), "GET", "/v1/kv/cfg/b")
        assert status == 404 and missing["offset"] > both["base_offset"], missing
        status, created = await put(follower, "cfg/b", 1, [{"key": "cfg/b", "exists": False}])
        assert status == 200, created
        for node in nodes:
            # A serializable read answers from the node's own state, which may not have
            # applied the write yet: only the node that took a conditional write waits for its
            # own apply before answering (CI run 204 listed only cfg/a on another node). It
            # converges.
            deadline = time.monotonic() + 5
            while True:
                status, page = await http(url_of(node), "GET",
                                          "/v1/kv?prefix=cfg/&limit=1&consistency=serializable")
                assert status == 200, page
                keys = [kv["key"] for kv in page["kvs"]]
                token = page["next_page_token"]
                while token:
                    status, page = await http(url_of(node), "GET",
                                              f"/v1/kv?prefix=cfg/&limit=1&page_token={token}")
                    keys += [kv["key"] for kv in page["kvs"]]
                    token = page["next_page_token"]
                if keys == ["cfg/a", "cfg/b"] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert keys == ["cfg/a", "cfg/b"], (node.node_id, keys)
        status, value = await http(url_of(leader), "GET", "/v1/kv/cfg/a")
        assert value["value"] == {"n": 2} and value["version"] == 2
        # Bad input: a clear 422, nothing written
        status, bad = await http(url_of(leader), "POST", "/v1/records", {
            "records": [{"key": "x", "value": 1}], "conditions": [{"key": "x"}]})
        assert status == 422 and "exactly one" in bad["error"], bad
        status, bad = await http(url_of(leader), "GET", "/v1/kv/x?consistency=eventual")
        assert status == 422, bad

    asyncio.run(run_nodes(http_nodes(tmp_path, quorum=STEADY), body))


def test_a_leader_cut_off_from_the_quorum_answers_no_linearizable_read(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        await put_expecting(200, leader, "k", 1)
        await alone_as_leader(nodes)  # the others are gone: it cannot prove it still leads
        status, answer = await http(url_of(leader), "GET", "/v1/kv/k")
        assert status in (503, 504), answer
        status, stale = await http(url_of(leader), "GET", "/v1/kv/k?consistency=serializable")
        assert status == 200 and stale["value"] == 1, stale

    asyncio.run(run_nodes(http_nodes(tmp_path, quorum=STEADY), body))


async def sse_events(url: str, path: str, count: int, timeout_s: float = 20.0
                     ) -> list[dict[str, Any]]:
    """The first ``count`` non-progress events of an SSE stream (then the connection closes)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    events: list[dict[str, Any]] = []
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        assert b" 200 " in head.split(b"\r\n")[0], head
        chunked = b"chunked" in head.lower()
        buffer = b""
        while len(events) < count:
            line = await asyncio.wait_for(reader.readline(), timeout_s)
            if chunked and line.strip() and all(c in b"0123456789abcdefABCDEF\r\n" for c in line):
                continue  # a chunk size line
            buffer += line
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                fields = dict(x.split(": ", 1) for x in block.decode().splitlines() if ": " in x)
                if fields.get("event") in ("put", "delete"):
                    events.append({"id": int(fields["id"]), **json.loads(fields["data"])})
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return events


def test_watch_streams_effective_writes_and_resumes(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        status, first = await put(leader, "w/a", 1)
        assert status == 200
        await put_expecting(409, leader, "w/a", 2, [{"key": "w/a", "version": 9}])
        await put_expecting(200, leader, "other", 0)
        live = asyncio.ensure_future(sse_events(url_of(follower), "/v1/watch?prefix=w/", 2))
        await asyncio.sleep(0.3)
        status, second = await put(follower, "w/b", "x")
        status, third = await http(url_of(leader), "POST", "/v1/records",
                                   {"key": "w/a", "value": None})
        got = await live
        assert [(e["key"], e["type"], e["id"]) for e in got] == [
            ("w/b", "put", second["base_offset"]), ("w/a", "delete", third["base_offset"])]
        # From an offset: the history (the failed conditional write is not in it), resumable
        past = await sse_events(url_of(follower), "/v1/watch?key=w/a&from_offset=0", 2)
        assert [(e["id"], e["value"]) for e in past] == [
            (first["base_offset"], 1), (third["base_offset"], None)]

    asyncio.run(run_nodes(http_nodes(tmp_path, quorum=STEADY), body))


def test_openapi_documents_the_store_routes(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        status, schema = await http(url_of(nodes[0]), "GET", "/openapi.json")
        assert status == 200
        paths = schema["paths"]
        assert {"/v1/kv/{key}", "/v1/kv", "/v1/watch"} <= set(paths)
        assert "409" in paths["/v1/records"]["post"]["responses"]
        assert "ConditionalBatchIn" in json.dumps(paths["/v1/records"]["post"]["requestBody"])
        assert {"404", "503", "504"} <= set(paths["/v1/kv/{key}"]["get"]["responses"])

    asyncio.run(run_nodes(http_nodes(tmp_path, quorum=STEADY), body))


def test_an_idempotent_retry_of_a_conditional_write_returns_its_first_outcome(
        tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        await put_expecting(200, leader, "r", 1)
        request = {"records": [{"key": "r", "value": 2}],
                   "conditions": [{"key": "r", "version": 5}]}
        key = {"Idempotency-Key": "retry-1"}
        status, first = await http(url_of(leader), "POST", "/v1/records", request, headers=key)
        assert status == 409, first
        await put_expecting(200, leader, "r", 3)  # the key moves on meanwhile
        for node in (leader, follower):  # the retry, through any node: the same answer
            status, again = await http(url_of(node), "POST", "/v1/records", request,
                                       headers=key)
            assert status == 409, again
            assert again["base_offset"] == first["base_offset"]
            assert again["failed"] == first["failed"]

    asyncio.run(run_nodes(http_nodes(tmp_path, quorum=STEADY), body))
