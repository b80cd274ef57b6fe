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


# The address users are given (what `make run` and `kraft-spark local --http-port` print) and
# the leader's own API (an address that moves at every election), per deployment: targets are
# judged on the first, the second is context (issue 39).
LOCAL_USER_HTTP = "kraft-spark HTTP"
LOCAL_LEADER_HTTP = "kraft-spark HTTP in the leader"
BATCH_TARGET_RECORDS_PER_S = 100_000
P50_MARGIN_MS = 0.2  # the user address's p50 at one client, over the leader's own API's


def user_address_targets(results: dict[str, Any], user_row: str, leader_row: str,
                         label: str) -> list[tuple[str, bool | None, str]]:
    """Issue 39's targets for one deployment, judged on its ``user_row`` (the address users
    are given) against etcd's better row in the same run; the leader's own API named beside
    each figure, as context."""
    systems = {s["name"]: s for s in results["systems"]}
    user, leader = systems.get(user_row), systems.get(leader_row)
    etcd = [s for s in results["systems"] if s["name"].startswith("etcd HTTP")]
    out: list[tuple[str, bool | None, str]] = []
    if user is None:
        return out

    def fig(system: dict[str, Any] | None, workload: str, key: str) -> float | None:
        point = _point(system, workload) if system is not None else None
        return None if point is None else point.get(key)

    def context(workload: str, key: str, unit: str) -> str:
        value = fig(leader, workload, key)
        shown = f"{value} ms" if unit == "ms" else f"{_fmt(value)}/s"
        return f"; the leader's own API {shown}" if value is not None else ""

    for workload in WORKLOADS[:3]:
        u = fig(user, workload, "ops_per_s")
        e, e_name = best_of(etcd, workload, "ops_per_s", False)
        if u is not None and e is not None:
            out.append((f"{label}, {workload}: ≥ 1.0 × etcd", u >= e,
                        f"{_fmt(u)}/s vs {_fmt(e)}/s ({e_name}): {u / e:.2f}x"
                        + context(workload, "ops_per_s", "/s")))
    u1, l1 = fig(user, "1 client", "p50_ms"), fig(leader, "1 client", "p50_ms")
    e1, e1_name = best_of(etcd, "1 client", "p50_ms", True)
    if u1 is not None and e1 is not None:
        out.append((f"{label}, p50 at 1 client ≤ etcd's", u1 <= e1,
                    f"{u1} ms vs {e1} ms ({e1_name})" + context("1 client", "p50_ms", "ms")))
    if u1 is not None and l1 is not None:
        out.append((f"{label}, p50 at 1 client within {P50_MARGIN_MS} ms of the leader's own "
                    "API", u1 <= l1 + P50_MARGIN_MS, f"{u1} ms vs {l1} ms"))
    u99 = fig(user, "256 clients", "p99_ms")
    e99, e99_name = best_of(etcd, "256 clients", "p99_ms", True)
    if u99 is not None and e99 is not None:
        out.append((f"{label}, p99 at 256 clients ≤ etcd's", u99 <= e99,
                    f"{u99} ms vs {e99} ms ({e99_name})" + context("256 clients", "p99_ms",
                                                                   "ms")))
    batch = fig(user, WORKLOADS[3], "records_per_s")
    if batch is not None:
        out.append((f"{label}, 100-record batches ≥ {_fmt(BATCH_TARGET_RECORDS_PER_S)} "
                     "records/s", batch >= BATCH_TARGET_RECORDS_PER_S,
                     f"{_fmt(batch)} records/s" + context(WORKLOADS[3], "records_per_s", "/s")))
    return out


def targets(results: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """kraft-spark local's targets (issues 6 and 39): (what, met? (None: not measured), the
    figures behind it). The HTTP ones are judged on the address `local` prints, its sidecar."""
    systems = {s["name"]: s for s in results["systems"]}
    kraft = systems.get(LOCAL_USER_HTTP)
    native = systems.get("kraft-spark native")
    floor = results.get("floor")
    out = user_address_targets(results, LOCAL_USER_HTTP, LOCAL_LEADER_HTTP,
                               "`local`'s HTTP address")
    n1 = (_point(native, "1 client") or {}).get("p50_ms") if native else None
    if floor and n1 is not None:
        limit = round(3 * floor["commit_floor_ms"], 3)
        out.append(("native client's p50 at 1 client ≤ 3 × commit floor", n1 <= limit,
                    f"{n1} ms vs {limit} ms"))
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
    """The Spark application's targets (issues 27 and 39): its HTTP ones judged on the
    driver's endpoint (the address `make run` prints), and Delta visibility."""
    out = user_address_targets(results, APP_HTTP, APP_LEADER_HTTP, "the application's address")
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
    titles = ("Targets (issues 27 and 39: the Spark application, at the address it prints)",
              "Targets (issues 6 and 39: kraft-spark local, at the address it prints)")
    for title, checks in zip(titles, (app_targets(results), targets(results)), strict=True):
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
