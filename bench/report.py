"""The comparison bench's results as a markdown page and a PNG plot.

The results are one JSON-able dict (see :mod:`bench.compare`): ``meta`` (date, machine,
command, versions), ``floor``, ``systems`` (per system: its points by workload name, and the
failover figures where measured) and ``visibility`` (the Spark application's Delta lag).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from bench.disk_stalls import INTERVAL_MS, STALL_MS
from bench.plan import PLAN

WORKLOADS = tuple(workload.label for workload in PLAN)
# The Spark application's two rows (bench/compare.py names its contenders with these).
APP_LEADER_HTTP = "kraft-spark app, HTTP in the leader"
APP_HTTP = "kraft-spark app, driver's HTTP endpoint"
APP_ROWS = (APP_LEADER_HTTP, APP_HTTP)


def save_results(out_dir: str, name: str, results: dict[str, Any], text: str) -> None:
    """Write a run's ``<name>-<UTC stamp>.json`` and ``.md`` into ``out_dir``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}-{stamp}.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    with open(os.path.join(out_dir, f"{name}-{stamp}.md"), "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,.{digits}f}"
    return str(value)


def _point(system: dict[str, Any], workload: str) -> dict[str, Any] | None:
    point: dict[str, Any] | None = system.get("points", {}).get(workload)
    return point


def best_of(rows: list[dict[str, Any]], workload: str, key: str,
            lower: bool) -> tuple[float | None, str]:
    """The best figure ``key`` of ``workload`` among ``rows`` (lowest or highest) and the name
    of the row that has it; (None, "") when none measured it."""
    found = [(v, s["name"]) for s in rows
             if (v := (_point(s, workload) or {}).get(key)) is not None]
    if not found:
        return None, ""
    value, name = (min if lower else max)(found)
    return value, name


def targets(results: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """Issue 6's targets: (what, met? (None: not measured), the figures behind it)."""
    systems = {s["name"]: s for s in results["systems"]}
    # kraft-spark's HTTP front ends: the sidecar, and the API embedded in the leader. Each HTTP
    # target is judged on the better of the two, named next to the figure.
    kraft_http = [s for s in results["systems"]
                  if s["name"] in ("kraft-spark HTTP", "kraft-spark HTTP in the leader")]
    kraft = systems.get("kraft-spark HTTP") or (kraft_http[0] if kraft_http else None)
    native = systems.get("kraft-spark native")
    # etcd as packaged, and the same members placed like kraft-spark's voters: each target is
    # judged against the better of the two, named next to the figure.
    etcd_http = [s for s in results["systems"] if s["name"].startswith("etcd HTTP")]
    floor = results.get("floor")
    out: list[tuple[str, bool | None, str]] = []

    def p(system: dict[str, Any] | None, workload: str, key: str) -> float | None:
        point = _point(system, workload) if system else None
        return None if point is None else point.get(key)

    def best_http(workload: str, key: str, lower: bool) -> tuple[float | None, str]:
        return best_of(kraft_http, workload, key, lower)

    def best_etcd(workload: str, key: str, lower: bool) -> tuple[float | None, str]:
        return best_of(etcd_http, workload, key, lower)

    (k1, k1_name), (e1, e1_name) = (best_http("1 client", "p50_ms", True),
                                    best_etcd("1 client", "p50_ms", True))
    n1 = p(native, "1 client", "p50_ms")
    if k1 is not None and e1 is not None:
        out.append(("single-client p50 over HTTP ≤ etcd's", k1 <= e1,
                    f"{k1} ms ({k1_name}) vs {e1} ms ({e1_name})"))
    if floor and n1 is not None:
        limit = round(3 * floor["commit_floor_ms"], 3)
        best = min(x for x in (n1, k1) if x is not None)
        out.append(("single-client p50 ≤ 3 × commit floor", best <= limit,
                    f"{best} ms (native {n1}, HTTP {k1}) vs {limit} ms"))
    for workload in WORKLOADS[:3]:
        (k, k_name), (e, e_name) = (best_http(workload, "ops_per_s", False),
                                    best_etcd(workload, "ops_per_s", False))
        if k is not None and e is not None:
            out.append((f"HTTP single records, {workload}: ≥ etcd", k >= e,
                        f"{_fmt(k)}/s ({k_name}) vs {_fmt(e)}/s ({e_name})"))
    kb, _ = best_http(WORKLOADS[3], "records_per_s", False)
    e_rates = [p(s, w, "ops_per_s") for s in etcd_http for w in WORKLOADS[:3]]
    e_best = max((r for r in e_rates if r is not None), default=None)
    if kb is not None and e_best is not None:
        out.append(("100-record batches ≥ 10 × etcd's best single-record rate",
                    kb >= 10 * e_best, f"{_fmt(kb)} records/s vs 10 × {_fmt(e_best)}/s"))
    fail = (kraft or {}).get("failover_kill_ms")
    if fail is not None:
        out.append(("kill -9 failover ≤ 2.5 s", fail <= 2500, f"{fail} ms"))
    graceful = (kraft or {}).get("handoff_ms")
    if graceful is not None:
        out.append(("graceful handoff ≤ 0.2 s", graceful <= 200, f"{graceful} ms"))
    vis = results.get("visibility")
    if vis and vis.get("visible_p50_ms") is not None:
        out.append(("commit → visible in Delta p50 ≤ 2 s", vis["visible_p50_ms"] <= 2000,
                    f"{vis['visible_p50_ms']} ms (p99 {vis['visible_p99_ms']} ms)"))
    return out


def app_targets(results: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """Issue 27's targets: the Spark application's HTTP path (the better of its two rows,
    named) against etcd's better row in the same interleaved run, and Delta visibility."""
    app = [s for s in results["systems"] if s["name"] in APP_ROWS]
    etcd = [s for s in results["systems"] if s["name"].startswith("etcd HTTP")]
    out: list[tuple[str, bool | None, str]] = []
    if app and etcd:
        for workload in WORKLOADS[:3]:
            (a, a_name), (e, e_name) = (best_of(app, workload, "ops_per_s", False),
                                        best_of(etcd, workload, "ops_per_s", False))
            if a is not None and e is not None:
                out.append((f"application HTTP, {workload}: ≥ 1.0 × etcd", a >= e,
                            f"{_fmt(a)}/s ({a_name}) vs {_fmt(e)}/s ({e_name}): "
                            f"{a / e:.2f}x"))
        for workload, key, what in (("1 client", "p50_ms", "p50 at 1 client"),
                                    ("256 clients", "p99_ms", "p99 at 256 clients")):
            (a, a_name), (e, e_name) = (best_of(app, workload, key, True),
                                        best_of(etcd, workload, key, True))
            if a is not None and e is not None:
                out.append((f"application HTTP {what} ≤ etcd's", a <= e,
                            f"{a} ms ({a_name}) vs {e} ms ({e_name})"))
    vis = results.get("visibility") or {}
    for table, prefix, limits in (("records", "", ((0.5, 1000),)),
                                  ("snapshot", "snapshot_", ((0.5, 3000), (0.99, 10000)))):
        for q, limit in limits:
            value = vis.get(f"{prefix}visible_p{round(q * 100)}_ms")
            if value is not None:
                out.append((f"commit → visible in `{table}` p{round(q * 100)} ≤ "
                            f"{limit / 1000:g} s", value <= limit, f"{value} ms"))
    return out


def _stall_cell(point: dict[str, Any] | None) -> str:
    stalls = (point or {}).get("disk_stalls")
    if not stalls:
        return "—"
    if not stalls["stalls"]:
        return f"0 (max {stalls['max_ms']:.1f} ms)"
    return f"{stalls['stalls']}: {stalls['stalled_ms']:.0f} ms, max {stalls['max_ms']:.0f} ms"


def _stall_lines(results: dict[str, Any]) -> list[str]:
    """Disk stalls seen by the independent probe (``bench.disk_stalls``) during each point."""
    rows = [s for s in results["systems"]
            if any("disk_stalls" in pt for pt in s.get("points", {}).values())]
    if not rows:
        return []
    lines = [
        "",
        f"Disk stalls during each measured point: durable writes of a separate probe process "
        f"(512 bytes into reserved space + fdatasync every {INTERVAL_MS:g} ms, on the file "
        f"system of the systems' data) that took over {STALL_MS:g} ms; their count, their "
        "time added up and the slowest. A stall holds every system's commits on this disk, "
        "and wrk (which corrects for coordinated omission) counts a stall of S ms once per "
        "request it held back, so one long stall can set a point's p99.",
        "",
        "| system | " + " | ".join(WORKLOADS) + " |",
        "| --- | " + " | ".join("---" for _ in WORKLOADS) + " |",
    ]
    for s in rows:
        lines.append(f"| {s['name']} | "
                     + " | ".join(_stall_cell(_point(s, w)) for w in WORKLOADS) + " |")
    return lines


def _rounds_note(rounds: int) -> str:
    if rounds <= 1:
        return ""
    return (f" kraft-spark and etcd ran side by side and took turns: {rounds} rounds of every "
            "point, the first system moving down each round; their figures are the medians of "
            "the rounds (PySyncObj and the Spark application: one run each).")


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"# Comparison bench, {meta['date']}",
        "",
        f"- Machine: {meta['machine']}",
        f"- Command: `{meta['command']}`",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}",
        f"- Each point: {meta['seconds']:g} s after a {meta['warmup_s']:g} s warm-up; "
        "100-byte values; wrk for every HTTP system, the asyncio client for native."
        + _rounds_note(meta.get("rounds", 1)),
    ]
    if meta.get("http_auth"):  # runs from before authentication have none
        lines.append(f"- Authentication: {meta['http_auth']}")
    lines.append("")
    floor = results.get("floor")
    if floor:
        lines += [
            "## Physical floor (same run)",
            "",
            f"- fsync, {floor.get('fsync_kind', 'of a 4 KiB append')}: "
            f"p50 {floor['fsync_p50_ms']} ms, p99 {floor['fsync_p99_ms']} ms"
            + (f" (the other kind: p50 {floor['other_fsync_p50_ms']} ms)"
               if floor.get("other_fsync_p50_ms") is not None else ""),
            f"- loopback TCP round trip (100 bytes, another process): p50 "
            f"{floor['rtt_p50_ms']} ms, p99 {floor['rtt_p99_ms']} ms",
            f"- commit floor (fsync + 2 round trips): {floor['commit_floor_ms']:.3f} ms",
            "",
        ]
    lines += [
        "## Results",
        "",
        "| system | 1 client p50 ms | 1 client p99 ms | 1 client ops/s | 16 clients ops/s "
        "| 256 clients ops/s | 100-record batches, records/s | kill -9 failover ms "
        "| graceful handoff ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in results["systems"]:
        one = _point(s, "1 client") or {}
        cells = [
            s["name"] + (f" ({s['note']})" if s.get("note") else ""),
            _fmt(one.get("p50_ms"), 2), _fmt(one.get("p99_ms"), 2),
            _fmt(one.get("ops_per_s")),
            _fmt((_point(s, "16 clients") or {}).get("ops_per_s")),
            _fmt((_point(s, "256 clients") or {}).get("ops_per_s")),
            _fmt((_point(s, WORKLOADS[3]) or {}).get("records_per_s")),
            _fmt(s.get("failover_kill_ms"), 1), _fmt(s.get("handoff_ms"), 1),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _stall_lines(results)
    errors = [(s["name"], w, pt["errors"]) for s in results["systems"]
              for w, pt in s.get("points", {}).items() if pt.get("errors")]
    if errors:
        lines += ["", "Failed requests (not counted in ops/s): " + "; ".join(
            f"{n}, {w}: {e}" for n, w, e in errors)]
    vis = results.get("visibility")
    if vis:
        lines += [
            "",
            "## The Spark application",
            "",
            f"- launch → first commit: {vis.get('launch_to_first_commit_s')} s",
            "- its HTTP rows above are measured once the first (cold) snapshot MERGE is done",
            f"- commit → visible in Delta `records` under {vis.get('rate')} appends/s: "
            f"p50 {vis.get('visible_p50_ms')} ms, p99 {vis.get('visible_p99_ms')} ms "
            f"({vis.get('measured')} records, {vis.get('delta_commits')} Delta commits)",
            f"- commit → visible in Delta `snapshot`: p50 {vis.get('snapshot_visible_p50_ms')} "
            f"ms, p99 {vis.get('snapshot_visible_p99_ms')} ms "
            f"({vis.get('snapshot_delta_commits')} Delta commits)",
        ]
    for title, checks in (("Targets (issue 27: the Spark application)", app_targets(results)),
                          ("Targets (issue 6: kraft-spark local)", targets(results))):
        if checks:
            lines += ["", f"## {title}", ""]
            for what, met, figures in checks:
                mark = "met" if met else "MISSED" if met is not None else "not measured"
                lines.append(f"- {what}: **{mark}** ({figures})")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in results["systems"] if s.get("points")]
    fig, (thr, lat) = plt.subplots(1, 2, figsize=(13, 5))
    width = 0.8 / max(1, len(systems))
    for i, s in enumerate(systems):
        values = []
        for w in WORKLOADS:
            point = _point(s, w)
            key = "records_per_s" if w == WORKLOADS[3] else "ops_per_s"
            # a point whose every round failed has no figure (None): drawn as no bar
            values.append((point.get(key) or 0) if point else 0)
        xs = [x + i * width for x in range(len(WORKLOADS))]
        thr.bar(xs, values, width, label=s["name"])
    thr.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(WORKLOADS))])
    thr.set_xticklabels(["1 client", "16 clients", "256 clients", "16 × 100-rec\nbatches"])
    thr.set_yscale("log")
    thr.set_ylabel("records committed per second (log)")
    thr.set_title("Throughput")
    thr.legend(fontsize=8)
    names = [s["name"] for s in systems]
    p50 = [(_point(s, "1 client") or {}).get("p50_ms") or 0 for s in systems]
    p99 = [(_point(s, "1 client") or {}).get("p99_ms") or 0 for s in systems]
    ys = range(len(systems))
    lat.barh([y + 0.2 for y in ys], p50, 0.4, label="p50")
    lat.barh([y - 0.2 for y in ys], p99, 0.4, label="p99")
    floor = results.get("floor")
    if floor:
        lat.axvline(floor["commit_floor_ms"], color="k", linestyle="--",
                    label=f"commit floor {floor['commit_floor_ms']:.3f} ms")
    lat.set_yticks(list(ys))
    lat.set_yticklabels(names, fontsize=8)
    lat.set_xscale("log")
    lat.set_xlabel("ms (log)")
    lat.set_title("Single-client commit latency")
    lat.legend(fontsize=8)
    meta = results["meta"]
    fig.suptitle(f"{meta['date']} — {meta['machine']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
