"""The lease bench's figures: tallies filled during a point, their summaries, and the report.

Pure code (no processes, no sockets), so that ``tests/bench/test_lease_stats.py`` checks it
fast; :mod:`bench.leases` and :mod:`bench.locks` fill the tallies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.floor import percentile

SYSTEMS = ("kraft-spark", "etcd")


def _ms(sorted_s: list[float], p: float) -> float | None:
    return round(percentile(sorted_s, p) * 1000, 2) if sorted_s else None


@dataclass
class KeepAliveTally:
    """What one system's keep-alive window saw, filled by the clients as answers arrive."""

    latencies_s: list[float] = field(default_factory=list)  # send → answer, each keep-alive
    ok: int = 0
    not_found: int = 0  # answered "no such lease": the lease expired (or was never there)
    errors: int = 0  # connection errors, timeouts, other statuses
    max_lag_s: float = 0.0  # the longest from a keep-alive falling due to its answer
    late: int = 0  # keep-alives sent a whole interval or more after they fell due

    def answered(self, latency_s: float, lag_s: float, ok: bool) -> None:
        self.latencies_s.append(latency_s)
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if ok:
            self.ok += 1
        else:
            self.not_found += 1


@dataclass(frozen=True)
class CpuWindow:
    """CPU seconds used over a window: the leader, every member, this load generator; the whole
    machine's busy share (1.0 = every core busy all the time) and busy CPU seconds; the other
    processes' CPU seconds and the largest of them by name. What is left of the machine's
    busy time once every process is counted is the kernel's own (softirq: loopback TCP)."""

    seconds: float
    leader_s: float
    members_s: float
    generator_s: float
    machine_busy: float
    machine_s: float = 0.0
    others_s: float = 0.0
    top_others: tuple[tuple[str, float], ...] = ()

    def row(self) -> dict[str, Any]:
        per = self.seconds or 1.0
        return {"leader_cpu_s": round(self.leader_s, 2),
                "leader_cores": round(self.leader_s / per, 2),
                "members_cpu_s": round(self.members_s, 2),
                "members_cores": round(self.members_s / per, 2),
                "generator_cpu_s": round(self.generator_s, 2),
                "generator_cores": round(self.generator_s / per, 2),
                "machine_busy_pct": round(self.machine_busy * 100, 1),
                "machine_cpu_s": round(self.machine_s, 2),
                "others_cpu_s": round(self.others_s, 2),
                "top_others": [{"name": n, "cpu_s": s} for n, s in self.top_others],
                "kernel_cpu_s": round(max(0.0, self.machine_s - self.members_s
                                          - self.generator_s - self.others_s), 2)}


def keepalive_row(tally: KeepAliveTally, *, leases: int, clients: int, ttl_s: float,
                  window_s: float, granted: int, grant_s: float, missing_at_end: int,
                  cpu: CpuWindow, leader_changed: bool,
                  log_entries: int | None = None) -> dict[str, Any]:
    """One system's keep-alive point as a JSON-able row."""
    lat = sorted(tally.latencies_s)
    answered = tally.ok + tally.not_found
    return {
        "leases": leases, "clients": clients, "ttl_s": ttl_s, "window_s": round(window_s, 2),
        "granted": granted, "grant_s": round(grant_s, 2),
        "grants_per_s": round(granted / grant_s) if grant_s else 0,
        # The rate the schedule asks for: every lease once per TTL/3.
        "target_per_s": round(leases / (ttl_s / 3)),
        "keepalives": answered,
        "keepalives_per_s": round(answered / window_s) if window_s else 0,
        "p50_ms": _ms(lat, 0.50), "p99_ms": _ms(lat, 0.99),
        "max_lag_ms": round(tally.max_lag_s * 1000, 1),
        "late": tally.late, "not_found": tally.not_found, "errors": tally.errors,
        "missing_at_end": missing_at_end, "leader_changed": leader_changed,
        # Entries the replicated log grew by over the window (None: not measured).
        "log_entries": log_entries,
        **cpu.row(),
    }


@dataclass
class LockTally:
    """One lock point: each acquisition's latency, failures, and the mutual-exclusion check
    (``overlaps``: an acquisition while another contender held the lock; must stay 0)."""

    latencies_s: list[float] = field(default_factory=list)
    completed: int = 0  # acquired and released (started before the point's deadline)
    elapsed_s: float = 0.0  # from the point's start until the last of them finished
    errors: int = 0
    overlaps: int = 0
    holding: int = 0
    checked: bool = True  # False where holders cannot be seen (a command line's process)
    client_cpu_s: float | None = None  # CPU of the command-line processes, where they ran

    def enter(self) -> None:
        if self.holding:
            self.overlaps += 1
        self.holding += 1

    def leave(self) -> None:
        self.holding -= 1


def lock_row(tally: LockTally, *, system: str, client: str, contenders: int
             ) -> dict[str, Any]:
    lat = sorted(tally.latencies_s)
    elapsed = tally.elapsed_s
    return {"system": system, "client": client, "contenders": contenders,
            "acquisitions": tally.completed, "elapsed_s": round(elapsed, 2),
            "acquisitions_per_s": round(tally.completed / elapsed, 1) if elapsed else 0.0,
            "p50_ms": _ms(lat, 0.50), "p99_ms": _ms(lat, 0.99),
            "errors": tally.errors, "overlaps": tally.overlaps if tally.checked else None,
            "cli_cpu_ms_each": round(tally.client_cpu_s * 1000 / tally.completed, 1)
            if tally.client_cpu_s is not None and tally.completed else None}


# --------------------------------------------------------------------------- the report


def _n(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


Row = dict[str, Any]
KEEPALIVE_ROWS: tuple[tuple[str, Callable[[Row], str]], ...] = (
    ("leases granted (of asked)", lambda r: f"{_n(r['granted'])} of {_n(r['leases'])}"),
    ("grants/s", lambda r: _n(r["grants_per_s"])),
    ("keep-alives/s (target)", lambda r: f"{_n(r['keepalives_per_s'])} "
                                         f"({_n(r['target_per_s'])})"),
    ("keep-alive p50 / p99 ms", lambda r: f"{_n(r['p50_ms'])} / {_n(r['p99_ms'])}"),
    ("longest due → answered ms", lambda r: _n(r["max_lag_ms"])),
    ("late by an interval or more", lambda r: _n(r["late"])),
    ("answered 'no such lease'", lambda r: _n(r["not_found"])),
    ("errors (connection, timeout, status)", lambda r: _n(r["errors"])),
    ("leases missing at the end", lambda r: _n(r["missing_at_end"])),
    ("replicated log entries in the window", lambda r: _n(r.get("log_entries"))),
    ("leader CPU s (cores)", lambda r: f"{_n(r['leader_cpu_s'])} ({_n(r['leader_cores'])})"),
    ("all members CPU s (cores)",
     lambda r: f"{_n(r['members_cpu_s'])} ({_n(r['members_cores'])})"),
    ("load generator CPU s (cores)",
     lambda r: f"{_n(r['generator_cpu_s'])} ({_n(r['generator_cores'])})"),
    ("machine busy % (CPU s)", lambda r: f"{_n(r['machine_busy_pct'])} "
                                         f"({_n(r.get('machine_cpu_s'))})"),
    ("other processes CPU s (largest)", lambda r: f"{_n(r.get('others_cpu_s'))} ("
     + (", ".join(f"{o['name']} {o['cpu_s']:g}" for o in r.get("top_others", [])) or "none")
     + ")"),
    ("kernel CPU s (no process charged)", lambda r: _n(r.get("kernel_cpu_s"))),
    ("leader changed", lambda r: "yes" if r["leader_changed"] else "no"),
)


def keepalive_table(points: dict[str, dict[str, Any]]) -> list[str]:
    names = [s for s in SYSTEMS if s in points]
    if not names:
        return []
    first = points[names[0]]
    lines = [f"Keep-alives: {first['leases']:,} leases (TTL {first['ttl_s']:g} s) over "
             f"{first['clients']:,} clients, each lease kept alive every TTL/3 for "
             f"{first['window_s']:g} s", "",
             "| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cell(points[n]) for n in names) + " |"
              for label, cell in KEEPALIVE_ROWS]
    return lines


def lock_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["| client | contenders | system | acquisitions/s | p50 ms | p99 ms | errors | "
             "overlaps | CPU ms per CLI process |", "|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["client"], r["contenders"],
                                           SYSTEMS.index(r["system"])
                                           if r["system"] in SYSTEMS else 9)):
        lines.append(f"| {row['client']} | {row['contenders']} | {row['system']} | "
                     f"{_n(row['acquisitions_per_s'])} | {_n(row['p50_ms'])} | "
                     f"{_n(row['p99_ms'])} | {_n(row['errors'])} | {_n(row['overlaps'])} | "
                     f"{_n(row.get('cli_cpu_ms_each'))} |")
    return lines


def report(results: dict[str, Any]) -> str:
    """The markdown page of one run (``bench/results/leases-*.md``)."""
    meta = results.get("meta", {})
    lines = [f"# Leases and locks: kraft-spark against etcd ({meta.get('date', '?')})", "",
             f"`{meta.get('command', 'kraft-spark bench leases')}` on {meta.get('cpus', '?')} "
             f"CPUs; etcd {meta.get('etcd', '?')} through its JSON gateway, Python "
             f"{meta.get('python', '?')}. Both systems: 3 members on loopback, fsync on.", ""]
    lines += keepalive_table(results.get("keepalive", {}))
    locks = results.get("locks", [])
    if locks:
        lines += ["", "Locks: every contender acquires and releases the same lock in a loop. "
                  "`cli`: one process per acquisition (`kraft-spark lock NAME -- true` against "
                  "`etcdctl lock NAME true`), latency = spawn to exit; `in-process`: "
                  "kraft-spark's Python `Lock` against etcd's `/v3/lock/lock` (lease grant, "
                  "lock, unlock, revoke over httpx), latency = start to held.", ""]
        lines += lock_table(locks)
    notes = results.get("notes", [])
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines)
