"""Leases, locks and fencing on real nodes (in-process quorum on loopback, HTTP API on every
node), and `kraft-spark lock` as a real child process frozen past its TTL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from api.node_http import serve_node_http
from kraft_spark.client.concurrency import Election, Lock
from kraft_spark.client.kv import AsyncKvClient, ConditionFailedError, KvError
from kraft_spark.http_auth import Credential, Credentials, Scope
from kraft_spark.net.node import RaftNode
from kraft_spark.store.lease_expiry import LeaseExpirer

from .helpers import STEADY, the_leader, wait_for
from .test_node_http import http, http_nodes, url_of
from .test_node_http import run_nodes as run_plain_nodes
from .test_node_snapshots import SMALL, append_many


async def run_nodes(nodes: list[RaftNode], body: Any) -> None:
    """``run_nodes`` with every node's lease expirer running, as `kraft-spark node` runs it."""
    async def with_expirers(started: list[RaftNode]) -> None:
        expirers = [LeaseExpirer(n).start() for n in started]
        try:
            await body(started)
        finally:
            for expirer in expirers:
                expirer.stop()

    await run_plain_nodes(nodes, with_expirers)

pytestmark = pytest.mark.timeout(120)


def test_a_lease_keeps_its_keys_while_kept_alive_and_takes_them_when_it_expires(
        tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        async with AsyncKvClient(url_of(follower)) as kv:
            lease = await kv.grant_lease(1000)
            await kv.put("svc/a", "up", lease_id=lease.lease_id)
            await kv.put("svc/plain", "stays")
            before = leader.log.end_offset()
            for _ in range(6):  # 1.8 s of keep-alives, through a follower: longer than the TTL
                await asyncio.sleep(0.3)
                await kv.keep_alive(lease.lease_id)
            got = await kv.get("svc/a")
            assert got is not None and got.value == "up"
            # Answered by the leader's countdown: no keep-alive record; the leader writes a
            # checkpoint only if one came later than half the TTL (then one clears it).
            desks = [n.lease_desk for n in nodes]  # the leader's, or its successor's
            assert sum(d.renewals for d in desks) >= 6
            ops = [json.loads(value) for batch in leader.log.read(before, 1 << 20)
                   for record in batch.records for name, value in record.headers
                   if name == "kraft.lease.op"]
            assert all(op["op"] == "checkpoint" for op in ops), ops
            assert len(ops) <= 2 * sum(d.clears for d in desks) + 1, ops
            # Its time left, from the leader's countdown (asked through the follower).
            await kv.keep_alive(lease.lease_id)
            status, alive = await http(url_of(follower), "GET", f"/v1/leases/{lease.lease_id}")
            assert status == 200 and alive["keys"] == ["svc/a"], alive
            assert 0 <= alive["remaining_ms"] <= alive["ttl_ms"] == 1000
            status, listed = await http(url_of(leader), "GET", "/v1/leases")
            assert [x["keys"] for x in listed["leases"]] == [["svc/a"]], listed
            await asyncio.sleep(1.6)  # no keep-alive past the TTL: the leader expires it
            assert await kv.get("svc/a") is None
            assert await kv.get("svc/plain") is not None
            with pytest.raises(KvError) as gone:
                await kv.keep_alive(lease.lease_id)
            assert gone.value.status == 404
            with pytest.raises(KvError) as refused:
                await kv.put("svc/b", "late", lease_id=lease.lease_id)
            assert refused.value.status == 404 and "not found" in str(refused.value)
            revoked = await kv.grant_lease(60_000)
            await kv.put("svc/c", 1, lease_id=revoked.lease_id)
            await kv.revoke_lease(revoked.lease_id)
            assert await kv.get("svc/c") is None
            status, bad = await http(url_of(leader), "POST", "/v1/leases", {"ttl_ms": 1})
            assert status == 422, bad

    asyncio.run(run_nodes(http_nodes(tmp_path), body))


def test_a_lease_kept_alive_survives_a_leader_change(tmp_path: Path) -> None:
    """The new leader restarts every countdown: the holder's lease does not expire early."""
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        others = [n for n in nodes if n is not leader]
        async with AsyncKvClient(url_of(others[0])) as kv:
            lease = await kv.grant_lease(3000)
            await kv.put("held", 1, lease_id=lease.lease_id)
            await kv.keep_alive(lease.lease_id)
            await leader.stop(graceful=True)  # hands over to another voter
            await wait_for(lambda: any(n.is_leader for n in others), 10, "a new leader")
            await asyncio.sleep(1.5)
            await kv.keep_alive(lease.lease_id)
            await asyncio.sleep(1.5)
            assert await kv.get("held") is not None

    asyncio.run(run_nodes(http_nodes(tmp_path), body))


def test_lock_queue_is_fair_and_tokens_grow_and_election(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        async with AsyncKvClient(url_of(nodes[0])) as a, AsyncKvClient(url_of(nodes[1])) as b:
            first = Lock(a, "jobs", ttl_ms=3000)
            held = await first.acquire()
            second = asyncio.ensure_future(Lock(b, "jobs", ttl_ms=3000).acquire())
            await asyncio.sleep(0.5)
            assert not second.done()  # queued behind the holder
            await first.release()
            taken = await asyncio.wait_for(second, 10)
            assert taken.token > held.token
            await b.txn([("resource", "ok")], [taken.fence()])  # the holder's write applies
            with pytest.raises(ConditionFailedError):  # the released holder's does not
                await a.txn([("resource", "stale")], [held.fence()])

            election = Election(a, "svc/leader", ttl_ms=3000)
            await election.campaign("node-a")
            leader = await Election(b, "svc/leader").leader()
            assert leader is not None and leader.value == "node-a"
            await election.resign()
            assert await Election(b, "svc/leader").leader() is None

    asyncio.run(run_nodes(http_nodes(tmp_path), body))


def test_observe_starts_and_goes_on_above_a_log_start_that_moved(tmp_path: Path) -> None:
    """The log was trimmed after a snapshot (its start is far above 0) before anyone
    campaigned: an observer that starts with no leader must not watch from offset 0 (410),
    and must see every leader after."""
    nodes = [RaftNode(replace(n.config, snapshots=SMALL), http=serve_node_http)
             for n in http_nodes(tmp_path)]

    async def body(nodes: list[RaftNode]) -> None:
        await append_many(the_leader(nodes), 3000)
        await wait_for(lambda: all(n.log.start_offset() > 0 for n in nodes), 20,
                       "retention on every node")
        async with AsyncKvClient([url_of(n) for n in nodes]) as a, \
                AsyncKvClient(url_of(nodes[1])) as b:
            changes = Election(a, "svc/leader").observe()
            assert await asyncio.wait_for(anext(changes), 10) is None
            following = asyncio.ensure_future(anext(changes))
            election = Election(b, "svc/leader", ttl_ms=3000)
            await election.campaign("node-b")
            leader = await asyncio.wait_for(following, 10)
            assert leader is not None and leader.value == "node-b"
            await election.resign()
            assert await asyncio.wait_for(anext(changes), 10) is None
            await changes.aclose()

    asyncio.run(run_nodes(nodes, body))


HOLDER = textwrap.dedent("""
    import os, sys, time, pathlib
    from kraft_spark.client.kv import KvClient, ConditionFailedError
    work = pathlib.Path(sys.argv[1])
    (work / "ready").write_text(os.environ["KRAFT_SPARK_LOCK_TOKEN"])
    while not (work / "go").exists():
        time.sleep(0.05)
    fence = {"key": os.environ["KRAFT_SPARK_LOCK_KEY"],
             "mod_offset": int(os.environ["KRAFT_SPARK_LOCK_TOKEN"])}
    with KvClient(sys.argv[2]) as kv:
        try:
            kv.txn([("resource", "old holder")], [fence])
            (work / "outcome").write_text("written")
        except ConditionFailedError:
            (work / "outcome").write_text("refused")
""")


def test_a_frozen_lock_holder_is_taken_over_and_its_stale_writes_refused(
        tmp_path: Path) -> None:
    async def until(path: Path, timeout_s: float) -> str:
        for _ in range(int(timeout_s / 0.05)):
            if path.exists() and path.read_text():
                return path.read_text()
            await asyncio.sleep(0.05)
        raise AssertionError(f"{path} never appeared")

    async def body(nodes: list[RaftNode]) -> None:
        url = url_of(nodes[1])
        work = tmp_path / "holder"
        work.mkdir()
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kraft_spark", "lock", "jobs", "--ttl-ms", "1500",
            "--on-lost", "keep",  # the stale holder goes on: its fenced write must be refused
            "--endpoint", url, "--", sys.executable, "-c", HOLDER, str(work), url,
            start_new_session=True)
        try:
            old_token = int(await until(work / "ready", 30))
            os.killpg(holder.pid, signal.SIGSTOP)  # frozen: no keep-alives, nothing written
            async with AsyncKvClient(url_of(nodes[2])) as kv:
                lock = Lock(kv, "jobs", ttl_ms=3000)
                held = await asyncio.wait_for(lock.acquire(), 15)  # after the lease expired
                assert held.token > old_token
                await kv.txn([("resource", "new holder")], [held.fence()])
                os.killpg(holder.pid, signal.SIGCONT)
                (work / "go").write_text("go")
                assert await until(work / "outcome", 30) == "refused"
                got = await kv.get("resource")
                assert got is not None and got.value == "new holder"
                await lock.release()
            assert await asyncio.wait_for(holder.wait(), 30) == 0
        finally:
            if holder.returncode is None:
                os.killpg(holder.pid, signal.SIGCONT)
                os.killpg(holder.pid, signal.SIGKILL)
                await holder.wait()

    asyncio.run(run_nodes(http_nodes(tmp_path), body))



def test_a_lease_is_kept_alive_and_revoked_by_its_owner_or_an_admin(tmp_path: Path) -> None:
    """Two writers and an administrator (etcd's users, Kafka's principals): bob can neither
    keep alive nor revoke alice's lease, nor slip a lease operation into a raw append; the
    administrator can revoke it. Every refusal changes nothing."""
    tokens = {"alice": "alice-token", "bob": "bob-token", "root": "root-token"}
    credentials = Credentials([Credential(Scope.WRITE, tokens["alice"], "alice"),
                               Credential(Scope.WRITE, tokens["bob"], "bob"),
                               Credential(Scope.ADMIN, tokens["root"], "root")])
    nodes = [RaftNode(replace(n.config, http_credentials=credentials), http=serve_node_http)
             for n in http_nodes(tmp_path, quorum=STEADY)]

    def as_(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[name]}"}

    async def body(nodes: list[RaftNode]) -> None:
        url = url_of(the_leader(nodes))
        status, granted = await http(url, "POST", "/v1/leases", {"ttl_ms": 60_000},
                                     headers=as_("alice"))
        assert status == 200, granted
        lease = granted["lease_id"]
        status, put = await http(url, "POST", "/v1/records", {"key": "lock/a", "value": "alice",
                                                               "lease_id": lease},
                                 headers=as_("alice"))
        assert status == 200, put
        for method, path in (("POST", f"/v1/leases/{lease}/keepalive"),
                             ("DELETE", f"/v1/leases/{lease}")):
            status, refused = await http(url, method, path, headers=as_("bob"))
            assert status == 403, refused
            assert "belongs to the credential 'alice'" in refused["error"], refused
        op = json.dumps({"op": "revoke", "id": lease})
        status, refused = await http(url, "POST", "/v1/records",
                                     {"key": "x", "value": 1, "headers": {"kraft.lease.op": op}},
                                     headers=as_("bob"))
        assert status == 422 and "kraft.lease.op is reserved" in refused["error"], refused
        status, listed = await http(url, "GET", "/v1/leases", headers=as_("bob"))
        assert [(x["lease_id"], x["owner"], x["keys"]) for x in listed["leases"]] == [
            (lease, "alice", ["lock/a"])], listed
        status, kept = await http(url, "POST", f"/v1/leases/{lease}/keepalive",
                                  headers=as_("alice"))
        assert status == 200, kept
        status, revoked = await http(url, "DELETE", f"/v1/leases/{lease}", headers=as_("root"))
        assert status == 200, revoked
        status, gone = await http(url, "GET", "/v1/kv/lock/a", headers=as_("bob"))
        assert status == 404, gone

    asyncio.run(run_nodes(nodes, body))
