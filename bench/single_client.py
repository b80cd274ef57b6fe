"""One HTTP client appending single records to `kraft-spark local --http-port` (the sidecar), for
source trees taking turns: appends/s, p50, p99. Compares two checkouts of this repository (a
`git worktree` of an older commit beside this one) on the same machine in the same minutes:

    python -m bench.single_client ROUNDS TREE [TREE ...]

Each tree runs with PYTHONPATH=TREE on this interpreter (copy the compiled
kraft_spark/log/_fastcodec*.so into an older worktree, or it runs the pure-Python codec).

The client sends the write token of the credentials file the sidecar's line names, as a user's
client does; a tree from before authentication names none, and is sent none.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.processes import stop_group
from kraft_spark.http_auth import Scope, token_in


def run(tree: str, seconds: float, base_port: int) -> tuple[float, float, float]:
    """One 8 s point against a fresh 3-voter quorum of ``tree``: (appends/s, p50 ms, p99 ms)."""
    env = dict(os.environ, PYTHONPATH=tree)
    # The sidecar alone: a tree whose nodes serve HTTP by default puts the append router in
    # front of them at --http-port unless told --no-node-http.
    alone = (["--no-node-http"] if os.path.isdir(os.path.join(tree, "kraft_spark", "etcd_front"))
             else [])
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen([sys.executable, "-m", "kraft_spark", "local", "--voters", "3",
                              "--data-dir", tmp, "--base-port", str(base_port), "--http-port", "0",
                              *alone],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                             cwd=tree, start_new_session=True)
        assert p.stdout is not None
        try:
            for _ in range(3):
                p.stdout.readline()
            sidecar = json.loads(p.stdout.readline())
            url = sidecar["http"]
            auth = ({"Authorization": f"Bearer {token_in(sidecar['credentials'], Scope.WRITE)}"}
                    if sidecar.get("credentials") else {})
            host, port = url.split("//")[1].split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            body = json.dumps({"key": "k", "value": "x" * 100}).encode()
            lat: list[float] = []
            end_warm = time.monotonic() + 2
            stop = end_warm + seconds
            while True:
                t = time.perf_counter()
                conn.request("POST", "/v1/records", body,
                             {"Content-Type": "application/json", **auth})
                r = conn.getresponse()
                answer = r.read()
                if r.status != 200:  # a refused append is no append (a 401 answers fast)
                    raise RuntimeError(f"{tree}: POST /v1/records answered {r.status}: "
                                       f"{answer[:200]!r}")
                now = time.monotonic()
                if now > stop:
                    break
                if now > end_warm:
                    lat.append(time.perf_counter() - t)
            conn.close()
        finally:
            stop_group(p, 30)
    lat.sort()
    return len(lat) / seconds, lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000

def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    rounds, trees = int(argv[0]), argv[1:]
    results: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
    for rnd in range(rounds):
        for tree in trees:
            r = run(tree, 8.0, 19850)
            results[tree].append(r)
            print(f"round {rnd}: {tree}: {r[0]:.0f} appends/s, p50 {r[1]:.2f} ms, "
                  f"p99 {r[2]:.2f} ms", flush=True)
    for tree, rs in results.items():
        m = len(rs) // 2
        ops, p50, p99 = (sorted(r[k] for r in rs)[m] for k in range(3))
        print(f"median of {len(rs)}: {tree}: {ops:.0f} appends/s, p50 {p50:.2f} ms, "
              f"p99 {p99:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
