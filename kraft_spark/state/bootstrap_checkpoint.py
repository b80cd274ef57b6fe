"""KIP-853's bootstrap checkpoint: ``00000000000000000000-0000000000.checkpoint``, written by
``kraft-spark format --standalone`` or ``--initial-controllers`` as Kafka's
``kafka-storage.sh format`` writes it (header, KRaftVersionRecord 1, VotersRecord, footer).

A node whose directory holds it starts with that voter set (kraft.version 1) instead of the
static ``controller.quorum.voters``; with ``--no-initial-controllers`` (the default) nothing is
written and the node follows as an observer until it is added.
"""

from __future__ import annotations

import time

from kraft_spark.log.checkpoints import partition_dir
from kraft_spark.log.fs import FileSystem, RealFileSystem
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.voter_records import encode_voters
from kraft_spark.raft.voter_set import Endpoint, Voter, VoterSet, parse_directory
from kraft_spark.state.snapshot_store import FileSnapshotStore

BOOTSTRAP_ID = OffsetAndEpoch(0, 0)


def parse_initial_controllers(text: str) -> VoterSet:
    """``ID@HOST:PORT:DIRID,...`` (Kafka's --initial-controllers); ValueError naming the item."""
    voters = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        ident, sep, rest = item.partition("@")
        host_port, _, directory = rest.rpartition(":")
        host, _, port = host_port.rpartition(":")
        try:
            if not sep or not host or not directory:
                raise ValueError
            voters.append(Voter(int(ident), parse_directory(directory),
                                (Endpoint("CONTROLLER", host.strip("[]"), int(port)),)))
        except ValueError:
            raise ValueError(f"--initial-controllers: expected ID@HOST:PORT:DIRECTORY_ID, got "
                             f"{item!r}") from None
    if not voters:
        raise ValueError("--initial-controllers: name at least one controller")
    return VoterSet(tuple(voters))


def write_bootstrap_checkpoint(log_dir: str, voters: VoterSet,
                               fs: FileSystem | None = None) -> str | None:
    """Write the checkpoint into ``log_dir``'s partition; None (and nothing written) when the
    partition already holds a snapshot (a formatted directory kept with --ignore-formatted)."""
    fs = fs or RealFileSystem()
    store = FileSnapshotStore(fs, partition_dir(log_dir))
    if store.latest_id() is not None:
        return None
    store.write(BOOTSTRAP_ID, [], b"", int(time.time() * 1000), voters=encode_voters(voters))
    store.add(BOOTSTRAP_ID)
    return store.path_of(BOOTSTRAP_ID)
