"""Registers the ``bench`` benchmarks of this package with the ``kraft-spark`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from bench.compare import SYSTEMS
from kraft_spark.errors import CommandError
from kraft_spark.log.commands import bench_subparsers


def register(subparsers: Any) -> None:
    quorum = bench_subparsers(subparsers).add_parser(
        "quorum", help="native client against a local 3-voter quorum (latency, throughput, "
        "failover)",
    )
    quorum.add_argument("--seconds", type=float, default=10.0, help="per workload (default 10)")
    quorum.add_argument("--base-port", type=int, default=19500,
                        help="the quorum's first port (default 19500)")
    quorum.add_argument("--json", action="store_true", help="end with one JSON line")
    quorum.set_defaults(func=_bench_quorum)

    app = bench_subparsers(subparsers).add_parser(
        "app", help="the Spark application: launch to first commit, commit to Delta visibility",
    )
    app.add_argument("--seconds", type=float, default=30.0, help="steady-load duration")
    app.add_argument("--rate", type=float, default=100.0, help="appends per second")
    app.add_argument("--http-port", type=int, default=18181,
                     help="the application's HTTP port (default 18181)")
    app.set_defaults(func=_bench_app)

    snaps = bench_subparsers(subparsers).add_parser(
        "snapshots", help="KIP-630: state memory, restart and catch-up against history, disk "
        "held, commit latency while snapshots are written",
    )
    snaps.add_argument("--histories", default="100000,1000000",
                       help="comma list of history lengths in records (add 10000000 for the "
                            "long run: ~1.3 GB of log and several minutes)")
    snaps.add_argument("--json", action="store_true", help="end with one JSON line")
    snaps.set_defaults(func=_bench_snapshots)

    gray = bench_subparsers(subparsers).add_parser(
        "gray", help="leader kill -9, freeze (SIGSTOP) and one-sided cut under load: time to "
        "the next acknowledged append on every client path, nothing lost or duplicated",
    )
    gray.add_argument("--faults", default="kill,freeze,cut",
                      help="comma list of kill, freeze, cut (default all; cut needs root and "
                           "iptables)")
    gray.add_argument("--hold-seconds", type=float, default=8.0,
                      help="how long a freeze or a cut lasts (default 8)")
    gray.add_argument("--app", action="store_true",
                      help="also the Spark application's endpoint (starts Spark)")
    gray.add_argument("--base-port", type=int, default=19700,
                      help="the quorum's first port (default 19700)")
    gray.add_argument("--json", action="store_true", help="end with one JSON line")
    gray.set_defaults(func=_bench_gray)

    voters = bench_subparsers(subparsers).add_parser(
        "voters", help="KIP-853: time to add / remove a voter, appends during a change, "
        "failover with 5 voters (local quorum plus two observers)",
    )
    voters.add_argument("--rounds", type=int, default=3, help="grow/shrink rounds (default 3)")
    voters.add_argument("--base-port", type=int, default=19800,
                        help="the quorum's first port (default 19800)")
    voters.add_argument("--json", action="store_true", help="end with one JSON line")
    voters.set_defaults(func=_bench_voters)

    compare = bench_subparsers(subparsers).add_parser(
        "compare", help="kraft-spark against etcd and PySyncObj, with the physical floor "
        "(installs etcd, wrk and PySyncObj if missing)",
    )
    compare.add_argument("--seconds", type=float, default=10.0, help="per point (default 10)")
    compare.add_argument("--warmup", type=float, default=2.0, help="per point (default 2)")
    compare.add_argument("--rounds", type=int, default=3,
                         help="kraft-spark's and etcd's points are run this many times, the "
                              "systems taking turns; each figure is the median (default 3)")
    compare.add_argument("--systems", default=",".join(SYSTEMS),
                         help=f"comma-separated subset of {','.join(SYSTEMS)}")
    compare.add_argument("--base-port", type=int, default=19600,
                         help="ports base-port .. base-port+60 are used (default 19600)")
    compare.add_argument("--visibility-seconds", type=float, default=30.0,
                         help="steady load for the Delta visibility point (default 30)")
    compare.add_argument("--out", default="bench/results", help="results directory")
    compare.set_defaults(func=_bench_compare)

    store = bench_subparsers(subparsers).add_parser(
        "store", help="the store API against etcd's: reads by key (linearizable and "
        "serializable, 1/16/256 connections), compare-and-set under contention, watch delivery "
        "with 1,000 watchers (installs etcd and wrk if missing)",
    )
    store.add_argument("--seconds", type=float, default=5.0, help="per point (default 5)")
    store.add_argument("--watchers", type=int, default=1000,
                       help="watchers of the watch-delivery point (default 1,000)")
    store.add_argument("--base-port", type=int, default=19900,
                       help="the systems' first port (default 19900)")
    store.add_argument("--out", default="bench/results", help="results directory")
    store.set_defaults(func=_bench_store)

    cli = bench_subparsers(subparsers).add_parser(
        "cli", help="one short command's start and request: kraft-spark kv get/put beside "
        "etcdctl get/put on the same local quorum, --help, the interpreter's floor",
    )
    cli.add_argument("--rounds", type=int, default=20, help="runs of each command (default 20)")
    cli.add_argument("--base-port", type=int, default=20200,
                     help="ports base-port .. base-port+22 are used (default 20200)")
    cli.add_argument("--out", default="bench/results", help="results directory")
    cli.set_defaults(func=_bench_cli)

    leases = bench_subparsers(subparsers).add_parser(
        "leases", help="leases and locks against etcd's: 10,000 leases kept alive by 1,000 "
        "clients (keep-alives/s, latency, leader CPU, leases lost), lock throughput under "
        "contention with each system's CLI and in-process clients (installs etcd if missing)",
    )
    leases.add_argument("--leases", type=int, default=10_000, help="default 10,000")
    leases.add_argument("--clients", type=int, default=1000, help="default 1,000")
    leases.add_argument("--ttl", type=int, default=10,  # etcd grants whole seconds
                        help="lease TTL in s (default 10)")
    leases.add_argument("--seconds", type=float, default=20.0,
                        help="keep-alive window per system (default 20)")
    leases.add_argument("--lock-seconds", type=float, default=10.0,
                        help="per lock point (default 10)")
    leases.add_argument("--contenders", default="1,8,32",
                        help="comma list of lock contender counts (default 1,8,32)")
    leases.add_argument("--quick", action="store_true",
                        help="a short smoke run (1,000 leases, 100 clients, 10 s, locks 3 s at "
                             "1 and 8 contenders), not the issue's figures")
    leases.add_argument("--base-port", type=int, default=20100,
                        help="ports base-port .. base-port+25 are used (default 20100)")
    leases.add_argument("--out", default="bench/results", help="results directory")
    leases.set_defaults(func=_bench_leases)

    etcd_load = bench_subparsers(subparsers).add_parser(
        "etcd-load", help="etcd's own load generator (etcd's tools/benchmark, built with go) "
        "against kraft-spark's etcd API and etcd: put and linearizable range at 1, 16 and 256 "
        "clients; requests/s, p50/p99, server CPU per request (installs etcd if missing)",
    )
    etcd_load.add_argument("--total", type=int, default=10_000,
                           help="requests per cell and system (default 10,000)")
    etcd_load.add_argument("--rounds", type=int, default=3,
                           help="every cell this many times, the systems taking turns; each "
                                "figure is the median (default 3)")
    etcd_load.add_argument("--etcd-members", type=int, choices=(1, 3), default=3,
                           help="etcd's members (default 3, like kraft-spark's voters)")
    etcd_load.add_argument("--systems", default="kraft-spark,etcd",
                           help="comma-separated subset of kraft-spark,etcd")
    etcd_load.add_argument("--base-port", type=int, default=20300,
                           help="ports base-port .. base-port+40 are used (default 20300)")
    etcd_load.add_argument("--out", default="bench/results", help="results directory")
    etcd_load.set_defaults(func=_bench_etcd_load)


def _bench_etcd_load(args: argparse.Namespace) -> int:
    from bench.etcd_load import SYSTEMS, main

    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        raise CommandError(f"unknown system(s) {', '.join(unknown) or '(none)'}; choose from "
                           f"{', '.join(SYSTEMS)}")
    if args.total < 1 or args.rounds < 1:
        raise CommandError("--total and --rounds must be at least 1")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        return main(total=args.total, rounds=args.rounds, etcd_members=args.etcd_members,
                    base_port=args.base_port, out_dir=args.out, log=say, systems=systems)
    except RuntimeError as exc:  # no Go / module proxy, a system that did not start
        raise CommandError(str(exc)) from None


def _bench_leases(args: argparse.Namespace) -> int:
    from bench.leases import main

    if args.quick:
        args.leases, args.clients, args.seconds = 1000, 100, 10.0
        args.lock_seconds, args.contenders = 3.0, "1,8"
    try:
        contenders = [int(c) for c in args.contenders.split(",") if c.strip()]
    except ValueError:
        raise CommandError(f"--contenders must be a comma list of integers, got "
                           f"{args.contenders!r}") from None
    if args.leases < 1 or args.clients < 1 or args.clients > args.leases:
        raise CommandError("--leases and --clients must be at least 1, and no more clients "
                           "than leases")
    if args.ttl < 3:  # etcd's smallest TTL with its default timings is 1.5 s; 3 s keeps TTL/3 ≥ 1 s
        raise CommandError(f"--ttl must be at least 3 s, not {args.ttl}")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return main(leases=args.leases, clients=args.clients, ttl_s=args.ttl, seconds=args.seconds,
                lock_seconds=args.lock_seconds, contenders=contenders or [1],
                base_port=args.base_port, out_dir=args.out, log=say)


def _bench_cli(args: argparse.Namespace) -> int:
    from bench.cli_start import main

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return main(args.rounds, args.base_port, args.out, say)


def _bench_store(args: argparse.Namespace) -> int:
    from bench.store import main

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return main(args.seconds, args.watchers, args.base_port, args.out, say)


def _bench_voters(args: argparse.Namespace) -> int:
    from bench.membership import format_result, run

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = run(args.rounds, args.base_port, say)
    print(format_result(result))
    if args.json:
        print(json.dumps(result))
    return 0


def _bench_quorum(args: argparse.Namespace) -> int:
    from bench.native import format_table, run_native

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows = asyncio.run(run_native(args.seconds, args.base_port, log))
    print(format_table(rows))
    if args.json:
        print(json.dumps(rows))
    return 0


def _bench_snapshots(args: argparse.Namespace) -> int:
    from bench.snapshots import run_all

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        histories = [int(h) for h in args.histories.split(",")]
    except ValueError:
        raise CommandError(
            f"--histories must be a comma list of integers, got {args.histories!r}"
        ) from None
    result = run_all(histories, log)
    if args.json:
        print(json.dumps(result))
    return 0


def _bench_gray(args: argparse.Namespace) -> int:
    from bench.gray import format_table, run_gray

    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in faults if f not in ("kill", "freeze", "cut")]
    if unknown or not faults:
        raise CommandError(f"unknown fault(s) {', '.join(unknown) or '(none)'}; choose from "
                           "kill, freeze, cut")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = run_gray(faults, args.app, args.hold_seconds, args.base_port, log)
    print(format_table(results))
    if args.json:
        print(json.dumps(results))
    return 0


def _bench_app(args: argparse.Namespace) -> int:
    from bench.app_bench import run_app_bench

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = run_app_bench(args.seconds, args.rate, args.http_port, log)
    print(json.dumps(result))
    return 0


def _bench_compare(args: argparse.Namespace) -> int:
    from bench.compare import command_line, run_compare
    from bench.report import markdown

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        raise CommandError(f"unknown system(s) {', '.join(unknown) or '(none)'}; choose from "
                           f"{', '.join(SYSTEMS)}")

    if args.rounds < 1:
        raise CommandError(f"--rounds must be at least 1, not {args.rounds}")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = run_compare(seconds=args.seconds, warmup_s=args.warmup, systems=systems,
                          rounds=args.rounds,
                          base_port=args.base_port, out_dir=args.out,
                          visibility_s=args.visibility_seconds, command=command_line(), log=log)
    print(markdown(results))
    return 0
