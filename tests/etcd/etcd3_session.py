"""A session of python-etcd3 0.12 (PyPI's ``etcd3``) against a TLS etcd endpoint, run by
``test_tls_members.py`` under a Python that has it, with
``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` (its generated modules predate protobuf 4):
prints one JSON line of what it saw. Arguments: host port ca cert key user password."""

from __future__ import annotations

import json
import sys
from typing import Any

import etcd3  # type: ignore[import-not-found,import-untyped,unused-ignore]


def session(host: str, port: int, tls: list[str], user: str, password: str) -> dict[str, Any]:
    """``tls``: the CA's certificate, the client's certificate and its key."""
    ca, cert, key = tls
    c = etcd3.client(host=host, port=port, ca_cert=ca, cert_cert=cert, cert_key=key,
                     user=user, password=password)
    out: dict[str, Any] = {}
    c.put("p3/a", "1")
    out["get"] = c.get("p3/a")[0].decode()
    tx = c.transactions
    ok, _ = c.transaction(compare=[tx.value("p3/a") == "1"], success=[tx.put("p3/a", "2")],
                          failure=[])
    out["txn"] = [ok, c.get("p3/a")[0].decode()]
    lease = c.lease(10)
    c.put("p3/l", "x", lease=lease)
    out["lease_keys"] = [k.decode() for k in lease.keys]
    with c.lock("p3-lock", ttl=5) as lock:
        out["locked"] = lock.is_acquired()
    out["members"] = sorted(m.name for m in c.members)
    out["deleted"] = c.delete_prefix("p3/").deleted
    return out


if __name__ == "__main__":
    host, port, ca, cert, key, user, password = sys.argv[1:]
    print(json.dumps(session(host, int(port), [ca, cert, key], user, password)))
