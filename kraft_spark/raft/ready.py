"""What the shell must do after feeding the core an input, and in which order.

After every input (``poll``, ``handle_request``, ``handle_response``, ``propose``...) the shell
calls ``RaftCore.take_ready()`` and carries out the Ready **in this order**:

1. ``persist``: write quorum-state durably (temp file, fsync, rename, fsync dir) **before**
   anything of this Ready leaves the node. A vote is granted only once it is on disk.
2. ``sends`` and ``replies``: transmit. ``sends`` are requests the core originated (match their
   responses back with ``request_id``); ``replies`` answer inbound requests by their ``token``.
3. ``flush_log``: make the log durable (``RaftLog.flush``), possibly later and off the event loop,
   grouping several Readies into one fsync; then call ``on_log_flushed(now, offset)``. No message
   in ``sends``/``replies`` claims durability of unflushed records: the core reports a log offset
   to anyone (Fetch offsets, its own share of the high watermark) only after ``on_log_flushed``.
4. ``snapshot_installed``: reload the state machine from that snapshot; then
   ``high_watermark``: when set, records below it are committed and may be applied / exposed.

``next_deadline_ms`` is the time by which ``poll`` must be called again even if nothing arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.raft.events import CoreEvent
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.messages import Request, Response
from kraft_spark.raft.state import PersistedState


@dataclass(frozen=True, slots=True)
class Outbound:
    """A request from this node to node ``dest``."""

    dest: int
    request_id: int
    message: Request


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to an inbound request, addressed by the shell's opaque ``token``."""

    token: object
    message: Response


@dataclass(slots=True)
class Ready:
    persist: PersistedState | None = None
    sends: list[Outbound] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    flush_log: bool = False
    high_watermark: int | None = None
    # KIP-630: a snapshot downloaded from the leader was installed (it is durable in the
    # snapshot store and the log now starts at its end offset): the shell loads its state
    # machine from it before applying anything at or after that offset.
    snapshot_installed: OffsetAndEpoch | None = None
    # Informational, for traces, metrics and checkers: the log was truncated to this offset.
    truncated_to: int | None = None
    # What happened in this step, as typed values (raft.events: role changes, truncations...).
    events: list[CoreEvent] = field(default_factory=list)
    next_deadline_ms: int = 0

    def is_empty(self) -> bool:
        return (
            self.persist is None
            and not self.sends
            and not self.replies
            and not self.flush_log
            and self.high_watermark is None
            and self.snapshot_installed is None
        )
