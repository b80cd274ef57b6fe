"""KIP-853 in the Spark application: bring the quorum's voter set to the tasks it hosts.

The barrier stage hosts ``--voters`` tasks; the quorum's voter set is whatever its VotersRecords
say (initially the first ``initial-voters`` tasks, recorded in the data directory at the first
start). After every generation of voters reports in, the driver, one change at a time:

1. removes a voter whose disk was replaced (its task reports another directory id than the voter
   set holds): KIP-853's voter key is (id, directory id), so it is added again below, once it
   has caught up as an observer;
2. adds every task that is not a voter, once the leader sees it fetch with its directory id and
   caught up (the leader refuses it with REQUEST_TIMED_OUT before that: retried);
3. removes the voters that no task hosts any more (a smaller ``--voters``), the largest id first.

A voter is never removed while a task that should be a voter is missing, so the quorum keeps a
majority of live voters throughout (grow first, then shrink).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kraft_spark.client import ClientError, QuorumClient
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint, directory_text, parse_directory

log = logging.getLogger("driver.voters")
RETRY_S = 0.5


def reconcile(client: QuorumClient, tasks: dict[int, dict[str, Any]], target: int, *,
              stopping: threading.Event, say: Callable[[str], None],
              timeout_s: float = 300.0) -> list[str]:
    """Run changes until the voters are exactly ``range(target)`` with the tasks' directory
    ids; returns the changes made (``"added 3"``, ``"removed 4"``, ...)."""
    done: list[str] = []
    deadline = time.monotonic() + timeout_s
    wanted = set(range(target))
    while not stopping.is_set() and time.monotonic() < deadline:
        try:
            step = _next_change(client, tasks, wanted)
        except ClientError as exc:
            log.info("voter reconcile: %s; retrying", exc)
            stopping.wait(RETRY_S)
            continue
        if step is None:
            return done
        if step:
            done.append(step)
            say(f"voters: {step}")
        else:
            stopping.wait(RETRY_S)
    return done


def _next_change(client: QuorumClient, tasks: dict[int, dict[str, Any]],
                 wanted: set[int]) -> str | None:
    """One change (its description), "" when one must wait, None when nothing is left."""
    info = client.describe_quorum()
    voters = {v.replica_id: v.directory_id for v in info.voters}
    observers = {o.replica_id: o.directory_id for o in info.observers}
    for node_id, directory in sorted(voters.items()):
        hosted = tasks.get(node_id)
        if hosted is not None and directory and directory != hosted["directory_id"] \
                and observers.get(node_id) == hosted["directory_id"]:
            client.remove_voter(node_id, parse_directory(directory))
            return f"removed {node_id}@{directory} (its disk was replaced)"
    for node_id in sorted(wanted - voters.keys()):
        hosted = tasks.get(node_id)
        if hosted is None or observers.get(node_id) != hosted["directory_id"]:
            return ""  # not fetching yet
        endpoint = Endpoint("CONTROLLER", str(hosted["host"]), int(hosted["port"]))
        try:
            client.add_voter(node_id, parse_directory(hosted["directory_id"]), (endpoint,))
        except ClientError as exc:
            if "REQUEST_TIMED_OUT" in str(exc):
                return ""  # catching up, or the previous change still commits
            raise
        return f"added {node_id}@{hosted['directory_id']}"
    for node_id in sorted(voters.keys() - wanted, reverse=True):
        directory = voters[node_id] or directory_text(NIL_DIRECTORY)
        client.remove_voter(node_id, parse_directory(directory))
        return f"removed {node_id} (no task hosts it)"
    return None
