"""``AsyncQuorumClient`` and its blocking twin ``QuorumClient``.

Finding the leader: the client starts from any bootstrap endpoint. A Produce answered with
NOT_LEADER_OR_FOLLOWER names the leader and, as KIP-951's ``NodeEndpoints``, its address; other
requests simply move on to the next known endpoint. While no node names a leader (an election
is in progress) the client backs off exponentially until its retry budget is spent, then raises
``NoLeaderError``.

Exactly-once appends: every append goes out on a *producer lane* ``(producer id, next
sequence)`` with at most one batch in flight per lane, so sequences reach the leader in order.
A batch that failed in any way is retried on the same lane with the same sequence: if an
earlier attempt was appended (even by a leader that has since been replaced) the leader
recognises the duplicate from the log-derived producer table and answers with the original
offsets, so a retry never appends twice. Concurrent appends use as many lanes as are busy. A
lane whose outcome stayed unknown when the budget ran out is retired (``CommitTimeoutError``).
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kraft_spark.client.coalesce import AppendCoalescer, sending
from kraft_spark.client.errors import (
    AuthenticationError,
    ClientError,
    ClusterIdMismatchError,
    CommitTimeoutError,
    InvalidRecordError,
    NoLeaderError,
    NotKafkaEndpointError,
    OffsetBelowLogStartError,
    RecordTooLargeError,
    key_reused,
    snapshot_label,
)
from kraft_spark.client.leader_watch import DEFAULT_PROBE_AFTER_S, LeaderMovedError, LeaderWatch
from kraft_spark.client.security import needs_authentication
from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
    CommittedRecord,
    QuorumInfo,
    ReplicaInfo,
    stamped,
)
from kraft_spark.client.voter_changes import VoterChangesMixin
from kraft_spark.protocol import METADATA_TOPIC, ApiKey, ErrorCode
from kraft_spark.protocol.sasl_plain import PlainCredentials
from kraft_spark.protocol.wire import ACKS_ALL, decode_record_set, first_partition, produce_batch
from kraft_spark.raft.producers import key_producer_id
from kraft_spark.raft.records import Batch, Record
from kraft_spark.raft.voter_set import NIL_DIRECTORY, directory_text
from kraft_spark.transport import Connection, TransportError

T = TypeVar("T")

CLIENT_REPLICA_ID = -1
# An endpoint that answered in HTTP is not tried again for this long.
NOT_KAFKA_SKIP_S = 60.0
# Errors after which another node (or a later attempt) may succeed.
_RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_CONTROLLER,
}


def parse_bootstrap(items: Sequence[str] | str) -> list[tuple[str, int]]:
    """``["h:p", ...]`` or ``"h:p,h:p"`` → endpoints; raises ``ValueError`` naming the bad one."""
    if isinstance(items, str):
        items = items.split(",")
    out: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad bootstrap endpoint {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap endpoints given: pass host:port[,host:port...]")
    return out


@dataclass
class _Lane:
    producer_id: int
    next_sequence: int = 0


class AsyncQuorumClient(VoterChangesMixin):
    """A client of the quorum. Create and use it inside one running event loop."""

    def __init__(
        self,
        bootstrap: Sequence[str] | str,
        *,
        cluster_id: str | None = None,
        request_timeout_s: float = 5.0,
        retry_budget_s: float = 10.0,
        retry_backoff_s: float = 0.02,
        retry_backoff_max_s: float = 0.5,
        ssl_context: ssl.SSLContext | None = None,
        sasl: PlainCredentials | None = None,
        client_id: str = "kraft-spark-client",
        coalesce: bool = False,
        leader_probe_s: float = DEFAULT_PROBE_AFTER_S,
    ) -> None:
        """``coalesce``: concurrent appends share batches (see ``kraft_spark.client.coalesce``);
        for servers that turn many requests into appends, such as the HTTP sidecar.
        ``leader_probe_s``: a request unanswered for this long makes the client ask the other
        nodes whether another leader was elected (see ``kraft_spark.client.leader_watch``); 0
        waits for ``request_timeout_s`` instead. ``sasl``: the SASL/PLAIN identity every
        connection authenticates as (``client.security`` reads it from a client properties
        file)."""
        self._endpoints = parse_bootstrap(bootstrap)
        self.cluster_id = cluster_id or ""
        self._expected_cluster = cluster_id
        self._request_timeout_s = request_timeout_s
        self._retry_budget_s = retry_budget_s
        self._backoff_min = retry_backoff_s
        self._backoff_max = retry_backoff_max_s
        self._ssl = ssl_context
        self._sasl = sasl
        self._client_id = client_id
        self._conns: dict[tuple[str, int], Connection] = {}
        self._leader: tuple[str, int] | None = None
        self._leader_epoch = -1  # the epoch self._leader last answered in; -1: unknown
        self._cursor = 0
        self._free_lanes: list[_Lane] = []
        self._node_endpoints: dict[int, tuple[str, int]] = {}
        self._hint: int = -1  # the leader id the last refusing node named
        # Endpoints that answered in HTTP (API ports given as Raft ones), and when: skipped for
        # NOT_KAFKA_SKIP_S (something else may listen there later).
        self._not_kafka: dict[tuple[str, int], float] = {}
        self._not_kafka_reason = ""
        self._rng = random.Random()
        self.leader_changes = 0  # how often the client had to look for the leader again
        self._coalescer = AppendCoalescer(sending(self._append_records)) if coalesce else None
        self._closing = False  # no new connection once close() began
        self._watch = LeaderWatch(self._ask_leader, self._node_endpoints.get,
                                  probe_after_s=leader_probe_s,
                                  probe_timeout_s=leader_probe_s)

    # ------------------------------------------------------------------ connections

    def _conn(self, endpoint: tuple[str, int]) -> Connection:
        conn = self._conns.get(endpoint)
        if conn is None:
            conn = self._conns[endpoint] = Connection(
                endpoint[0],
                endpoint[1],
                ssl_context=self._ssl,
                sasl=self._sasl,
                client_id=self._client_id,
                reconnect_backoff_s=self._backoff_min,
            )
        return conn

    def _not_kafka_now(self) -> set[tuple[str, int]]:
        """The endpoints that answered in HTTP within the last NOT_KAFKA_SKIP_S."""
        if not self._not_kafka:
            return set()
        now = time.monotonic()
        return {e for e, at in self._not_kafka.items() if now - at < NOT_KAFKA_SKIP_S}

    def _candidates(self) -> list[tuple[str, int]]:
        """The endpoints to try, the believed leader first, then round robin."""
        n = len(self._endpoints)
        order = [self._endpoints[(self._cursor + i) % n] for i in range(n)]
        if self._leader is not None:
            order = [self._leader] + [e for e in order if e != self._leader]
        return order

    async def _request(self, endpoint: tuple[str, int], api_key: int, version: int,
                       body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """One request to ``endpoint``, abandoned with :class:`LeaderMovedError` when the
        other nodes name a newer leader while it waits (a frozen or cut-off leader)."""
        request = self._conn(endpoint).request(api_key, version, body, timeout_s)
        others = [e for e in {*self._endpoints, *self._node_endpoints.values()}
                  if e != endpoint and e not in self._not_kafka]
        epoch = self._leader_epoch if endpoint == self._leader else -1
        reply: dict[str, Any] = await self._watch.await_unless_replaced(
            request, target=endpoint, target_epoch=epoch, others=others)
        if needs_authentication(reply):
            raise AuthenticationError(
                f"{endpoint[0]}:{endpoint[1]} takes no request before SASL/PLAIN "
                "authentication, and this client has no credentials (sasl=)")
        return reply

    async def _ask_leader(self, endpoint: tuple[str, int],
                          timeout_s: float) -> tuple[int, int] | None:
        """(leader id, epoch) as ``endpoint`` knows them; None when it does not answer."""
        if self._closing:
            return None
        body = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [
            {"partition_index": 0}]}]}
        try:
            reply = await self._conn(endpoint).request(ApiKey.DESCRIBE_QUORUM, 1, body,
                                                       timeout_s)
        except TransportError:
            return None
        self._learn_endpoints(reply.get("kraft_spark_node_endpoints"))
        part = first_partition(reply, "topics", "partitions")
        if part is None:
            return None
        return part.get("leader_id", -1), part.get("leader_epoch", -1)

    def _learn_endpoints(self, items: list[dict[str, Any]] | None) -> None:
        for node in items or []:
            self._node_endpoints[node["node_id"]] = (node["host"], node["port"])

    def _refused(self, endpoint: tuple[str, int], leader_id: int) -> None:
        """``endpoint`` is not the leader; it named ``leader_id`` (-1: none known)."""
        self._forget_leader(endpoint)
        self._hint = leader_id

    def _forget_leader(self, endpoint: tuple[str, int]) -> None:
        if self._leader == endpoint:
            self._leader = None
            self.leader_changes += 1
        self._cursor = (self._cursor + 1) % len(self._endpoints)

    async def _retry(
        self, what: str, attempt: Any, *, budget_s: float | None = None
    ) -> Any:
        """Run ``attempt(endpoint)`` against candidates until it returns a value that is not
        ``None`` (``None`` = try elsewhere / later), backing off between rounds."""
        budget = self._retry_budget_s if budget_s is None else budget_s
        deadline = time.monotonic() + budget
        backoff = self._backoff_min
        last_error = "no node answered"
        while True:
            follow = False
            skipped = self._not_kafka_now()
            if skipped.issuperset(self._endpoints):
                raise NotKafkaEndpointError(f"{what}: {self._not_kafka_reason}") from None
            for endpoint in self._candidates():
                if endpoint in skipped:
                    continue
                try:
                    result = await attempt(endpoint)
                except LeaderMovedError as moved:
                    # The target was frozen or cut off and another node leads now: follow it
                    # at once (an append is retried on its producer id and sequence).
                    last_error = f"{endpoint[0]}:{endpoint[1]} was replaced ({moved})"
                    self._leader, self._leader_epoch = moved.endpoint, moved.epoch
                    self.leader_changes += 1
                    follow = True
                    break
                except TransportError as exc:
                    if exc.auth_failed:
                        raise AuthenticationError(f"{what}: {exc}") from None
                    last_error = str(exc)
                    self._forget_leader(endpoint)
                    if exc.not_kafka:
                        self._not_kafka[endpoint] = time.monotonic()
                        self._not_kafka_reason = last_error
                        skipped.add(endpoint)
                        if skipped.issuperset(self._endpoints):
                            raise NotKafkaEndpointError(f"{what}: {last_error}") from None
                    continue
                if result is not None:
                    return result
                last_error = f"{endpoint[0]}:{endpoint[1]} is not the leader"
                hinted = self._node_endpoints.get(self._hint)
                self._hint = -1
                if hinted is not None and hinted != endpoint:
                    self._leader = hinted  # follow the named leader at once
                    follow = True
                    break
                if time.monotonic() >= deadline:
                    break
            if time.monotonic() >= deadline:
                raise NoLeaderError(
                    f"{what}: no leader found within {budget:.1f} s ({last_error}); an "
                    "election may be in progress or the quorum is unreachable: retry later"
                )
            if not follow:
                await asyncio.sleep(backoff * (0.5 + self._rng.random()))
                backoff = min(self._backoff_max, backoff * 2)

    def _check_cluster(self, cluster_id: str | None) -> None:
        if cluster_id:
            if self._expected_cluster and cluster_id != self._expected_cluster:
                raise ClusterIdMismatchError(
                    f"the quorum belongs to cluster {cluster_id!r}, not "
                    f"{self._expected_cluster!r}: check --bootstrap-controller"
                )
            self.cluster_id = cluster_id

    # ------------------------------------------------------------------ describe

    async def describe_quorum(self) -> QuorumInfo:
        """DescribeQuorum from the leader (KIP-836 fields)."""

        async def attempt(endpoint: tuple[str, int]) -> QuorumInfo | None:
            body = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [
                {"partition_index": 0}]}]}
            reply = await self._request(
                endpoint, ApiKey.DESCRIBE_QUORUM, 2, body, self._request_timeout_s
            )
            self._check_cluster(reply.get("kraft_spark_cluster_id"))
            self._learn_endpoints(reply.get("kraft_spark_node_endpoints"))
            part = first_partition(reply, "topics", "partitions")
            error = reply.get("error_code", 0) or (part or {}).get("error_code", 0)
            if error in _RETRIABLE or part is None:
                self._refused(endpoint, (part or {}).get("leader_id", -1))
                return None
            if error:
                raise ClientError(f"DescribeQuorum failed: {_error_text(error)}")
            self._leader, self._leader_epoch = endpoint, part["leader_epoch"]
            return QuorumInfo(
                cluster_id=self.cluster_id,
                leader_id=part["leader_id"],
                leader_epoch=part["leader_epoch"],
                high_watermark=part["high_watermark"],
                voters=tuple(_replica(r) for r in part["current_voters"]),
                observers=tuple(_replica(r) for r in part["observers"]),
                log_start_offset=(reply.get("kraft_spark_log_start") or {}).get(
                    "log_start_offset", -1),
                latest_snapshot=_snapshot_of(reply.get("kraft_spark_log_start")),
                target_voters=tuple(reply.get("kraft_spark_target_voters") or ()),
                endpoints={n["node_id"]: tuple(f"{e['name']}://{e['host']}:{e['port']}"
                                               for e in n["listeners"])
                           for n in reply.get("nodes") or ()},
            )

        info: QuorumInfo = await self._retry("describe quorum", attempt)
        return info

    async def leader_views(self, timeout_s: float = 1.0) -> dict[str, tuple[int, int]]:
        """Who leads, as each known node sees it: ``"host:port"`` → (leader id, epoch), for
        the nodes that answered within ``timeout_s``. A deposed leader that has not yet heard
        of its successor still names itself at its old epoch: the highest epoch is the truth."""
        endpoints = sorted({*self._endpoints, *self._node_endpoints.values()})
        answers = await asyncio.gather(*(self._ask_leader(e, timeout_s) for e in endpoints))
        return {f"{host}:{port}": answer for (host, port), answer in zip(endpoints, answers,
                                                                          strict=True)
                if answer is not None}

    # ------------------------------------------------------------------ read

    async def read(self, from_offset: int, limit: int = 100) -> list[CommittedRecord]:
        """Up to ``limit`` committed data records from ``from_offset`` on (control records
        such as LeaderChange are skipped; an offset past the end gives an empty list)."""
        if from_offset < 0 or limit < 1:
            raise ValueError("from_offset must be ≥ 0 and limit ≥ 1")
        if self._leader is None:
            await self.describe_quorum()  # learns the leader and every voter's endpoint

        async def attempt(endpoint: tuple[str, int]) -> list[CommittedRecord] | None:
            body = {
                "cluster_id": self._expected_cluster,
                "replica_id": CLIENT_REPLICA_ID,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 4 * 1024 * 1024,
                "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "fetch_offset": from_offset,
                    "last_fetched_epoch": -1, "partition_max_bytes": 4 * 1024 * 1024,
                }]}],
                "forgotten_topics_data": [],
            }
            reply = await self._request(
                endpoint, ApiKey.FETCH, 12, body, self._request_timeout_s
            )
            part = first_partition(reply, "responses", "partitions")
            error = reply.get("error_code", 0) or (part or {}).get("error_code", 0)
            if error == ErrorCode.INCONSISTENT_CLUSTER_ID:
                raise ClusterIdMismatchError(
                    f"{endpoint[0]}:{endpoint[1]} belongs to another cluster than "
                    f"{self._expected_cluster!r}"
                )
            if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                start = (part or {}).get("log_start_offset", -1)
                if start > from_offset:
                    raise OffsetBelowLogStartError(
                        from_offset, start, snapshot_label((part or {}).get("snapshot_id"))
                    )
                return []
            if error in _RETRIABLE or part is None:
                leader = (part or {}).get("current_leader") or {}
                self._refused(endpoint, leader.get("leader_id", -1))
                return None
            if error:
                raise ClientError(f"Fetch failed: {_error_text(error)}")
            self._leader = endpoint
            return committed_records(
                decode_record_set(part["records"]), part["high_watermark"], from_offset, limit
            )

        records: list[CommittedRecord] = await self._retry("read", attempt)
        return records

    # ------------------------------------------------------------------ append

    async def append(
        self, records: Sequence[AppendRecord], *, timeout_s: float = 10.0,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append ``records`` as one batch and wait until it is committed (a ``NewRecord``
        gets the time of now; a ``Record`` keeps its own).

        ``idempotency_key``: the batch goes out alone under the key's own producer id
        (``key_producer_id``) at sequence 0, so every retry of the key, from any client or
        node and under any later leader, is answered with the first append's offsets (the
        producer table is replicated with the log); a retry with another number of records is
        refused (``InvalidRecordError``)."""
        if not records:
            raise ValueError("append needs at least one record")
        batch_records = stamped(records)
        if idempotency_key is not None:
            lane = _Lane(key_producer_id(idempotency_key))
            return await self._append_on_lane(lane, batch_records, timeout_s,
                                               key=idempotency_key)
        return await self.append_batch(batch_records, timeout_s=timeout_s)

    async def append_batch(self, records: tuple[Record, ...], *,
                           timeout_s: float = 10.0) -> AppendResult:
        """``append`` of records already stamped with their append time (a node forwarding a
        batch it took but no longer leads for): sent as they are, with no conversion."""
        if not records:
            raise ValueError("append needs at least one record")
        if self._coalescer is not None:
            return await self._coalescer.append(records, timeout_s)
        return await self._append_records(records, timeout_s)

    async def _append_records(self, batch_records: tuple[Record, ...],
                              timeout_s: float) -> AppendResult:
        lane = self._free_lanes.pop() if self._free_lanes else _Lane(self._new_producer_id())
        try:
            result = await self._append_on_lane(lane, batch_records, timeout_s)
        except (CommitTimeoutError, NoLeaderError):
            raise  # the lane's last batch has an unknown outcome: never reuse it
        except ClientError:
            self._free_lanes.append(lane)  # refused outright: nothing was appended
            raise
        lane.next_sequence += len(batch_records)
        if lane.next_sequence > 0x7FFF0000:
            lane = _Lane(self._new_producer_id())
        self._free_lanes.append(lane)
        return result

    def _new_producer_id(self) -> int:
        return self._rng.getrandbits(62) + 1

    async def _append_on_lane(
        self, lane: _Lane, records: tuple[Record, ...], timeout_s: float,
        key: str | None = None,
    ) -> AppendResult:
        data = produce_batch(
            records, producer_id=lane.producer_id, producer_epoch=0,
            base_sequence=lane.next_sequence,
        )
        body = {
            "transactional_id": None,
            "acks": ACKS_ALL,
            "timeout_ms": int(self._request_timeout_s * 1000),
            "topic_data": [
                {"name": METADATA_TOPIC, "partition_data": [{"index": 0, "records": data}]}
            ],
        }
        sent = False

        async def attempt(endpoint: tuple[str, int]) -> AppendResult | None:
            nonlocal sent
            try:
                reply = await self._request(
                    endpoint, ApiKey.PRODUCE, 10, body, self._request_timeout_s + 1.0
                )
            except TransportError as exc:
                sent = sent or exc.sent
                raise
            except LeaderMovedError:
                sent = True  # it reached the old leader, which may have appended it
                raise
            sent = True
            part = first_partition(reply, "responses", "partition_responses")
            if part is None:
                self._forget_leader(endpoint)
                return None
            error = part["error_code"]
            leader = part.get("current_leader") or {}
            if error == ErrorCode.NONE:
                self._leader = endpoint
                self._leader_epoch = max(self._leader_epoch, leader.get("leader_epoch", -1))
                base = part["base_offset"]
                return AppendResult(base, base + len(records) - 1, leader.get("leader_epoch", -1))
            message = part.get("error_message") or _error_text(error)
            if error in _RETRIABLE:
                self._learn_endpoints(reply.get("node_endpoints"))
                self._refused(endpoint, leader.get("leader_id", -1))
                return None
            if error == ErrorCode.MESSAGE_TOO_LARGE:
                raise RecordTooLargeError(f"the quorum refused the batch: {message}")
            if error in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE):
                raise InvalidRecordError(f"the quorum refused the batch: {message}")
            if key is not None and error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                raise key_reused(key)
            raise ClientError(f"append failed: {_error_text(error)} ({message})")

        try:
            result: AppendResult = await self._retry("append", attempt, budget_s=timeout_s)
        except NoLeaderError as exc:
            if sent:
                raise CommitTimeoutError(
                    f"the append was not confirmed within {timeout_s:.1f} s ({exc}); it may "
                    "still commit: retrying it is safe from the same client"
                ) from exc
            raise
        return result

    async def close(self) -> None:
        self._closing = True
        if self._coalescer is not None:
            await self._coalescer.close()
        await self._watch.close()
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()


def committed_records(
    batches: Iterable[Batch], high_watermark: int, from_offset: int, limit: int
) -> list[CommittedRecord]:
    """The data records (no control records) of a Fetch answer from ``from_offset`` below the
    high watermark, at most ``limit`` of them."""
    out: list[CommittedRecord] = []
    for batch in batches:
        if batch.is_control:
            continue
        for i, rec in enumerate(batch.records):
            offset = batch.base_offset + i
            if offset < from_offset or offset >= high_watermark:
                continue
            if len(out) >= limit:
                return out
            out.append(CommittedRecord(
                offset, batch.epoch, rec.timestamp_ms, rec.key, rec.value, rec.headers
            ))
    return out


def _replica(r: dict[str, Any]) -> ReplicaInfo:
    directory = r.get("replica_directory_id")
    return ReplicaInfo(
        r["replica_id"], r["log_end_offset"], r.get("last_fetch_timestamp", -1),
        r.get("last_caught_up_timestamp", -1),
        directory_text(directory) if directory and directory != NIL_DIRECTORY else None,
    )


def _error_text(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"


def _snapshot_of(log_start: Any) -> str | None:
    """``<end offset>-<epoch>`` of DescribeQuorum's KraftSparkLogStart field (None: none)."""
    if not isinstance(log_start, dict) or log_start.get("snapshot_end_offset", -1) < 0:
        return None
    return f"{log_start['snapshot_end_offset']}-{log_start.get('snapshot_epoch', -1)}"
