"""``kraft-spark bench etcd-load``: etcd's own load generator, ``benchmark``
(:mod:`bench.etcd_tool`), pointed at kraft-spark's etcd API and at etcd, the same binary and
command line for both (issue 64: the goal is at least 1.0x etcd through the same client at 1,
16 and 256 clients).

* **kraft-spark**: ``kraft-spark local``, 3 voters on loopback with fsync on, every node serving
  the HTTP API and etcd's v3 gRPC API; the tool authenticates as ``admin`` with the admin token
  of ``<data-dir>/http-credentials`` (``--user``), as users' etcd clients do, so every request
  pays the credential check.
* **etcd**: Debian's etcd 3.4 on loopback, three members by default (``--etcd-members``), as
  packaged (no authentication). Three like ours, because then both sides do the same work per
  write (a majority fsyncs it before the answer); one member (``--etcd-members 1``) skips
  replication and is etcd's best case, not a like-for-like comparison.

Cells, in the op-guide's shape (8-byte keys, 256-byte values): ``put`` (sequential keys, a new
key per request) and ``range`` of one seeded key (linearizable), each at 1 client over 1 gRPC
connection, 16 clients over 16 and 256 clients over 16; ``--total`` requests per cell, all sent
to the leader (``--target-leader``). Both systems stay up for the whole run (the idle one's
heartbeats count among the other processes) and take turns cell by cell, the first of them
alternating, ``--rounds`` times; each figure is the median over the rounds (every round is in
the JSON). Per cell and system: requests/s, p50 and p99 (the tool's), and the CPU seconds the
server's processes spent per answered request (``/proc``, all members, and the leader's share),
with the tool's own CPU and the rest of the machine's beside them.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from bench import etcd_tool
from bench.etcd_tool import Cell
from bench.proc_cpu import CpuSample
from bench.report import save_results

Log = Callable[[str], None]

CLIENTS = (1, 16, 256)
OPS = ("put", "range")
RANGE_KEY = "etcd-load/range"
SYSTEMS = ("kraft-spark", "etcd")
TOOL_TIMEOUT_S = 900.0


def connections_for(clients: int) -> int:
    """The op-guide's shape: one connection for one client, otherwise clients share 16."""
    return 1 if clients == 1 else 16


def plan(total: int, ops: tuple[str, ...] = OPS, clients: tuple[int, ...] = CLIENTS
         ) -> list[Cell]:
    return [Cell(op, c, connections_for(c), total) for op in ops for c in clients]


# --------------------------------------------------------------------------- the systems


class System(Protocol):
    name: str

    def endpoints(self) -> list[str]: ...

    def user(self) -> str | None:
        """``name:password`` for the tool's ``--user``, None without authentication."""
        ...

    def leader_pid(self) -> int: ...

    def member_pids(self) -> list[int]: ...

    def stop(self) -> None: ...


class KraftEtcd:
    """``kraft-spark local`` (3 voters), each node serving etcd's API on a port of its own."""

    name = "kraft-spark"

    def __init__(self, data_dir: str, base_port: int) -> None:
        from bench.store import KraftNodes

        self.nodes = KraftNodes(data_dir, base_port, base_port + 10)
        try:
            if any(not n.get("etcd") for n in self.nodes.nodes):
                raise RuntimeError("kraft-spark local printed no etcd address: does this "
                                   "version serve etcd's API (docs/etcd-api.md)?")
        except BaseException:
            self.nodes.stop()
            raise

    def endpoints(self) -> list[str]:
        return [str(n["etcd"]) for n in sorted(self.nodes.nodes, key=lambda n: n["node_id"])]

    def user(self) -> str | None:
        # On the tool's command line (it reads no environment variable for it): the token of a
        # throwaway data directory, gone with the bench; the logs show it redacted.
        return f"admin:{self.nodes.tokens.admin}"

    def leader_pid(self) -> int:
        leader = self.nodes._leader_id()
        leader = self.nodes.leader if leader is None else leader
        return int(next(n["pid"] for n in self.nodes.nodes if int(n["node_id"]) == leader))

    def member_pids(self) -> list[int]:
        return [int(n["pid"]) for n in self.nodes.nodes]

    def stop(self) -> None:
        self.nodes.stop()


class EtcdMembers:
    """Debian's etcd 3.4, ``members`` members on loopback (``bench.systems.EtcdCluster``)."""

    name = "etcd"

    def __init__(self, data_dir: str, base_port: int, members: int) -> None:
        from bench.systems import EtcdCluster

        self.cluster = EtcdCluster(data_dir, base_port, members=members)

    def endpoints(self) -> list[str]:
        return [u.removeprefix("http://") for u in self.cluster.client_urls]

    def user(self) -> str | None:
        return None

    def leader_pid(self) -> int:
        from bench.systems import wait_for

        return int(self.cluster.procs[int(wait_for("etcd leader",
                                                   self.cluster.leader_index))].pid)

    def member_pids(self) -> list[int]:
        return [int(p.pid) for p in self.cluster.procs]

    def stop(self) -> None:
        self.cluster.stop()


def seed(system: System) -> None:
    """Put ``RANGE_KEY`` (a 256-byte value) with etcdctl, the key the range cells read."""
    env = {**os.environ, "ETCDCTL_API": "3"}
    user = system.user()
    if user is not None:
        env["ETCDCTL_USER"] = user  # not on the command line
    done = subprocess.run(["etcdctl", "--endpoints", ",".join(system.endpoints()), "put",
                           RANGE_KEY, "v" * etcd_tool.VALUE_SIZE], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode != 0 or "OK" not in done.stdout:
        raise RuntimeError(f"seeding {system.name} with etcdctl failed: "
                           f"{(done.stderr or done.stdout).strip()[-500:]}")


# --------------------------------------------------------------------------- one measurement


def measure(binary: Path, system: System, cell: Cell, log: Log) -> dict[str, Any]:
    """Run the tool once for ``cell`` against ``system``; its figures, the CPU of the server's
    processes, of the tool, and of the rest of the machine over the run."""
    command = etcd_tool.argv(binary, cell, system.endpoints(), range_key=RANGE_KEY,
                             user=system.user())
    before = CpuSample(system.leader_pid(), system.member_pids())
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{system.name}: {cell.label} ran over {TOOL_TIMEOUT_S:.0f} s: "
                           f"{' '.join(etcd_tool.redacted(command))}") from None
    window = before.until(CpuSample(before.leader, before.members))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{system.name}: {' '.join(etcd_tool.redacted(command))} exited "
                           f"{done.returncode}: {done.stderr.strip()[-1500:]}")
    figures = etcd_tool.parse_report(done.stdout)
    ok = cell.total - sum(figures["errors"].values())
    tool_s = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    row = {**figures, "ok": ok,
           "server_cpu_s": round(window.members_s, 3),
           "leader_cpu_s": round(window.leader_s, 3),
           "cpu_ms_per_request": round(window.members_s * 1000 / ok, 4) if ok else None,
           "leader_cpu_ms_per_request": round(window.leader_s * 1000 / ok, 4) if ok else None,
           "tool_cpu_s": round(tool_s, 3),
           "window_s": round(window.seconds, 3),
           "machine_busy_pct": round(window.machine_busy * 100, 1),
           "others_cpu_s": round(window.others_s, 2),
           "top_others": [{"name": n, "cpu_s": s} for n, s in window.top_others]}
    log(f"  {system.name:<11} {cell.label:<18} {row['requests_per_s']:>10,.1f} req/s  p50 "
        f"{row['p50_ms']} ms  p99 {row['p99_ms']} ms  server CPU {row['cpu_ms_per_request']} "
        f"ms/req  other processes {window.others_s / (window.seconds or 1):.2f} cores"
        + (f"  ERRORS {figures['errors']}" if figures["errors"] else ""))
    return row


def median_row(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (errors added up)."""
    out: dict[str, Any] = {}
    for key in ("requests_per_s", "p50_ms", "p99_ms", "cpu_ms_per_request",
                "leader_cpu_ms_per_request", "tool_cpu_s", "machine_busy_pct", "others_cpu_s"):
        values = [r[key] for r in rounds if r.get(key) is not None]
        out[key] = round(statistics.median(values), 4) if values else None
    out["errors"] = sum(sum(r["errors"].values()) for r in rounds)
    return out


def run_cells(binary: Path, systems: list[System], cells: list[Cell], rounds: int,
              log: Log) -> list[dict[str, Any]]:
    """Every cell on every system, ``rounds`` times, the systems taking turns (the first one
    alternating from cell to cell and round to round)."""
    out: list[dict[str, Any]] = []
    for index, cell in enumerate(cells):
        runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in systems}
        for r in range(rounds):
            shift = (index + r) % len(systems)
            for system in systems[shift:] + systems[:shift]:
                runs[system.name].append(measure(binary, system, cell, log))
        out.append({"op": cell.op, "clients": cell.clients, "conns": cell.conns,
                    "total": cell.total,
                    "systems": {name: {**median_row(rows), "rounds": rows}
                                for name, rows in runs.items()}})
    return out


# --------------------------------------------------------------------------- the report


def _ms(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}"


def _side(point: dict[str, Any]) -> list[str]:
    rate = f"{point['requests_per_s']:,.0f}"
    if point.get("errors"):
        rate += f" ({point['errors']:,} errors)"
    cpu, leader = point.get("cpu_ms_per_request"), point.get("leader_cpu_ms_per_request")
    return [rate, f"{_ms(point.get('p50_ms'))} / {_ms(point.get('p99_ms'))}",
            "—" if cpu is None or leader is None else f"{cpu:.3f} ({leader:.3f})"]


def report(results: dict[str, Any]) -> str:
    """The results as markdown: a row per cell, kraft-spark's figures, etcd's, the ratio."""
    members = results.get("etcd_members", 3)
    lines = [
        f"| cell | conns | kraft-spark req/s | p50 / p99 ms | CPU ms/req (leader) | "
        f"etcd ({members} member{'s' if members != 1 else ''}) req/s | p50 / p99 ms | "
        "CPU ms/req (leader) | ratio |",
        "|---|---|---|---|---|---|---|---|---|"]
    for cell in results["cells"]:
        kraft, etcd = cell["systems"].get("kraft-spark"), cell["systems"].get("etcd")
        label = Cell(cell["op"], cell["clients"], cell["conns"], cell["total"]).label
        if cell["op"] == "range":
            label += " (linearizable)"
        ratio = (f"{kraft['requests_per_s'] / etcd['requests_per_s']:.2f}x"
                 if kraft and etcd and etcd["requests_per_s"] else "—")
        cols = [*(_side(kraft) if kraft else ["—"] * 3), *(_side(etcd) if etcd else ["—"] * 3)]
        lines.append(f"| {label} | {cell['conns']} | " + " | ".join(cols) + f" | {ratio} |")
    ratios = [c["systems"]["kraft-spark"]["requests_per_s"] / c["systems"]["etcd"]["requests_per_s"]
              for c in results["cells"] if {"kraft-spark", "etcd"} <= set(c["systems"])
              and c["systems"]["etcd"]["requests_per_s"]]
    if ratios:
        lines += ["", f"Goal (issue 64): at least 1.0x etcd's requests/s through the same client "
                  f"at 1, 16 and 256 clients: met in {sum(r >= 1.0 for r in ratios)} of "
                  f"{len(ratios)} cells (ratios {min(ratios):.2f}x to {max(ratios):.2f}x)."]
    lines += ["", f"etcd's `benchmark` ({results.get('tool', '?')}), {results['total']:,} "
              f"requests per cell, {results['rounds']} round(s), medians; 8-byte keys, "
              "256-byte values, load at the leader. CPU: the server's processes (every member) "
              "per answered request, from /proc; the leader's share in brackets. kraft-spark's "
              "requests authenticate as admin (a token check per request); etcd runs without "
              "authentication, as packaged."]
    # The machine's other load, as a share of its cores: the systems' and the tool's own CPU
    # fill the machine during a cell, so its busy share says little; what else ran says more.
    others = [r["others_cpu_s"] / r["window_s"] for c in results["cells"]
              for p in c["systems"].values() for r in p.get("rounds", [])
              if r.get("window_s")]
    if others:
        lines.append(f"Other processes (all but the measured members and the tool) took "
                     f"{min(others):.2f}-{max(others):.2f} of the machine's "
                     f"{results.get('machine') or os.cpu_count()} cores during the cells "
                     f"(mean {statistics.mean(others):.2f}).")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


def ensure_binary(log: Log) -> Path:
    """etcd's benchmark tool, built now if its go.mod/go.sum changed (says so)."""
    if not etcd_tool.binary_path().is_file():
        log(f"building etcd's benchmark tool ({etcd_tool.PACKAGE} "
            f"{etcd_tool.module_version()}) with go into {etcd_tool.CACHE} (once) ...")
    binary, why_not = etcd_tool.build()
    if binary is None:
        raise RuntimeError(f"cannot build etcd's benchmark tool: {why_not}")
    log(f"etcd's benchmark tool ({etcd_tool.module_version()}): {binary}")
    return binary


def run(*, total: int, rounds: int, etcd_members: int, base_port: int, log: Log,
        systems: tuple[str, ...] = SYSTEMS) -> dict[str, Any]:
    from bench.tools import ensure_binaries

    ensure_binaries({"etcd": "etcd-server", "etcdctl": "etcd-client"}, log)
    binary = ensure_binary(log)
    cells = plan(total)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": os.cpu_count(), "etcd": _etcd_version(),
        "tool": f"{etcd_tool.PACKAGE} {etcd_tool.module_version()}",
        "etcd_members": etcd_members, "total": total, "rounds": rounds,
        "command": " ".join(["kraft-spark", "bench", "etcd-load", *sys.argv[3:]])}
    started: list[System] = []
    with tempfile.TemporaryDirectory(prefix="kraft-bench-etcd-load-") as tmp:
        try:
            if "kraft-spark" in systems:
                log("starting kraft-spark local (3 voters, etcd API on every node)")
                started.append(KraftEtcd(os.path.join(tmp, "kraft"), base_port))
            if "etcd" in systems:
                log(f"starting etcd {results['etcd']} ({etcd_members} member(s))")
                os.makedirs(os.path.join(tmp, "etcd"))
                started.append(EtcdMembers(os.path.join(tmp, "etcd"), base_port + 30,
                                           etcd_members))
            for system in started:
                seed(system)
            log(f"{len(cells)} cells x {len(started)} systems x {rounds} round(s), "
                f"{total:,} requests each")
            results["cells"] = run_cells(binary, started, cells, rounds, log)
        finally:
            for system in started:
                system.stop()
    results["seconds"] = round(sum(r["window_s"] for c in results["cells"]
                                   for p in c["systems"].values() for r in p["rounds"]), 1)
    return results


def _etcd_version() -> str:
    """``3.4.23`` from ``etcd --version``'s first line (``etcd Version: 3.4.23``)."""
    done = subprocess.run(["etcd", "--version"], capture_output=True, text=True, check=False)
    words = done.stdout.split("\n", 1)[0].split()
    return words[-1] if words else "?"


def main(*, total: int, rounds: int, etcd_members: int, base_port: int, out_dir: str,
         log: Log, systems: tuple[str, ...] = SYSTEMS) -> int:
    results = run(total=total, rounds=rounds, etcd_members=etcd_members, base_port=base_port,
                  log=log, systems=systems)
    text = report(results)
    save_results(out_dir, "etcd-load", results, text)
    print(text)
    return 0
