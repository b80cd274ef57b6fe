"""The documented settings under which each injected bug is measured: the arguments of
``kraft-spark sim`` that give the bug the faults and the clients it needs to show. The suite
(``tests/sim``) and ``kraft-spark sim-bugs`` both take them from here, so the figures in the
docs, the tests and a user's run are of the same thing."""

from __future__ import annotations

from typing import Final

from kraft_spark.sim.faults import MEMBERSHIP_FAULTS

# KIP-853's bugs need nodes to add: observers the reconfig faults turn into voters.
MEMBERSHIP: Final = ("--observers", "2", "--faults", MEMBERSHIP_FAULTS)
# Reads and conditional writes, checked for linearizability by porcupine.
STORE: Final = ("--voters", "3", "--observers", "1", "--store-clients", "5")
# A lock on leases held by contending clients, expired by skewed clocks.
LEASES: Final = ("--voters", "3", "--observers", "1", "--lease-clients", "4")
# Watches on every node, over leases of several keys (deleted together at one offset).
WATCHES: Final = (*LEASES, "--watch-clients", "6")

BUG_SETTINGS: Final[dict[str, tuple[str, ...]]] = {
    # Two candidates of one epoch, each having voted for itself (split-vote), meet a voter
    # that votes twice; pre-vote makes that moment rare under the default faults alone.
    "double-vote": ("--faults", "all,split-vote"),
    # The log's bugs: every default fault.
    "stale-log-vote": ("--faults", "all"),
    # Raft's figure 8 needs a leader cut off with records no other voter has, a new leader cut
    # off at once, and the old one elected again: leader-churn makes that common.
    "commit-old-epoch": ("--faults", "all,leader-churn"),
    "minority-hw": ("--faults", "all"),
    "ack-before-fsync": ("--faults", "all"),
    "no-truncate": ("--faults", "all"),
    "concurrent-voter-changes": MEMBERSHIP,
    "committed-voters-only": MEMBERSHIP,
    # A voter added before it caught up: partitions and pauses leave observers behind when
    # the reconfig fault asks to add them (with every membership fault: caught at the 6th to
    # 88th seed of six ranges once the checker judged catching up as KIP-836 does; with these:
    # the 1st to 17th of eight).
    "uncaught-voter": ("--observers", "2", "--faults", "reconfig,partition,pause,delay"),
    # The shell's bugs: snapshots and retention, and the fsyncgate bug under disk faults.
    "snapshot-past-hw": ("--faults", "all"),
    "retention-past-snapshot": ("--faults", "all"),
    "ignore-fsync-error": ("--faults", "disk-full,io-error,crash"),
    # Reads of a deposed leader need one cut off past an election (isolate-leader).
    "unconfirmed-read": ("--faults", "isolate-leader", *STORE),
    "read-before-apply": ("--faults", "all", *STORE),
    "outcome-before-apply": ("--faults", "all", *STORE),
    "follower-lease-expiry": LEASES,
    "deposed-leader-revoke": LEASES,
    # The watch hub's bugs: every default fault.
    "watch-drops-second-event": ("--faults", "all", *WATCHES),
    "resume-skips-offset-rest": ("--faults", "all", *WATCHES),
}

# A leader that forgets one follower's progress stalls while the other is out; the end-of-run
# liveness check also sees it when a voter lost its disk or log (it catches up, uncounted, at
# the heal), so those faults are left out: only liveness-partial can catch it here.
BUG_SETTINGS["uncounted-follower"] = (
    "--faults", "crash,restart,partition,drop,duplicate,reorder,delay,pause,one-way,disk-full,"
    "io-error,torn-write")
# A keep-alive after expiry: a holder back from a freeze keeps its old lease alive first.
BUG_SETTINGS["expired-lease-kept-alive"] = LEASES
# A keep-alive that leaves the lease's checkpoint in the log: a new leader counts from it. It
# shows when a leader changes while a lease kept alive past a checkpoint lives: longer runs.
BUG_SETTINGS["keepalive-keeps-checkpoint"] = (*LEASES, "--duration", "60")
# A Produce gate that lets any principal revoke any lease: intruders go after the holders'.
BUG_SETTINGS["produce-bypasses-lease-owner"] = (*LEASES, "--lease-intruders", "2")
