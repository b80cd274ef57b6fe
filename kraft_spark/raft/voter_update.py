"""KIP-853's UpdateRaftVoter (api key 82): a voter's listeners follow the voter.

A VotersRecord names where each voter listens. When a voter comes back on another port or
host (a Spark executor of a new barrier generation, a moved process), the record is stale.
The voter itself asks the leader to correct it:

* **Follower side.** A voter of a dynamic set (kraft.version 1) that follows a leader it has
  fetched from, and whose entry in the set in force lists other endpoints than the ones it
  listens on (``local_endpoints``, given by the shell; empty: unknown, never sent), sends
  UpdateRaftVoter to the leader, at most once per ``UPDATE_RETRY_MS`` and never with a request
  still out. The leader's VotersRecord then reaches it by Fetch, which ends the matter.
* **Leader side** (Kafka's UpdateVoterHandler, in its order; ``VoterChanges`` in membership.py):
  only the leader, one voter change at a time (as AddRaftVoter: ``VoterChanges._precheck``);
  with a static set (kraft.version 0) there is nothing to update (endpoints come from
  ``controller.quorum.voters``): answered NONE; the voter must be in the set with that
  directory id (VOTER_NOT_FOUND), name at least one listener (INVALID_REQUEST), and support
  kraft.version 1 (INVALID_REQUEST). Endpoints equal to the set's are answered NONE at once;
  otherwise a VotersRecord with the new endpoints is appended and the request answered when it
  commits, like any change.
"""

from __future__ import annotations

from kraft_spark.raft.base import CoreState, InFlight
from kraft_spark.raft.events import VoterEvent, VoterStep
from kraft_spark.raft.messages import ErrorCode, UpdateVoterRequest, VoterChangeResponse

UPDATE_RETRY_MS = 5_000


class OwnEndpoints:
    """The follower side: a voter asking the leader to list the endpoints it listens on
    (``core.local_endpoints``). The leader side is ``VoterChanges.handle_update_voter``."""

    def __init__(self, core: CoreState) -> None:
        self.core = core
        self.next_voter_update_at = 0
        self.voter_update_in_flight = False

    def maybe_update(self) -> None:
        """Called on a follower's poll: ask the leader to correct our listed endpoints."""
        core = self.core
        following = core.following  # None unless Follower
        if (
            not core.local_endpoints
            or following is None
            or not following.fetched
            or not core.history.dynamic
            or self.voter_update_in_flight
            or core.now < self.next_voter_update_at
        ):
            return
        voter = core.voter_set.get(core.node_id)
        if voter is None or not voter.matches(core.node_id, core.directory_id):
            return
        if voter.endpoints == core.local_endpoints:
            return
        self.voter_update_in_flight = True
        self.next_voter_update_at = core.now + UPDATE_RETRY_MS
        core.events.append(VoterEvent(
            VoterStep.ENDPOINTS_ASKED,
            f"our listed endpoints {[str(e) for e in voter.endpoints]} are not ours "
            f"{[str(e) for e in core.local_endpoints]}: asking leader {core.leader_id}"))
        request = UpdateVoterRequest(
            core.cluster_id, core.epoch, core.node_id, core.directory_id, core.local_endpoints)
        core.send(core.leader_id, "update", request, core.config.request_timeout_ms)

    def handle_response(self, resp: VoterChangeResponse) -> None:
        self.voter_update_in_flight = False
        if resp.error != ErrorCode.NONE:
            self.core.events.append(VoterEvent(VoterStep.ENDPOINTS_REFUSED,
                                               f"{resp.error.name} {resp.message}"))

    def on_lost(self, pending: InFlight) -> None:
        """The request failed or timed out: retried after ``UPDATE_RETRY_MS``."""
        self.voter_update_in_flight = False
