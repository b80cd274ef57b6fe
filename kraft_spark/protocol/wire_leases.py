"""LeaseCountdown (kraft-spark's api key 10001, ``protocol.messages_store``) ↔ wire bodies: a
follower's or an observer's HTTP or etcd API hands a lease keep-alive, or a TimeToLive query,
to the leader, whose countdown answers it (``kraft_spark.store.lease_keepalive``).

Only a trusted connection may ask (the rule of ``kraft.lease.op``, ``net.produce_gate``): the
request names the caller's credential (``by``), which the leader checks against the lease's
owner, so a principal that could name anyone must be one the node trusts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from kraft_spark.protocol import ApiKey, RequestHeader
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest, CountdownStatus
from kraft_spark.store.leases import MAX_NAME_CHARS

Body = dict[str, Any]
VERSION: Final = 0
MAX_TIMEOUT_MS: Final = 60_000


class Responder(Protocol):
    def respond(self, api_key: int, api_version: int, correlation_id: int,
                body: Body) -> None: ...


# A request a node serves beside its core: (connection, header, body, trusted).
SideHandler = Callable[[Any, RequestHeader, Body, bool], None]


def request_to_wire(msg: CountdownRequest) -> tuple[int, int, Body]:
    return ApiKey.LEASE_COUNTDOWN, VERSION, {
        "lease_id": msg.lease_id, "renew": msg.renew, "by": msg.by,
        "timeout_ms": msg.timeout_ms}


def request_from_wire(body: Body) -> CountdownRequest:
    """Raises ValueError naming what is wrong."""
    lease_id, by = body["lease_id"], body["by"]
    if lease_id < 0:
        raise ValueError(f"LeaseCountdown: lease id {lease_id} is negative")
    if by is not None and len(by) > MAX_NAME_CHARS:
        raise ValueError(f"LeaseCountdown: by is a name of at most {MAX_NAME_CHARS} characters")
    return CountdownRequest(lease_id, bool(body["renew"]), by,
                            max(1, min(int(body["timeout_ms"]), MAX_TIMEOUT_MS)))


def answer_to_wire(msg: CountdownAnswer) -> Body:
    return {"error_code": int(msg.status), "error_message": msg.message or None,
            "leader_id": msg.leader_id, "ttl_ms": msg.ttl_ms, "remaining_ms": msg.remaining_ms}


def answer_from_wire(body: Body) -> CountdownAnswer:
    """Raises ValueError for a status this quorum does not know."""
    return CountdownAnswer(CountdownStatus(body["error_code"]), body["leader_id"],
                           body["ttl_ms"], body["remaining_ms"], body["error_message"] or "")


def respond(conn: Responder, header: RequestHeader, answer: CountdownAnswer) -> None:
    conn.respond(header.api_key, header.api_version, header.correlation_id,
                 answer_to_wire(answer))


def not_here(conn: Responder, header: RequestHeader, _body: Body, _trusted: bool) -> None:
    """A node without a lease desk (an observer, a voter whose expirer is not running)."""
    respond(conn, header, CountdownAnswer(CountdownStatus.NOT_LEADER,
                                          message="this node keeps no lease countdowns"))
