"""The keys an etcd call touches, checked against its caller's permissions
(``kraft_spark.auth_users.Caller``), as etcd's ``authApplierV3``: Range and Watch read their
key or range; Put writes its key (reads it too with ``prev_kv``; attaching a lease needs write
permission on the keys already on it, ``checkLeasePuts``); DeleteRange writes its range (reads
it with ``prev_kv``); a Txn needs every compare's key or range read and every operation of
both branches, nested transactions included (``checkTxnAuth``); LeaseRevoke writes every key
on the lease. Lock and Election run on the node's own KV and Watch with the caller's identity,
so their keys are checked there. A refusal is etcd's ``permission denied``; a caller of None
(a node without credentials) may do everything.

An added user's roles are replicated state: before its keys are judged, ``current`` takes the
read index and looks the user up again, so a role granted or revoked through another node
before the call began is in force (etcd judges at apply, after raft); the keys on a lease
likewise. A credential's permissions are its scope's, so its calls pay no read index."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from api.etcd.context import EtcdContext
from kraft_spark.auth_users import Caller, still_valid
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import rpc_pb2

# The keys on a lease (empty when it does not exist): the node's applied state.
LeaseKeys = Callable[[int], Iterable[bytes]]


async def current(caller: object, ctx: EtcdContext) -> object:
    """``caller`` as of every change acknowledged before now (an added user: after the read
    index; deleted or given a new password since: etcd's invalid auth token, on which
    clientv3 authenticates again)."""
    if not isinstance(caller, Caller) or caller.builtin:
        return caller
    await ctx.read_view(serializable=False)
    fresh = still_valid(caller, ctx.store.applied_state().auth)
    if fresh is None:
        raise errors.invalid_token()
    return fresh


def check_read(caller: object, key: bytes, range_end: bytes = b"") -> None:
    if isinstance(caller, Caller) and not caller.allows(key, range_end, write=False):
        raise errors.permission_denied()


def check_write(caller: object, key: bytes, range_end: bytes = b"") -> None:
    if isinstance(caller, Caller) and not caller.allows(key, range_end, write=True):
        raise errors.permission_denied()


def check_lease_keys(caller: object, lease_id: int, lease_keys: LeaseKeys) -> None:
    """etcd's ``checkLeasePutsKeys``: root passes; others need write on every key on it."""
    if not isinstance(caller, Caller) or caller.is_root or not lease_id:
        return
    for key in lease_keys(lease_id):
        check_write(caller, key)


def check_put(caller: object, request: rpc_pb2.PutRequest, lease_keys: LeaseKeys) -> None:
    check_write(caller, request.key)
    check_lease_keys(caller, request.lease, lease_keys)
    if request.prev_kv:
        check_read(caller, request.key)


def check_delete(caller: object, request: rpc_pb2.DeleteRangeRequest) -> None:
    check_write(caller, request.key, request.range_end)
    if request.prev_kv:
        check_read(caller, request.key, request.range_end)


def check_txn(caller: object, request: rpc_pb2.TxnRequest, lease_keys: LeaseKeys) -> None:
    if not isinstance(caller, Caller):
        return
    for compare in request.compare:
        check_read(caller, compare.key, compare.range_end)
    for op in (*request.success, *request.failure):
        kind = op.WhichOneof("request")
        if kind == "request_range":
            check_read(caller, op.request_range.key, op.request_range.range_end)
        elif kind == "request_put":
            check_put(caller, op.request_put, lease_keys)
        elif kind == "request_delete_range":
            check_delete(caller, op.request_delete_range)
        elif kind == "request_txn":
            check_txn(caller, op.request_txn, lease_keys)
