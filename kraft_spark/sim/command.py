"""``kraft-spark sim``: the deterministic simulator on the command line."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from kraft_spark.raft.core import RaftCore
from kraft_spark.sim.bugs import BUGS, STORE_BUGS, WATCH_BUGS
from kraft_spark.sim.coverage import summary as coverage_summary
from kraft_spark.sim.disk_faults import DISK_BUGS
from kraft_spark.sim.faults import parse_faults
from kraft_spark.sim.lease_expiry import LEASE_BUGS
from kraft_spark.sim.lease_intruder import GATE_BUG
from kraft_spark.sim.runner import measure_failover, run_seed, summarize
from kraft_spark.sim.snapshots import SHELL_BUGS
from kraft_spark.sim.store_clients import STORE_SHELL_BUGS
from kraft_spark.store.watch import WatchHub


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="run the consensus core under the deterministic simulator",
        description=(
            "Drive the real consensus core with a virtual clock, a simulated network and "
            "simulated disks, inject faults, and check the invariants after every event. "
            "Exit 0 when every seed is clean, 1 on the first violation."
        ),
    )
    parser.add_argument("--seeds", default="0:100", help="range A:B of seeds (B exclusive)")
    parser.add_argument("--seed", type=int, help="run this one seed (use with --trace)")
    parser.add_argument("--voters", type=int, default=3, choices=(1, 3, 5),
                        help="voters of the simulated quorum (default 3)")
    parser.add_argument("--observers", type=int, default=0,
                        help="observers beside them (default 0)")
    parser.add_argument(
        "--faults", default="all", help="all, none, or a comma list of: crash,restart,partition,"
        "drop,duplicate,reorder,delay,pause,one-way,disk-full,io-error,bit-rot,torn-write,"
        "disk-loss; opt-in (not in all): reconfig, reconfig-race, isolate-leader, leader-churn, "
        "split-vote",
    )  # fmt: skip
    parser.add_argument(
        "--duration", type=float, default=20.0, help="simulated seconds of faults per seed"
    )
    parser.add_argument("--trace", action="store_true", help="print every event")
    parser.add_argument(
        "--inject-bug", choices=sorted([*BUGS, *SHELL_BUGS, *DISK_BUGS, *STORE_BUGS,
                                        *STORE_SHELL_BUGS, *LEASE_BUGS, *WATCH_BUGS]),
        help="run a deliberately broken core (or shell: " + ", ".join([*SHELL_BUGS, *DISK_BUGS])
        + "; store bugs, with --store-clients: " + ", ".join([*STORE_BUGS, *STORE_SHELL_BUGS])
        + "; lease bugs, with --lease-clients: " + ", ".join(LEASE_BUGS)
        + "; watch bugs, with --watch-clients: " + ", ".join(WATCH_BUGS) + ")",
    )
    parser.add_argument(
        "--watch-clients", type=int, default=0, metavar="N",
        help="N clients also watch keys and prefixes on every node (fast and slow consumers, "
        "cut off, resumed by id after crashes and hops, reloading the state when a snapshot "
        "replaced what they missed); checked: each stream is the committed history of its "
        "keys, without gap or repeat",
    )
    parser.add_argument(
        "--lease-intruders", type=int, default=0, metavar="N",
        help="with --lease-clients: N Kafka-protocol principals outside super.users also try "
        "to revoke the holders' leases over Produce; the nodes' Produce gate must refuse "
        "them (counted as intrusions-refused), or the lock checker sees two holders",
    )
    parser.add_argument(
        "--lease-clients", type=int, default=0, metavar="N",
        help="N clients also contend for a lock on leases (grant, keep alive, revoke, or "
        "freeze past the TTL) while the leaders expire leases by skewed clocks; checked: "
        "no two holders overlap, fencing tokens rise, no kept-alive key expires",
    )
    parser.add_argument(
        "--store-clients", type=int, default=0, metavar="N",
        help="N clients also read and compare-and-set keys; each seed's history is checked "
        "for linearizability with porcupine (needs Go). Add the fault isolate-leader "
        "(--faults all,isolate-leader) to meet deposed leaders that still answer",
    )
    parser.add_argument(
        "--no-snapshots", action="store_true",
        help="no snapshots or retention (KIP-630); by default every node snapshots and "
        "deletes old log often, and catches up with FetchSnapshot",
    )
    parser.add_argument(
        "--log",
        choices=("memory", "segmented"),
        default="memory",
        help="the nodes' log: an in-memory model (fast) or the real Kafka-format segmented log "
        "on a simulated file system that loses unsynced writes and tears the last one",
    )
    parser.add_argument(
        "--measure",
        choices=("failover",),
        help="instead of checking, measure leader crash and graceful handoff to next commit",
    )
    parser.set_defaults(func=_run)


# Bounds that keep a typo from running for ever (or overflowing): a million seeds is about six
# hours here; an hour of simulated faults per seed and 50 observers are far beyond any use.
MAX_SEEDS = 1_000_000
MAX_OBSERVERS = 50
MAX_DURATION_S = 3600.0
MAX_STORE_CLIENTS = 50


def _parse_seeds(args: argparse.Namespace) -> range:
    from kraft_spark.errors import CommandError

    if args.seed is not None:
        return range(args.seed, args.seed + 1)
    try:
        a, b = (int(x) for x in args.seeds.split(":"))
    except ValueError:
        raise CommandError(f"--seeds must look like A:B (e.g. 0:200), got {args.seeds!r}") from None
    if b <= a:
        raise CommandError(f"--seeds {args.seeds}: B must be greater than A")
    if b - a > MAX_SEEDS:
        raise CommandError(f"--seeds {args.seeds}: at most {MAX_SEEDS:,} seeds per run")
    return range(a, b)


def _run(args: argparse.Namespace) -> int:
    from kraft_spark.errors import CommandError

    seeds = _parse_seeds(args)
    try:
        faults = parse_faults(args.faults)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if not 0 <= args.observers <= MAX_OBSERVERS:
        raise CommandError(f"--observers must be from 0 to {MAX_OBSERVERS}")
    if not 0 < args.duration <= MAX_DURATION_S:  # also refuses nan
        raise CommandError(
            f"--duration must be more than 0 and at most {MAX_DURATION_S:g} simulated seconds"
        )
    if args.measure == "failover":
        return _measure(seeds, args.voters)
    bug = args.inject_bug
    core_class: type[RaftCore] = BUGS.get(bug, STORE_BUGS.get(bug, RaftCore))
    shell_bug = bug if bug in SHELL_BUGS or bug in DISK_BUGS else None
    store_bug = bug if bug in STORE_SHELL_BUGS else None
    if not 0 <= args.store_clients <= MAX_STORE_CLIENTS:
        raise CommandError(f"--store-clients must be from 0 to {MAX_STORE_CLIENTS}")
    if (bug in STORE_BUGS or store_bug) and not args.store_clients:
        raise CommandError(f"--inject-bug {bug} is caught by the store clients' histories: "
                           "add --store-clients 5")
    lease_bug = bug if bug in LEASE_BUGS else None
    if not 0 <= args.lease_clients <= MAX_STORE_CLIENTS:
        raise CommandError(f"--lease-clients must be from 0 to {MAX_STORE_CLIENTS}")
    if lease_bug and not args.lease_clients:
        raise CommandError(f"--inject-bug {bug} is caught by the lease holders' checker: "
                           "add --lease-clients 4")
    if not 0 <= args.lease_intruders <= MAX_STORE_CLIENTS or (
            args.lease_intruders and not args.lease_clients):
        raise CommandError(f"--lease-intruders must be from 0 to {MAX_STORE_CLIENTS}, with "
                           "--lease-clients (they go after the holders' leases)")
    if bug == GATE_BUG and not args.lease_intruders:
        raise CommandError(f"--inject-bug {bug} lets intruders through the Produce gate: add "
                           "--lease-intruders 2")
    watch_bug = bug if bug in WATCH_BUGS else None
    if not 0 <= args.watch_clients <= MAX_STORE_CLIENTS:
        raise CommandError(f"--watch-clients must be from 0 to {MAX_STORE_CLIENTS}")
    if watch_bug and not args.watch_clients:
        raise CommandError(f"--inject-bug {bug} is caught by the watch checker: add "
                           "--watch-clients 6")
    if args.watch_clients and args.no_snapshots:
        raise CommandError("--watch-clients reads the nodes' state machines: drop "
                           "--no-snapshots")
    if args.lease_clients and args.no_snapshots:
        raise CommandError("--lease-clients reads the nodes' state machines: drop "
                           "--no-snapshots")
    if args.store_clients:
        from kraft_spark.lincheck import go_available

        if args.no_snapshots:
            raise CommandError("--store-clients reads the nodes' state machines: drop "
                               "--no-snapshots")
        reason = go_available()
        if reason is not None:
            raise CommandError(f"--store-clients needs the porcupine checker: {reason}")
    if shell_bug in SHELL_BUGS and args.no_snapshots:
        raise CommandError(f"--inject-bug {shell_bug} needs snapshots (drop --no-snapshots)")
    echo = print if args.trace else None
    started = time.monotonic()
    events = commits = elections = 0
    taken = installed = advanced = changes = store_ops = holds = holder_reads = 0
    coverage: Counter[str] = Counter()
    watched: Counter[str] = Counter()
    intrusions_refused = 0
    for n, seed in enumerate(seeds, 1):
        result = run_seed(
            seed,
            voters=args.voters,
            observers=args.observers,
            faults=faults,
            duration_s=args.duration,
            core_class=core_class,
            echo=echo,
            segmented_log=args.log == "segmented",
            snapshots=not args.no_snapshots,
            shell_bug=shell_bug,
            store_clients=args.store_clients,
            store_bug=store_bug,
            lease_clients=args.lease_clients,
            lease_bug=lease_bug,
            watch_clients=args.watch_clients,
            watch_hub=WATCH_BUGS[watch_bug] if watch_bug else WatchHub,
            lease_intruders=args.lease_intruders,
        )
        intrusions_refused += result.intrusions_refused
        if result.snapshots is not None:
            taken += result.snapshots.taken
            installed += result.snapshots.installed
            advanced += result.snapshots.starts_advanced
        events += result.events
        changes += result.voter_changes
        coverage.update(result.coverage)
        store_ops += sum(op["return_ns"] is not None for op in result.history)
        holds += result.lease_holds
        holder_reads += result.lease_reads
        if result.watches is not None:
            watched.update(vars(result.watches))
        commits += result.commits
        elections += result.elections
        if result.violation is not None:
            v = result.violation
            print(f"VIOLATION seed={seed} invariant={v.invariant}: {v.detail}")
            print(f"recent trace of seed {seed}:")
            for line in result.recent_trace:
                print("  " + line)
            print(
                f"replay: kraft-spark sim --seed {seed} --voters {args.voters} "
                f"--observers {args.observers} --faults {args.faults} --duration {args.duration}"
                + (f" --inject-bug {args.inject_bug}" if args.inject_bug else "")
                + (" --log segmented" if args.log == "segmented" else "")
                + (" --no-snapshots" if args.no_snapshots else "")
                + (f" --store-clients {args.store_clients}" if args.store_clients else "")
                + (f" --lease-clients {args.lease_clients}" if args.lease_clients else "")
                + (f" --lease-intruders {args.lease_intruders}" if args.lease_intruders else "")
                + (f" --watch-clients {args.watch_clients}" if args.watch_clients else "")
                + " --trace"
            )
            print(f"seeds={n} events={events} commits={commits} elections={elections} violations=1")
            return 1
        if not args.trace and len(seeds) > 1 and n % 50 == 0:
            rate = n / max(time.monotonic() - started, 1e-9)
            print(f"... {n}/{len(seeds)} seeds clean ({rate:.1f} seeds/s)", file=sys.stderr)
    print(
        f"seeds={len(seeds)} events={events} commits={commits} elections={elections} violations=0"
        + ("" if args.no_snapshots else
           f" snapshots={taken} installed={installed} log-starts-advanced={advanced}")
        + (f" voter-changes={changes} {coverage_summary(coverage)}"
           if "reconfig" in faults else "")
        + (f" store-ops-checked={store_ops}" if args.store_clients else "")
        + (f" lock-holds={holds} holder-reads={holder_reads}" if args.lease_clients else "")
        + (f" intrusions-refused={intrusions_refused}" if args.lease_intruders else "")
        + (f" watch-events={watched['delivered']} watch-resumes={watched['resumes']} "
           f"watch-cutoffs={watched['cutoffs']} watch-resets={watched['resets']}"
           if args.watch_clients else "")
    )
    return 0


def _measure(seeds: range, voters: int) -> int:
    crash: list[float] = []
    graceful: list[float] = []
    for seed in seeds:
        crash += [s.ms_to_commit for s in measure_failover(seed, voters=voters, kind="crash")]
        graceful += [s.ms_to_commit for s in measure_failover(seed, voters=voters, kind="graceful")]
    print(f"leader kill -9 -> next commit:        {summarize(crash)}")
    print(f"graceful resignation -> next commit:  {summarize(graceful)}")
    return 0
