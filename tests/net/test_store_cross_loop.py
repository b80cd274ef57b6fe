"""The Spark application's endpoint, without Spark: a sidecar on its own thread and loop whose
store is an observer's on another loop (driver/observer_store.py, kraft_spark.store.cross_loop),
as the driver runs them. Reads, conditional writes and watches through it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from driver.observer_store import ObserverStore
from kraft_spark.aio import stop_thread_loop
from kraft_spark.client.kv import ConditionFailedError, KvClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.commands.sidecar import start_sidecar
from kraft_spark.log.meta import format_log_dir
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.node import RaftNode

from .helpers import CLUSTER, FAST, leader_of, make_nodes, wait_for

pytestmark = pytest.mark.timeout(120)
OBSERVER_ID = 100


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="observer-loop", daemon=True)
    thread.start()
    voters = make_nodes(tmp_path, 3)
    endpoints = dict(voters[0].config.voters)
    log_dir = str(tmp_path / "observer")
    format_log_dir(log_dir, cluster_id=CLUSTER, node_id=OBSERVER_ID, ignore_formatted=True)
    observer = RaftNode(NodeConfig(OBSERVER_ID, log_dir, "127.0.0.1", 0, endpoints, FAST))
    store = ObserverStore(loop, lambda: CLUSTER, ClientSecurity)
    nodes = [*voters, observer]

    async def start() -> None:
        for node in nodes:
            await node.start()
        await wait_for(lambda: leader_of(voters) is not None, 10, "a leader")
        await store.attach(observer, endpoints)

    async def stop() -> None:
        await store.detach()
        for node in nodes:
            await node.stop(graceful=False)

    asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    sidecar = start_sidecar([f"127.0.0.1:{p}" for _, p in endpoints.values()], "127.0.0.1", 0,
                            cluster_id=CLUSTER, store=store.loop_store)
    try:
        yield f"http://127.0.0.1:{sidecar.port}"
    finally:
        sidecar.stop()
        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        stop_thread_loop(loop, thread, 10)


def test_the_application_endpoint_serves_the_store_from_its_observer(endpoint: str) -> None:
    with KvClient(endpoint) as kv:
        first = kv.put("app/a", {"n": 1}, if_absent=True)
        got = kv.get("app/a")  # linearizable: the observer asks the leader, waits to apply
        assert got is not None and got.value == {"n": 1} and got.mod_offset == first.base_offset
        kv.put("app/a", 2, if_version=1)
        with pytest.raises(ConditionFailedError) as failed:
            kv.put("app/a", 3, if_version=1)
        assert failed.value.failed == [{"key": "app/a", "mod_offset": first.base_offset + 1,
                                        "version": 2}]
        stale_ok = kv.get("app/a", consistency="serializable")
        assert stale_ok is not None and stale_ok.offset <= kv.get("app/a").offset  # type: ignore[union-attr]
        assert [x.key for x in kv.range("app/")] == ["app/a"]
        kv.delete("app/a")
        # a past revision through the application's endpoint (LoopStore.range_at)
        past = httpx.get(f"{endpoint}/v1/range", params={
            "key": "app/", "prefix": "true", "revision": first.base_offset}).json()
        assert [(x["key"], x["value"]) for x in past["kvs"]] == [("app/a", {"n": 1})]
        assert past["revision"] == first.base_offset
        events = []
        for event in kv.watch(prefix="app/", from_offset=0):
            if event.type in ("put", "delete"):
                events.append((event.type, event.value))
            if len(events) == 3:
                break
        assert events == [("put", {"n": 1}), ("put", 2), ("delete", None)]
