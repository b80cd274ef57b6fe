"""DescribeQuorum as ``kafka-metadata-quorum.sh`` shows it: the status summary and the replication
table (docs/concepts/protocol.md). Pure functions shared by the command line and the HTTP sidecar.

Conventions, as in Kafka's ``MetadataQuorumCommand``:

* MaxFollowerLag = the leader's log end offset − the lowest voter log end offset.
* MaxFollowerLagTimeMs = the leader's LastCaughtUpTimestamp − that voter's; 0 when that voter is
  the leader, -1 when either timestamp is unknown (-1).
* The replication table lists the leader first, then the other voters ("Follower"), then the
  observers, each in the order the leader reported them; Lag = leader end offset − replica end
  offset.

Where Kafka would fail (the leader is not among the voters, e.g. no leader is known) the values
that need the leader are -1 instead, and the table has no "Leader" row.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kraft_spark.client.types import QuorumInfo, ReplicaInfo

__all__ = [
    "REPLICATION_COLUMNS",
    "format_replication",
    "format_status",
    "replication_rows",
    "status_summary",
]

UNKNOWN: Final = -1
ZERO_DIRECTORY: Final = "AAAAAAAAAAAAAAAAAAAAAA"

# (dict key, column header) of the replication table, in display order.
REPLICATION_COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("nodeId", "NodeId"),
    ("directoryId", "DirectoryId"),
    ("logEndOffset", "LogEndOffset"),
    ("lag", "Lag"),
    ("lastFetchTimestamp", "LastFetchTimestamp"),
    ("lastCaughtUpTimestamp", "LastCaughtUpTimestamp"),
    ("status", "Status"),
)

# (dict key, label) of the status summary, in display order.
_STATUS_LINES: Final[tuple[tuple[str, str], ...]] = (
    ("clusterId", "ClusterId:"),
    ("leaderId", "LeaderId:"),
    ("leaderEpoch", "LeaderEpoch:"),
    ("highWatermark", "HighWatermark:"),
    ("maxFollowerLag", "MaxFollowerLag:"),
    ("maxFollowerLagTimeMs", "MaxFollowerLagTimeMs:"),
    ("currentVoters", "CurrentVoters:"),
    ("currentObservers", "CurrentObservers:"),
)
_STATUS_LABEL_WIDTH: Final = 24  # "MaxFollowerLagTimeMs:" (21) + 3 spaces, as Kafka prints it
_COLUMN_GAP: Final = "  "


def _leader(info: QuorumInfo) -> ReplicaInfo | None:
    for voter in info.voters:
        if voter.replica_id == info.leader_id:
            return voter
    return None


def status_summary(info: QuorumInfo) -> dict[str, Any]:
    """The ``describe --status`` fields, keyed as Kafka's JSON output names them."""
    leader = _leader(info)
    max_lag = UNKNOWN
    max_lag_time_ms = UNKNOWN
    if leader is not None:
        lowest_end = min(voter.log_end_offset for voter in info.voters)
        max_lag = leader.log_end_offset - lowest_end
        laggards = [voter for voter in info.voters if voter.log_end_offset == lowest_end]
        if any(voter.replica_id == leader.replica_id for voter in laggards):
            # Every voter has reached the leader's end offset (or is the leader itself).
            max_lag_time_ms = 0
        elif leader.last_caught_up_timestamp >= 0 and all(
            voter.last_caught_up_timestamp >= 0 for voter in laggards
        ):
            # Among voters tied at the lowest end offset, report the one caught up longest ago.
            oldest = min(voter.last_caught_up_timestamp for voter in laggards)
            max_lag_time_ms = leader.last_caught_up_timestamp - oldest
    return {
        "clusterId": info.cluster_id,
        "leaderId": info.leader_id,
        "leaderEpoch": info.leader_epoch,
        "highWatermark": info.high_watermark,
        "maxFollowerLag": max_lag,
        "maxFollowerLagTimeMs": max_lag_time_ms,
        # By id, as Kafka 4.x's tool prints them (KIP-853: id, directory id, endpoints); the
        # leader lists itself first in its response.
        "currentVoters": [_node(v, info) for v in sorted(info.voters, key=_replica_id)],
        "currentObservers": [_node(o, info) for o in sorted(info.observers, key=_replica_id)],
        # Only while a reassignment is in progress (kraft-spark's; Kafka's tool has none).
        **({"targetVoters": list(info.target_voters)} if info.target_voters else {}),
    }


def _replica_id(replica: ReplicaInfo) -> int:
    return replica.replica_id


def _node(replica: ReplicaInfo, info: QuorumInfo) -> dict[str, Any]:
    """A replica as Kafka's MetadataQuorumCommand.Node: its endpoints only when known."""
    node: dict[str, Any] = {"id": replica.replica_id, "directoryId": replica.directory_id}
    endpoints = info.endpoints.get(replica.replica_id)
    if endpoints:
        node["endpoints"] = list(endpoints)
    return node


def _node_text(node: dict[str, Any]) -> str:
    """Kafka 4.x's rendering: ``{"id": 1, "directoryId": "...", "endpoints": ["C://h:1"]}``,
    without the directory id while it is unknown (as Kafka 4.4 prints it)."""
    text = f'{{"id": {node["id"]}'
    if node.get("directoryId"):
        text += f', "directoryId": {json.dumps(node["directoryId"])}'
    if node.get("endpoints"):
        text += ', "endpoints": [' + ", ".join(json.dumps(e) for e in node["endpoints"]) + "]"
    return text + "}"


def _row(replica: ReplicaInfo, leader: ReplicaInfo | None, status: str) -> dict[str, Any]:
    lag = UNKNOWN if leader is None else leader.log_end_offset - replica.log_end_offset
    return {
        "nodeId": replica.replica_id,
        "directoryId": replica.directory_id,
        "logEndOffset": replica.log_end_offset,
        "lag": lag,
        "lastFetchTimestamp": replica.last_fetch_timestamp,
        "lastCaughtUpTimestamp": replica.last_caught_up_timestamp,
        "status": status,
    }


def replication_rows(info: QuorumInfo) -> list[dict[str, Any]]:
    """The ``describe --replication`` rows: leader, then the other voters, then observers."""
    leader = _leader(info)
    rows: list[dict[str, Any]] = []
    if leader is not None:
        rows.append(_row(leader, leader, "Leader"))
    rows.extend(
        _row(voter, leader, "Follower")
        for voter in info.voters
        if leader is None or voter.replica_id != leader.replica_id
    )
    rows.extend(_row(observer, leader, "Observer") for observer in info.observers)
    return rows


def _node_list(nodes: list[dict[str, Any]]) -> str:
    return "[" + ", ".join(_node_text(n) for n in nodes) + "]"


def format_status(summary: dict[str, Any]) -> str:
    """Render a :func:`status_summary` as ``describe --status`` prints it (no trailing newline)."""
    lines = []
    for key, label in _STATUS_LINES:
        value = summary[key]
        text = _node_list(value) if isinstance(value, list) else str(value)
        lines.append(f"{label:<{_STATUS_LABEL_WIDTH}}{text}")
    if "targetVoters" in summary:
        lines.append(f"{'TargetVoters:':<{_STATUS_LABEL_WIDTH}}{summary['targetVoters']}")
    return "\n".join(lines)


def _timestamp_cell(timestamp_ms: int, human_readable: bool, now_ms: int) -> str:
    if timestamp_ms < 0 or not human_readable:
        return str(timestamp_ms)
    # A timestamp slightly ahead of ``now_ms`` (the leader's clock runs ahead of ours) shows as 0.
    return f"{max(0, now_ms - timestamp_ms)} ms ago"


def format_replication(rows: list[dict[str, Any]], human_readable: bool, now_ms: int) -> str:
    """Render :func:`replication_rows` as ``describe --replication`` prints it: left-aligned
    columns two spaces apart, no trailing whitespace, no trailing newline. With
    ``human_readable`` the timestamps read "N ms ago" relative to ``now_ms``; unknown ones stay -1.
    """
    table: list[list[str]] = [[header for _, header in REPLICATION_COLUMNS]]
    for row in rows:
        cells = []
        for key, _ in REPLICATION_COLUMNS:
            value = row[key]
            if key in ("lastFetchTimestamp", "lastCaughtUpTimestamp"):
                cells.append(_timestamp_cell(int(value), human_readable, now_ms))
            elif key == "directoryId" and value is None:
                cells.append(ZERO_DIRECTORY)  # Kafka prints Uuid.ZERO_UUID
            else:
                cells.append(str(value))
        table.append(cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(REPLICATION_COLUMNS))]
    lines = (
        _COLUMN_GAP.join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in table
    )
    return "\n".join(line.rstrip() for line in lines)
