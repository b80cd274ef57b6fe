"""The requests of clientv3's concurrency recipes (``client/v3/concurrency``: mutex.go,
election.go, key.go), which etcd's Lock and Election services run against their own server
(``server/etcdserver/api/v3lock``, ``v3election``). Pure: building requests and reading their
answers; ``api.etcd.local`` sends them.

A waiter's key is ``<prefix><lease in hex>`` (Go's ``%x``), created with its lease by a Txn on
``create_revision == 0``; whoever holds the key with the lowest ``create_revision`` under the
prefix holds the lock (leads), the others wait for the deletion of every key created before
theirs (``waitDeletes``)."""

from __future__ import annotations

from typing import Final

from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.store.key_range import prefix_end

# concurrency.defaultSessionTTL: the lease a session grants itself when given none (lease 0).
SESSION_TTL_S: Final = 60

Range = rpc_pb2.RangeRequest
Compare = rpc_pb2.Compare
Op = rpc_pb2.RequestOp

# concurrency's errors: plain Go errors, so gRPC's UNKNOWN with the error's text.
SESSION_EXPIRED: Final = "mutex: session is expired"
NOT_LEADER: Final = "election: not leader"
NO_LEADER: Final = "election: no leader"
MISSING_LEADER: Final = '"leader" field must be provided'


def session_key(prefix: bytes, lease: int) -> bytes:
    return prefix + f"{lease:x}".encode()


def first_created(prefix: bytes) -> rpc_pb2.RangeRequest:
    """``Get(pfx, WithFirstCreate()...)``: the key of the prefix created first."""
    return Range(key=prefix, range_end=prefix_end(prefix), limit=1,
                 sort_order=Range.ASCEND, sort_target=Range.CREATE)


def last_created_before(prefix: bytes, max_create: int) -> rpc_pb2.RangeRequest:
    """``Get(pfx, WithLastCreate(), WithMaxCreateRev(max))`` (``waitDeletes``)."""
    return Range(key=prefix, range_end=prefix_end(prefix), limit=1,
                 sort_order=Range.DESCEND, sort_target=Range.CREATE,
                 max_create_revision=max_create)


def created_at(key: bytes, revision: int) -> rpc_pb2.Compare:
    return Compare(key=key, target=Compare.CREATE, result=Compare.EQUAL,
                   create_revision=revision)


def put_op(key: bytes, value: bytes, lease: int) -> rpc_pb2.RequestOp:
    return Op(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))


def get_op(request: rpc_pb2.RangeRequest) -> rpc_pb2.RequestOp:
    return Op(request_range=request)


def acquire(prefix: bytes, lease: int) -> rpc_pb2.TxnRequest:
    """Mutex.tryAcquire: create the waiter's key if absent; read it (if it was there) and the
    owner."""
    key = session_key(prefix, lease)
    owner = get_op(first_created(prefix))
    return rpc_pb2.TxnRequest(
        compare=[created_at(key, 0)], success=[put_op(key, b"", lease), owner],
        failure=[get_op(Range(key=key)), owner])


def my_revision(response: rpc_pb2.TxnResponse) -> int:
    """The waiter key's create revision after :func:`acquire` or :func:`campaign`: the Txn's
    revision if it created the key, else the existing key's."""
    if response.succeeded:
        return int(response.header.revision)
    return int(response.responses[0].response_range.kvs[0].create_revision)


def holds(response: rpc_pb2.TxnResponse, revision: int) -> bool:
    """Whether :func:`acquire` got the lock at once (no owner, or the owner is the waiter)."""
    owner = response.responses[1].response_range.kvs
    return not owner or owner[0].create_revision == revision


def campaign(prefix: bytes, lease: int, value: bytes) -> rpc_pb2.TxnRequest:
    """Election.Campaign: create the candidate's key with its value, else read it."""
    key = session_key(prefix, lease)
    return rpc_pb2.TxnRequest(compare=[created_at(key, 0)],
                              success=[put_op(key, value, lease)],
                              failure=[get_op(Range(key=key))])


def proclaim(key: bytes, revision: int, lease: int, value: bytes) -> rpc_pb2.TxnRequest:
    """Election.Proclaim: a new value, only while the leader's key is the one it created."""
    return rpc_pb2.TxnRequest(compare=[created_at(key, revision)],
                              success=[put_op(key, value, lease)])


def resign(key: bytes, revision: int) -> rpc_pb2.TxnRequest:
    """Election.Resign: delete the leader's key if it is still the one it created."""
    return rpc_pb2.TxnRequest(
        compare=[created_at(key, revision)],
        success=[Op(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key))])
