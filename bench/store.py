"""``kraft-spark bench store``: the store API against etcd's, on this machine, in one run.

Both systems run as three local members (``kraft-spark local`` with every node's HTTP API, and
etcd 3.4 with its JSON gateway), with 1,000 keys of 100-byte values written first.

* **Reads by key** with wrk at 1, 16 and 256 connections, linearizable and serializable, at a
  follower and at the leader of each system (kraft-spark: ``GET /v1/kv/{key}``; etcd:
  ``POST /v3/kv/range``, ``serializable`` true or false). The two systems take turns point by
  point; every row is reported, not only the best.
* **Compare-and-set under contention**: 16 clients (asyncio + httpx in this process, the same
  client code shape for both) each read one hot key and write it back conditioned on the
  version they read: successful writes per second and conflicts.
* **Watch delivery**: 1,000 watchers on one prefix at a follower, a writer puts a key every
  100 ms whose value is its send time; the latency from the put's send to each watcher's
  receipt (p50 / p99 over every delivery). etcd's watchers use the gateway's streaming
  ``/v3/watch``.

kraft-spark's clients send the tokens of its credentials file (``bench.credentials``), each the
smallest scope its calls need, as its users' clients would: the readers and the watchers a read
token, the compare-and-set clients and the writers a write token. etcd runs without
authentication, as packaged.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.credentials import Tokens, bearer
from bench.report import save_results
from bench.systems import EtcdCluster, http_json, wait_for
from bench.wrk import HttpWorkload, WrkResult, json_headers, run_wrk

KEYS = 1000
VALUE = "v" * 100
CONNECTIONS = (1, 16, 256)
Log = Callable[[str], None]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _key(i: int) -> str:
    return f"bench/k{i:04d}"


# --------------------------------------------------------------------------- the systems


class KraftNodes:
    """``kraft-spark local`` with the HTTP API embedded in every node, behind the credentials
    it keeps in its data directory (no sidecar prints them: ``Tokens.in_data_dir``)."""

    def __init__(self, data_dir: str, base_port: int, http_base: int) -> None:
        from bench.native import start_local

        self.proc, self.nodes = start_local(data_dir, base_port,
                                            ["--node-http-base-port", str(http_base)])
        try:
            self.urls = {int(n["node_id"]): str(n["http"]) for n in self.nodes}
            self.tokens = Tokens.in_data_dir(data_dir)
            self.leader = int(wait_for("kraft-spark leader", self._leader_id))
        except BaseException:
            self.stop()  # nothing left running behind a failed start
            raise

    def _leader_id(self) -> int | None:
        status, body = http_json(self.urls[0] + "/v1/quorum", token=self.tokens.read)
        leader = body.get("leaderId", -1) if status == 200 else -1
        return int(leader) if leader >= 0 else None

    def leader_url(self) -> str:
        return self.urls[self.leader]

    def follower_url(self) -> str:
        return next(u for i, u in sorted(self.urls.items()) if i != self.leader)

    def seed(self) -> None:
        for start in range(0, KEYS, 100):
            body = {"records": [{"key": _key(i), "value": VALUE}
                                for i in range(start, start + 100)]}
            status, answer = http_json(self.leader_url() + "/v1/records", "POST", body,
                                       token=self.tokens.write)
            if status != 200:
                raise RuntimeError(f"seeding kraft-spark failed: {status} {answer}")

    def reads(self, url: str, consistency: str) -> HttpWorkload:
        return HttpWorkload(url, "/", [], paths=[f"/v1/kv/{_key(i)}?consistency={consistency}"
                                                 for i in range(KEYS)],
                            headers=json_headers(self.tokens.read, json_body=False))

    def stop(self) -> None:
        from bench.native import stop_local

        stop_local(self.proc, self.nodes)


class EtcdStore:
    def __init__(self, etcd: EtcdCluster) -> None:
        self.etcd = etcd

    def leader_url(self) -> str:
        return self.etcd.leader_url()

    def follower_url(self) -> str:
        leader = self.etcd.leader_index()
        return next(u for i, u in enumerate(self.etcd.client_urls) if i != leader)

    def seed(self) -> None:
        for start in range(0, KEYS, 100):
            body = {"success": [{"requestPut": {"key": _b64(_key(i)), "value": _b64(VALUE)}}
                                for i in range(start, start + 100)]}
            status, answer = http_json(self.leader_url() + "/v3/kv/txn", "POST", body)
            if status != 200:
                raise RuntimeError(f"seeding etcd failed: {status} {answer}")

    def reads(self, url: str, consistency: str) -> HttpWorkload:
        serializable = consistency == "serializable"
        bodies = [json.dumps({"key": _b64(_key(i)), "serializable": serializable}).encode()
                  for i in range(KEYS)]
        return HttpWorkload(url, "/v3/kv/range", bodies)


# --------------------------------------------------------------------------- reads


def read_points(kraft: KraftNodes, etcd: EtcdStore, seconds: float, log: Log
                ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for consistency in ("linearizable", "serializable"):
        for role in ("follower", "leader"):
            for connections in CONNECTIONS:
                for name, system in (("kraft-spark", kraft), ("etcd", etcd)):
                    url = system.follower_url() if role == "follower" else system.leader_url()
                    result: WrkResult = run_wrk(system.reads(url, consistency), connections,
                                                seconds, warmup_s=1.0)
                    row = {"system": name, "consistency": consistency, "at": role,
                           "connections": connections, "reads_per_s": round(result.ok_per_s),
                           "p50_ms": round(result.p50_ms, 2), "p99_ms": round(result.p99_ms, 2),
                           "errors": result.errors}
                    log(f"  {row}")
                    rows.append(row)
    return rows


# --------------------------------------------------------------------------- compare-and-set


async def _kraft_cas(client: httpx.AsyncClient, key: str, value: str) -> bool:
    answer = await client.get(f"/v1/kv/{key}")
    if answer.status_code not in (200, 404):  # 404: absent
        raise RuntimeError(f"kraft-spark cas read answered {answer.status_code}")
    version = answer.json()["version"] if answer.status_code == 200 else 0
    body = {"records": [{"key": key, "value": value}],
            "conditions": [{"key": key, "version": version}]}
    status = (await client.post("/v1/records", json=body)).status_code
    if status not in (200, 409):
        raise RuntimeError(f"kraft-spark cas answered {status}")
    return status == 200


async def _etcd_cas(client: httpx.AsyncClient, key: str, value: str) -> bool:
    got = (await client.post("/v3/kv/range", json={"key": _b64(key)})).json()
    version = int(got["kvs"][0].get("version", 0)) if got.get("kvs") else 0
    body = {"compare": [{"key": _b64(key), "target": "VERSION", "result": "EQUAL",
                         "version": str(version)}],
            "success": [{"requestPut": {"key": _b64(key), "value": _b64(value)}}]}
    answer = (await client.post("/v3/kv/txn", json=body)).json()
    return bool(answer.get("succeeded"))


async def cas_point(url: str, cas: Any, seconds: float, clients: int = 16,
                    token: str | None = None) -> dict[str, Any]:
    """``clients`` compare-and-set loops on one key for ``seconds``; ``token``: the write
    token every request carries (kraft-spark)."""
    key = "bench/hot"
    done = time.monotonic() + seconds
    counts = {"ok": 0, "conflict": 0}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10,
                                 headers=bearer(token)) as client:
        await cas(client, key, "seed")  # the key exists before the clock starts

        async def worker(i: int) -> None:
            n = 0
            while time.monotonic() < done:
                n += 1
                counts["ok" if await cas(client, key, f"w{i}-{n}") else "conflict"] += 1

        await asyncio.gather(*(worker(i) for i in range(clients)))
    return {"clients": clients, "cas_ok_per_s": round(counts["ok"] / seconds),
            "conflicts_per_s": round(counts["conflict"] / seconds)}


# --------------------------------------------------------------------------- watches


class WatchRefused(Exception):
    """A watch the server answered with an error status (a token it does not take, say)."""


async def _kraft_watch(client: httpx.AsyncClient, prefix: str, got: list[float],
                       ready: asyncio.Event, stop: asyncio.Event) -> None:
    async with client.stream("GET", "/v1/watch", params={"prefix": prefix}) as response:
        ready.set()
        if response.status_code != 200:  # a refused watcher: watch_point reports it
            raise WatchRefused(f"kraft-spark watch answered {response.status_code}")
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"type":"put"' in line:
                sent = float(json.loads(line[6:])["value"])
                got.append(time.time() - sent)
            if stop.is_set():
                return


async def _etcd_watch(client: httpx.AsyncClient, prefix: str, got: list[float],
                      ready: asyncio.Event, stop: asyncio.Event) -> None:
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = {"create_request": {"key": _b64(prefix), "range_end": _b64(end)}}
    async with client.stream("POST", "/v3/watch", json=body) as response:
        ready.set()
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            for event in json.loads(line).get("result", {}).get("events", []):
                if event.get("type", "PUT") == "PUT":
                    sent = float(base64.b64decode(event["kv"]["value"]).decode())
                    got.append(time.time() - sent)
            if stop.is_set():
                return


async def watch_point(url: str, writer_url: str, watch: Any, put: Any, *, watchers: int,
                      events: int, tokens: Tokens | None = None) -> dict[str, Any]:
    """``watchers`` watchers at ``url``, a writer at ``writer_url``; with ``tokens``
    (kraft-spark), the watchers send the read token and the writer the write token."""
    prefix = "bench/watch/"
    got: list[float] = []
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=watchers + 10, max_keepalive_connections=0)
    read, write = (tokens.read, tokens.write) if tokens is not None else (None, None)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=None,
                                 headers=bearer(read)) as client, \
            httpx.AsyncClient(base_url=writer_url, timeout=10, headers=bearer(write)) as writer:
        readies = [asyncio.Event() for _ in range(watchers)]
        tasks = [asyncio.ensure_future(watch(client, prefix, got, r, stop)) for r in readies]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        await asyncio.sleep(1.0)
        for i in range(events):
            await put(writer, f"{prefix}e{i}", repr(time.time()))
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + 10
        while len(got) < watchers * events and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        for task in tasks:
            task.cancel()
        ended = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [e for e in ended if isinstance(e, WatchRefused)]
        if failed:
            raise RuntimeError(f"{len(failed)} of {watchers} watchers failed; the first: "
                               f"{failed[0]!r}")
    ms = sorted(x * 1000 for x in got)
    return {"watchers": watchers, "events": events, "delivered": len(ms),
            "p50_ms": round(statistics.median(ms), 2) if ms else None,
            "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 2) if ms else None}


async def _kraft_put(client: httpx.AsyncClient, key: str, value: str) -> None:
    (await client.post("/v1/records", json={"key": key, "value": value})).raise_for_status()


async def _etcd_put(client: httpx.AsyncClient, key: str, value: str) -> None:
    (await client.post("/v3/kv/put", json={"key": _b64(key), "value": _b64(value)})
     ).raise_for_status()


# --------------------------------------------------------------------------- the run


def run(seconds: float, watchers: int, base_port: int, log: Log) -> dict[str, Any]:
    from bench.tools import ensure_tools

    ensure_tools(log)
    results: dict[str, Any] = {"machine": os.cpu_count(), "seconds_per_point": seconds}
    with tempfile.TemporaryDirectory(prefix="kraft-bench-store-") as tmp:
        os.makedirs(os.path.join(tmp, "kraft"))
        os.makedirs(os.path.join(tmp, "etcd"))
        log("starting kraft-spark local (3 voters, HTTP on every node) and etcd (3 members)")
        kraft = KraftNodes(os.path.join(tmp, "kraft"), base_port, base_port + 10)
        etcd_cluster = EtcdCluster(os.path.join(tmp, "etcd"), base_port + 20)
        etcd = EtcdStore(etcd_cluster)
        try:
            kraft.seed()
            etcd.seed()
            log(f"reads: {len(CONNECTIONS)} connection counts x 2 consistencies x 2 members")
            results["reads"] = read_points(kraft, etcd, seconds, log)
            log("compare-and-set, 16 clients on one key")
            results["cas"] = {
                "kraft-spark": asyncio.run(cas_point(kraft.leader_url(), _kraft_cas, seconds,
                                                     token=kraft.tokens.write)),
                "etcd": asyncio.run(cas_point(etcd.leader_url(), _etcd_cas, seconds)),
            }
            log(f"  {results['cas']}")
            log(f"watch delivery, {watchers} watchers at a follower")
            results["watch"] = {
                "kraft-spark": asyncio.run(watch_point(
                    kraft.follower_url(), kraft.leader_url(), _kraft_watch, _kraft_put,
                    watchers=watchers, events=20, tokens=kraft.tokens)),
                "etcd": asyncio.run(watch_point(
                    etcd.follower_url(), etcd.leader_url(), _etcd_watch, _etcd_put,
                    watchers=watchers, events=20)),
            }
            log(f"  {results['watch']}")
        finally:
            kraft.stop()
            etcd_cluster.stop()
    return results


def report(results: dict[str, Any]) -> str:
    lines = ["| consistency | at | connections | kraft-spark reads/s (p50 / p99 ms) | "
             "etcd reads/s (p50 / p99 ms) | ratio |", "|---|---|---|---|---|---|"]
    rows = results["reads"]
    for row in (r for r in rows if r["system"] == "kraft-spark"):
        other = next(r for r in rows if r["system"] == "etcd" and all(
            r[k] == row[k] for k in ("consistency", "at", "connections")))
        ratio = row["reads_per_s"] / other["reads_per_s"] if other["reads_per_s"] else 0
        lines.append(
            f"| {row['consistency']} | {row['at']} | {row['connections']} | "
            f"{row['reads_per_s']:,} ({row['p50_ms']} / {row['p99_ms']}) | "
            f"{other['reads_per_s']:,} ({other['p50_ms']} / {other['p99_ms']}) | "
            f"{ratio:.2f}x |")
    cas, watch = results["cas"], results["watch"]
    lines += ["", "| compare-and-set, 16 clients, one key | successful/s | conflicts/s |",
              "|---|---|---|"]
    lines += [f"| {name} | {c['cas_ok_per_s']:,} | {c['conflicts_per_s']:,} |"
              for name, c in cas.items()]
    lines += ["", "| watch delivery | watchers | delivered | p50 ms | p99 ms |",
              "|---|---|---|---|---|"]
    lines += [f"| {name} | {w['watchers']} | {w['delivered']:,} | {w['p50_ms']} | "
              f"{w['p99_ms']} |" for name, w in watch.items()]
    lines += ["", "kraft-spark's requests carry a bearer token of the credentials file "
              "`kraft-spark local` created (read scope for reads and watches, write for "
              "compare-and-set and puts), checked on every request, as its HTTP API requires "
              "by default; etcd runs without authentication, as packaged."]
    return "\n".join(lines)


def main(seconds: float, watchers: int, base_port: int, out_dir: str, log: Log) -> int:
    results = run(seconds, watchers, base_port, log)
    text = report(results)
    save_results(out_dir, "store", results, text)
    print(text)
    return 0
