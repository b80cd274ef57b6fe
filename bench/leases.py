"""``kraft-spark bench leases``: leases and locks against etcd's, on this machine, in one run.

Both systems run as three local members on loopback with fsync on: ``kraft-spark local`` with
every node's HTTP API, and etcd 3.4 (Debian's package) with its JSON gRPC gateway.

* **Keep-alive load**: 10,000 leases (TTL 10 s) granted by 1,000 clients, then each client keeps
  its 10 leases alive for 20 s: each lease's next keep-alive is due TTL/3 after the answer to
  its last one, as etcd's Go client schedules them. A client is one asyncio task with one
  keep-alive HTTP/1.1 connection (:mod:`bench.raw_http`), the clients spread round-robin over
  the three members, so the followers forward to the leader as they do for real clients. The
  same code drives both: kraft-spark ``POST /v1/leases/{id}/keepalive``, etcd ``POST
  /v3/lease/keepalive`` through its gateway (etcd's own clients keep leases alive on one gRPC
  stream per client; the gateway opens a stream per request, which costs etcd something that
  its native clients do not pay). Measured: keep-alives/s, latency p50/p99, keep-alives that
  found their lease gone, the leases missing when the window ends (must be 0), and the CPU
  seconds of the leader, of every member and of this load generator over the window. The
  leases are then revoked, so that their expiry does not load the next system's window.
* **Locks under contention** (:mod:`bench.locks`): 1, 8 and 32 contenders acquiring and
  releasing one lock, with each system's command line and with in-process clients.

kraft-spark's clients send the tokens of the credentials file ``kraft-spark local`` keeps
(``bench.credentials``): the keep-alive clients and the lock contenders a write token (leases
need write), the check that lists the leases a read token. etcd runs without authentication, as
packaged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Protocol

from bench.credentials import bearer
from bench.lease_stats import KeepAliveTally, keepalive_row, report
from bench.proc_cpu import CpuSample
from bench.raw_http import HttpConnection, HttpConnectionError
from bench.report import save_results

Log = Callable[[str], None]


class UnexpectedAnswer(Exception):
    """A status or body the lease API should not give."""


# --------------------------------------------------------------------------- the lease APIs


class LeaseSystem(Protocol):
    name: str

    def member_urls(self) -> list[str]: ...

    def leader_pid(self) -> int: ...

    def member_pids(self) -> list[int]: ...

    def leader_url(self) -> str: ...

    def connect(self, url: str, *, read_only: bool = False) -> HttpConnection:
        """A client connection to ``url`` with the credential its calls need."""
        ...

    async def grant(self, conn: HttpConnection, ttl_s: float) -> int: ...

    async def keep_alive(self, conn: HttpConnection, lease_id: int) -> bool: ...

    async def revoke(self, conn: HttpConnection, lease_id: int) -> None: ...

    async def lease_ids(self, conn: HttpConnection) -> set[int]: ...

    async def log_position(self, conn: HttpConnection) -> int:
        """Where the replicated log is now: it grows by one per entry replicated."""
        ...


def _json(status: int, body: bytes, what: str) -> Any:
    if status != 200:
        raise UnexpectedAnswer(f"{what}: {status} {body[:200]!r}")
    return json.loads(body)


class KraftLeases:
    """``kraft-spark local`` (``bench.store.KraftNodes``): ``/v1/leases``."""

    name = "kraft-spark"

    def __init__(self, nodes: Any) -> None:
        self.nodes = nodes  # bench.store.KraftNodes

    def member_urls(self) -> list[str]:
        return [self.nodes.urls[i] for i in sorted(self.nodes.urls)]

    def _leader(self) -> int:
        leader = self.nodes._leader_id()
        return int(leader if leader is not None else self.nodes.leader)

    def leader_pid(self) -> int:
        leader = self._leader()
        return int(next(n["pid"] for n in self.nodes.nodes if int(n["node_id"]) == leader))

    def member_pids(self) -> list[int]:
        return [int(n["pid"]) for n in self.nodes.nodes]

    def leader_url(self) -> str:
        return str(self.nodes.urls[self._leader()])

    def connect(self, url: str, *, read_only: bool = False) -> HttpConnection:
        tokens = self.nodes.tokens  # bench.credentials.Tokens
        return HttpConnection(url, bearer(tokens.read if read_only else tokens.write))

    async def grant(self, conn: HttpConnection, ttl_s: float) -> int:
        body = json.dumps({"ttl_ms": int(ttl_s * 1000)}).encode()
        return int(_json(*await conn.request("POST", "/v1/leases", body), "grant")["lease_id"])

    async def keep_alive(self, conn: HttpConnection, lease_id: int) -> bool:
        status, body = await conn.request("POST", f"/v1/leases/{lease_id}/keepalive")
        if status == 404:
            return False
        _json(status, body, "keep-alive")
        return True

    async def revoke(self, conn: HttpConnection, lease_id: int) -> None:
        status, body = await conn.request("DELETE", f"/v1/leases/{lease_id}")
        if status not in (200, 404):
            raise UnexpectedAnswer(f"revoke: {status} {body[:200]!r}")

    async def lease_ids(self, conn: HttpConnection) -> set[int]:
        listed = _json(*await conn.request("GET", "/v1/leases"), "list")
        return {int(x["lease_id"]) for x in listed["leases"]}

    async def log_position(self, conn: HttpConnection) -> int:
        # A linearizable read's offset: every committed record (offset) lies below it.
        return int(_json(*await conn.request("GET", "/v1/kv?prefix=bench-log-position/"),
                         "log position")["offset"])


class EtcdLeases:
    """etcd's lease service through its JSON gateway (``/v3/lease/*``)."""

    name = "etcd"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster  # bench.systems.EtcdCluster

    def member_urls(self) -> list[str]:
        return list(self.cluster.client_urls)

    def _leader(self) -> int:
        from bench.systems import wait_for

        return int(wait_for("etcd leader", self.cluster.leader_index))

    def leader_pid(self) -> int:
        return int(self.cluster.procs[self._leader()].pid)

    def member_pids(self) -> list[int]:
        return [int(p.pid) for p in self.cluster.procs]

    def leader_url(self) -> str:
        return str(self.cluster.client_urls[self._leader()])

    def connect(self, url: str, *, read_only: bool = False) -> HttpConnection:
        return HttpConnection(url)  # no authentication, as packaged

    async def grant(self, conn: HttpConnection, ttl_s: float) -> int:
        body = json.dumps({"TTL": round(ttl_s)}).encode()
        answer = _json(*await conn.request("POST", "/v3/lease/grant", body), "grant")
        if answer.get("error"):
            raise UnexpectedAnswer(f"grant: {answer}")
        return int(answer["ID"])

    async def keep_alive(self, conn: HttpConnection, lease_id: int) -> bool:
        body = json.dumps({"ID": lease_id}).encode()
        status, raw = await conn.request("POST", "/v3/lease/keepalive", body)
        # One streamed message per request: {"result": {..., "TTL": "10"}}; a lease that is
        # gone is answered with no TTL (zero), not with an error.
        answer = _json(status, raw.split(b"\n", 1)[0], "keep-alive")
        if "result" not in answer:
            raise UnexpectedAnswer(f"keep-alive: {answer}")
        return int(answer["result"].get("TTL", 0)) > 0

    async def revoke(self, conn: HttpConnection, lease_id: int) -> None:
        body = json.dumps({"ID": lease_id}).encode()
        status, raw = await conn.request("POST", "/v3/lease/revoke", body)
        if status not in (200, 404):  # a lease already gone is answered 404 by the gateway
            raise UnexpectedAnswer(f"revoke: {status} {raw[:200]!r}")

    async def lease_ids(self, conn: HttpConnection) -> set[int]:
        listed = _json(*await conn.request("POST", "/v3/lease/leases", b"{}"), "list")
        return {int(x["ID"]) for x in listed.get("leases", [])}

    async def log_position(self, conn: HttpConnection) -> int:
        # The raft index: every entry etcd replicated (its keep-alives are none).
        status = _json(*await conn.request("POST", "/v3/maintenance/status", b"{}"), "status")
        return int(status["raftIndex"])


# --------------------------------------------------------------------------- keep-alive point


async def _grant_all(system: LeaseSystem, conn: HttpConnection, count: int, ttl_s: float,
                     failures: list[str]) -> list[int]:
    ids: list[int] = []
    for _ in range(count):
        try:
            ids.append(await asyncio.wait_for(system.grant(conn, ttl_s), 30))
        except (HttpConnectionError, UnexpectedAnswer, TimeoutError, ValueError) as exc:
            failures.append(repr(exc))
    return ids


async def _keep_client(system: LeaseSystem, conn: HttpConnection, ids: list[int], *,
                       ttl_s: float, start: float, end: float, tally: KeepAliveTally,
                       rng: random.Random) -> None:
    """One client: its leases' keep-alives, one at a time on its connection, each due TTL/3
    after the answer to the lease's last one (the first at a random point of the first
    interval, so that the clients do not beat in step)."""
    interval = ttl_s / 3
    due = {lease: start + rng.uniform(0, interval) for lease in ids}
    while due:
        lease, when = min(due.items(), key=lambda item: item[1])
        if when >= end:
            return
        now = time.monotonic()
        if when > now:
            await asyncio.sleep(when - now)
        sent = time.monotonic()
        if sent - when >= interval:  # held up behind this client's other keep-alives
            tally.late += 1
        try:
            ok = await asyncio.wait_for(system.keep_alive(conn, lease), ttl_s)
        except (HttpConnectionError, UnexpectedAnswer, TimeoutError, ValueError):
            tally.errors += 1
            due[lease] = time.monotonic() + min(0.5, interval)  # etcd's client retries so
            continue
        answered = time.monotonic()
        tally.answered(answered - sent, answered - when, ok)
        if ok:
            due[lease] = answered + interval
        else:
            del due[lease]  # gone: nothing left to keep alive


async def _revoke_all(system: LeaseSystem, conn: HttpConnection, ids: list[int]) -> int:
    failed = 0
    for lease in ids:
        try:
            await asyncio.wait_for(system.revoke(conn, lease), 30)
        except (HttpConnectionError, UnexpectedAnswer, TimeoutError):
            failed += 1
    return failed


async def keepalive_point(system: LeaseSystem, *, leases: int, clients: int, ttl_s: float,
                          seconds: float, log: Log) -> dict[str, Any]:
    urls = system.member_urls()
    conns = [system.connect(urls[i % len(urls)]) for i in range(clients)]
    counts = [leases // clients + (1 if i < leases % clients else 0) for i in range(clients)]
    rng = random.Random(41)
    failures: list[str] = []
    try:
        began = time.monotonic()
        owned = await asyncio.gather(*(_grant_all(system, c, n, ttl_s, failures)
                                       for c, n in zip(conns, counts, strict=True)))
        grant_s = time.monotonic() - began
        granted = sum(len(ids) for ids in owned)
        log(f"  {system.name}: granted {granted:,} of {leases:,} leases in {grant_s:.1f} s"
            + (f" ({len(failures)} failed, first: {failures[0]})" if failures else ""))
        tally = KeepAliveTally()
        leader = system.leader_pid()
        position = system.connect(system.leader_url(), read_only=True)
        log_before = await system.log_position(position)
        before = CpuSample(leader, system.member_pids())
        start = time.monotonic()
        await asyncio.gather(*(_keep_client(system, c, ids, ttl_s=ttl_s, start=start,
                                            end=start + seconds, tally=tally, rng=rng)
                               for c, ids in zip(conns, owned, strict=True)))
        after = CpuSample(leader, system.member_pids())
        try:
            log_entries = await system.log_position(position) - log_before
        finally:
            await position.close()
        leader_changed = system.leader_pid() != leader
        # Right after the window: every lease was kept alive within the last TTL/3 or so, so
        # each one granted must still be there.
        lister = system.connect(system.leader_url(), read_only=True)
        try:
            listed = await asyncio.wait_for(system.lease_ids(lister), 60)
        finally:
            await lister.close()
        missing = sum(1 for ids in owned for lease in ids if lease not in listed)
        row = keepalive_row(tally, leases=leases, clients=clients, ttl_s=ttl_s,
                            window_s=after.at - before.at, granted=granted, grant_s=grant_s,
                            missing_at_end=missing, cpu=before.until(after),
                            leader_changed=leader_changed, log_entries=log_entries)
        log(f"  {system.name}: {row}")
        began = time.monotonic()
        failed = sum(await asyncio.gather(*(_revoke_all(system, c, ids)
                                            for c, ids in zip(conns, owned, strict=True))))
        row["revoke_s"] = round(time.monotonic() - began, 2)
        row["revoke_failed"] = failed
        log(f"  {system.name}: revoked in {row['revoke_s']} s ({failed} failed)")
        return row
    finally:
        await asyncio.gather(*(c.close() for c in conns))


# --------------------------------------------------------------------------- the run


def _raise_open_files(needed: int) -> None:
    """Each client holds a connection, and the nodes started from here inherit this limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else max(soft, min(needed, hard))
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run(*, leases: int, clients: int, ttl_s: float, seconds: float, lock_seconds: float,
        contenders: list[int], base_port: int, log: Log) -> dict[str, Any]:
    from bench.locks import lock_points
    from bench.store import KraftNodes
    from bench.systems import EtcdCluster
    from bench.tools import ensure_binaries
    from kraft_spark.aio import run as run_async

    ensure_binaries({"etcd": "etcd-server", "etcdctl": "etcd-client"}, log)
    _raise_open_files(4 * clients + 1024)
    results: dict[str, Any] = {"meta": _meta(), "keepalive": {}, "locks": [], "notes": []}
    with tempfile.TemporaryDirectory(prefix="kraft-bench-leases-") as tmp:
        os.makedirs(os.path.join(tmp, "kraft"))
        os.makedirs(os.path.join(tmp, "etcd"))
        log("starting kraft-spark local (3 voters, HTTP on every node) and etcd (3 members)")
        kraft_nodes = KraftNodes(os.path.join(tmp, "kraft"), base_port, base_port + 10)
        etcd_cluster: EtcdCluster | None = None
        try:
            etcd_cluster = EtcdCluster(os.path.join(tmp, "etcd"), base_port + 20)
            systems: list[LeaseSystem] = [KraftLeases(kraft_nodes), EtcdLeases(etcd_cluster)]
            log(f"keep-alives: {leases:,} leases over {clients:,} clients, TTL {ttl_s:g} s, "
                f"{seconds:g} s each")
            for system in systems:
                results["keepalive"][system.name] = run_async(keepalive_point(
                    system, leases=leases, clients=clients, ttl_s=ttl_s, seconds=seconds,
                    log=log))
            log(f"locks: {contenders} contenders, {lock_seconds:g} s per point")
            results["locks"] = run_async(lock_points(
                systems[0].member_urls(), systems[1].member_urls(), contenders=contenders,
                seconds=lock_seconds, log=log, kraft_token=kraft_nodes.tokens.write))
        finally:
            kraft_nodes.stop()
            if etcd_cluster is not None:
                etcd_cluster.stop()
    results["notes"] = notes(results)
    return results


def _meta() -> dict[str, Any]:
    import subprocess

    etcd = subprocess.run(["etcd", "--version"], check=False, capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(),
            "command": "kraft-spark bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2
                                                        else ["leases"]),
            "etcd": etcd.stdout.splitlines()[0].split()[-1] if etcd.stdout else "?",
            "python": sys.version.split()[0]}


def notes(results: dict[str, Any]) -> list[str]:
    """The caveats every reader of the figures needs, stated with the run."""
    out = ["The keep-alive target is the rate at zero latency (each lease every TTL/3); each "
           "lease's next keep-alive is due TTL/3 after the answer to its last one, as etcd's "
           "Go client schedules them, so the rate achieved is a little lower by design.",
           "etcd is driven through its JSON gRPC gateway, one HTTP request per keep-alive "
           "(the gateway opens a gRPC stream for each); etcd's native clients send every "
           "keep-alive of a client on one long-lived gRPC stream, which is cheaper for etcd.",
           "Neither system's keep-alives are replicated: each is answered by the leader's "
           "countdown once it confirmed it leads (kraft-spark: a read index; etcd: its "
           "ensureLeadership check); the log grows only by the checkpoints of leases well "
           "below their TTL and the entries that clear them (the log entries row).",
           "The load generator is one Python process on the same machine as the six members; "
           "its CPU is in the table.",
           "kraft-spark's requests carry a bearer token (write scope) of the credentials file "
           "`kraft-spark local` created, checked on every request, as its HTTP API requires by "
           "default; etcd runs without authentication, as packaged."]
    for name, row in results.get("keepalive", {}).items():
        if row["missing_at_end"] or row["not_found"]:
            out.append(f"{name}: {row['missing_at_end']:,} leases missing at the end and "
                       f"{row['not_found']:,} keep-alives that found their lease gone: it "
                       "could not keep up with the keep-alive load.")
        others, machine = row.get("others_cpu_s", 0.0), row.get("machine_cpu_s", 0.0)
        if machine and others > 0.1 * machine:
            largest = ", ".join(f"{o['name']} {o['cpu_s']:g} s" for o in row["top_others"])
            out.append(f"{name}'s keep-alive window shared the machine: other processes used "
                       f"{others:g} of its {machine:g} busy CPU seconds ({largest}).")
        if row["granted"] < row["leases"]:
            out.append(f"{name}: only {row['granted']:,} of {row['leases']:,} leases were "
                       "granted.")
    if any(r["client"] == "cli" for r in results.get("locks", [])):
        out.append("`cli` lock rows include each process's start, and its CPU is in the last "
                   "column: `kraft-spark` is a Python program that imports every command's "
                   "module to build its parser, `etcdctl` a Go binary. Two cores run about "
                   "2 / (that CPU) such processes a second at most, with nothing else running.")
    return out


def main(*, leases: int, clients: int, ttl_s: float, seconds: float, lock_seconds: float,
         contenders: list[int], base_port: int, out_dir: str, log: Log) -> int:
    began = time.monotonic()
    results = run(leases=leases, clients=clients, ttl_s=ttl_s, seconds=seconds,
                  lock_seconds=lock_seconds, contenders=contenders, base_port=base_port,
                  log=log)
    results["meta"]["wall_s"] = round(time.monotonic() - began, 1)
    text = report(results)
    save_results(out_dir, "leases", results, text)
    print(text)
    return 0
