"""The KIP-595 consensus core: sans-I/O, deterministic, driven by a shell or the simulator."""

from kraft_spark.raft.config import QuorumConfig
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.log_api import OffsetAndEpoch, RaftLog
from kraft_spark.raft.ready import Outbound, Ready, Reply
from kraft_spark.raft.state import PersistedState, Role

__all__ = [
    "OffsetAndEpoch",
    "Outbound",
    "PersistedState",
    "QuorumConfig",
    "RaftCore",
    "RaftLog",
    "Ready",
    "Reply",
    "Role",
]
