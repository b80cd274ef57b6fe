"""What every etcd servicer of a node shares: the node, its store and backend, response
headers, the mapping of the store's errors onto etcd's, and the write loop (append a plan,
learn its outcome, plan again when a guard failed: ``kraft_spark.etcd.plan``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from api.conditional import with_conditions
from api.node_backend import NodeBackend
from kraft_spark.client.errors import ClientError, CommitTimeoutError, NoLeaderError
from kraft_spark.client.types import AppendRecord, NewRecord
from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.plan import Plan
from kraft_spark.etcd.revision import cluster_number, header_revision, member_number
from kraft_spark.http_auth import Credentials
from kraft_spark.net.config import NodeConfig
from kraft_spark.store.leases import LEASE_HEADER
from kraft_spark.store.service import NodeStore, ReadTimeoutError

# How long a write waits for its commit and its outcome, as etcd's default request timeout.
REQUEST_TIMEOUT_S: Final = 5.0
# A write whose guards keep failing (the keys it read change under it) gives up after this many
# plans; etcd's own STM retries without bound, a server must not.
MAX_PLANS: Final = 32
# etcd's version as reported by Status: etcdctl and clientv3 parse it (3.5: the API this
# implements a subset of).
ETCD_VERSION: Final = "3.5.0"

T = TypeVar("T")


class Epoch(Protocol):
    epoch: int


class EtcdNode(Protocol):
    """What the servicers need of a ``RaftNode``."""

    cluster_id: str

    @property
    def core(self) -> Epoch: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def is_leader(self) -> bool: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass
class EtcdContext:
    node: EtcdNode
    store: NodeStore
    backend: NodeBackend
    credentials: Credentials | None
    # node id -> its etcd address host:port (MemberList's client URLs).
    urls: dict[int, str] = field(default_factory=dict)

    @functools.cached_property
    def member_id(self) -> int:
        return member_number(self.node.cluster_id, self.node.config.node_id)

    @functools.cached_property
    def etcd_cluster_id(self) -> int:
        return cluster_number(self.node.cluster_id)

    def header(self, revision: int | None = None) -> rpc_pb2.ResponseHeader:
        """etcd's header; ``revision`` None: the state's current one. Every answer carries
        one: the ids are hashed once, the term read off the core (no ``describe``)."""
        if revision is None:
            revision = header_revision(self.store.applied_state().applied_offset)
        return rpc_pb2.ResponseHeader(
            cluster_id=self.etcd_cluster_id, member_id=self.member_id,
            revision=revision, raft_term=self.node.core.epoch)

    def lease_keys(self, lease_id: int) -> frozenset[bytes]:
        """The keys on lease ``lease_id`` in this node's applied state (none if it is gone)."""
        lease = self.store.applied_state().leases.leases.get(lease_id)
        return frozenset(lease.keys) if lease is not None else frozenset()

    def view(self) -> View:
        state = self.store.applied_state()
        return View(state.get, state.items, state.applied_offset, self.store.history)

    async def read_view(self, *, serializable: bool) -> View:
        """A view for a read: after the read index (linearizable) or at once."""
        try:
            await self.store.read_offset(linearizable=not serializable,
                                         timeout_s=REQUEST_TIMEOUT_S)
        except Exception as exc:
            raise etcd_error(exc) from None
        return self.view()

    async def append(self, records: list[AppendRecord]) -> tuple[int, str]:
        """Append ``records`` (one batch) and wait for this node to apply them: (the last
        offset, why it failed or "" if it applied)."""
        try:
            result = await self.backend.append(records, timeout_s=REQUEST_TIMEOUT_S)
            failure = await self.store.outcome(result.base_offset, result.last_offset + 1,
                                               REQUEST_TIMEOUT_S)
        except Exception as exc:
            raise etcd_error(exc) from None
        if failure is None:
            return result.last_offset, ""
        return result.last_offset, failure.reason or "guard"

    async def write(self, build: Callable[[Plan], T]) -> tuple[T, int]:
        """Plan with ``build`` on the current view, append, and answer once applied: (the
        response, the header revision: the revision of the request's writes, the first offset
        of its records). Plans again while a guard fails."""
        for _ in range(MAX_PLANS):
            plan = Plan(self.view())
            response = build(plan)
            if not plan.writes:
                return response, plan.view.revision
            records = records_of(plan)
            last, reason = await self.append(records)
            if not reason:
                # One group (or one record): every write of it has this revision.
                revision = last - len(records) + 1
                if isinstance(response, rpc_pb2.TxnResponse):
                    plan.settle(response, revision)
                return response, revision
            if "lease" in reason and "not found" in reason:
                raise errors.lease_not_found()
            if reason != "guard":
                raise errors.EtcdError("FAILED_PRECONDITION", f"etcdserver: {reason}")
        raise errors.EtcdError("ABORTED", f"kraft-spark: the keys this request reads changed "
                                          f"under it {MAX_PLANS} times in a row: retry")


def records_of(plan: Plan) -> list[AppendRecord]:
    """The plan's writes as records; one conditional group when guarded or more than one."""
    records: list[AppendRecord] = [
        NewRecord(w.key, w.value, ((LEASE_HEADER, str(w.lease).encode()),) if w.lease else ())
        for w in plan.writes]
    conditions = plan.conditions
    if conditions or len(records) > 1:
        return with_conditions(records, conditions)
    return records


def etcd_error(exc: Exception) -> Exception:
    """The store's and client's errors as etcd's."""
    if isinstance(exc, errors.EtcdError):
        return exc
    if isinstance(exc, NoLeaderError):
        return errors.no_leader()
    if isinstance(exc, (ReadTimeoutError, CommitTimeoutError, TimeoutError)):
        return errors.timeout(str(exc) or type(exc).__name__)
    if isinstance(exc, ClientError):
        return errors.EtcdError("UNAVAILABLE", f"etcdserver: {exc}")
    return exc
