"""A session of aetcd (PyPI's asyncio etcd client) against an etcd endpoint, run by
``test_python_client.py`` under a Python that has aetcd (this one, or a cached venv): prints
one JSON line of what it saw. Arguments: host port user password."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import aetcd  # type: ignore[import-not-found,unused-ignore]


async def session(host: str, port: int, user: str, password: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with aetcd.Client(host=host, port=port, username=user, password=password) as c:
        await c.put(b"py/a", b"1")
        await c.put(b"py/b", b"2")
        out["get"] = (await c.get(b"py/a")).value.decode()
        out["prefix"] = [kv.key.decode() for kv in await c.get_prefix(b"py/")]
        tx = c.transactions
        for branch in ("then", "else"):
            ok, responses = await c.transaction(
                compare=[tx.value(b"py/a") == b"1"], success=[tx.put(b"py/a", b"11")],
                failure=[tx.get(b"py/a")])
            out[branch] = [ok, None if ok else responses[0][0][0].decode()]
        watch = await c.watch(b"py/w")
        await c.put(b"py/w", b"x")
        async for event in watch:
            out["watch"] = [str(event.kind), event.kv.value.decode()]
            break
        await watch.cancel()
        lease = await c.lease(30)
        await c.put(b"py/l", b"v", lease=lease)
        out["leased"] = (await c.get(b"py/l")).value.decode()
        await lease.revoke()
        out["revoked"] = await c.get(b"py/l") is None
        async with c.lock(b"pylock", ttl=10) as lock:
            out["locked"] = await lock.is_acquired()
        out["deleted"] = (await c.delete_prefix(b"py/")).deleted
    return out


if __name__ == "__main__":
    host, port, user, password = sys.argv[1:5]
    print(json.dumps(asyncio.run(session(host, int(port), user, password))))
