"""The client's timeouts, derived from the quorum's own settings (Kafka's names:
docs/operations/configuration.md).

A client in front of a quorum whose settings it knows (the HTTP sidecar of ``kraft-spark
local`` and of the Spark application, a node forwarding HTTP appends) waits as the quorum
does, not a fixed number of seconds:

* ``request_timeout_s`` = ``controller.quorum.request.timeout.ms`` (Kafka: 2 s): how long one
  request may take (an append is also told to give up at the leader after that long);
* ``retry_budget_s``: how long finding a leader may take = the time followers need to give up
  on a silent leader (``controller.quorum.fetch.timeout.ms`` + the fetch-timeout jitter), one
  election that may split (``controller.quorum.election.timeout.ms`` +
  ``controller.quorum.election.backoff.max.ms``) and one request to the new leader. Kafka's
  defaults give 2 + 0.5 + 1 + 1 + 2 = 6.5 s;
* ``leader_probe_s``: a request unanswered this long makes the client ask the other nodes
  whether a newer leader exists (``kraft_spark.client.leader_watch``): a quarter of the
  request timeout, at most 250 ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraft_spark.client.leader_watch import DEFAULT_PROBE_AFTER_S
from kraft_spark.raft.config import QuorumConfig


@dataclass(frozen=True)
class ClientTimeouts:
    request_timeout_s: float
    retry_budget_s: float
    leader_probe_s: float

    @classmethod
    def for_quorum(cls, config: QuorumConfig) -> ClientTimeouts:
        request_ms = config.request_timeout_ms
        failover_ms = (config.fetch_timeout_ms + config.max_fetch_jitter_ms
                       + config.election_timeout_ms
                       + config.election_backoff_max_ms + request_ms)
        return cls(request_timeout_s=request_ms / 1000, retry_budget_s=failover_ms / 1000,
                   leader_probe_s=min(DEFAULT_PROBE_AFTER_S, request_ms / 4000))

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AsyncQuorumClient`` / ``QuorumClient``."""
        return {"request_timeout_s": self.request_timeout_s,
                "retry_budget_s": self.retry_budget_s,
                "leader_probe_s": self.leader_probe_s}
