"""etcd's errors as its clients recognise them: a gRPC status code (by name, so this module
needs no gRPC) and etcd's exact message (``api/v3rpc/rpctypes/error.go``: clientv3 maps some
messages back to typed errors, etcdctl prints them)."""

from __future__ import annotations


class EtcdError(Exception):
    """An answer etcd would give: ``code`` is a ``grpc.StatusCode`` name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def compacted() -> EtcdError:
    return EtcdError("OUT_OF_RANGE", "etcdserver: mvcc: required revision has been compacted")


def future_revision() -> EtcdError:
    return EtcdError("OUT_OF_RANGE", "etcdserver: mvcc: required revision is a future revision")


def lease_not_found() -> EtcdError:
    return EtcdError("NOT_FOUND", "etcdserver: requested lease not found")


def key_not_found() -> EtcdError:
    return EtcdError("INVALID_ARGUMENT", "etcdserver: key not found")


def empty_key() -> EtcdError:
    return EtcdError("INVALID_ARGUMENT", "etcdserver: key is not provided")


def duplicate_key() -> EtcdError:
    return EtcdError("INVALID_ARGUMENT", "etcdserver: duplicate key given in txn request")


def lease_exists() -> EtcdError:
    return EtcdError("FAILED_PRECONDITION", "etcdserver: lease already exists")


def lease_ttl_too_large() -> EtcdError:
    return EtcdError("OUT_OF_RANGE", "etcdserver: too large lease TTL")


def no_leader() -> EtcdError:
    return EtcdError("UNAVAILABLE", "etcdserver: no leader")


def timeout(what: str) -> EtcdError:
    return EtcdError("UNAVAILABLE", f"etcdserver: request timed out ({what})")


def auth_failed() -> EtcdError:
    return EtcdError("INVALID_ARGUMENT",
                     "etcdserver: authentication failed, invalid user ID or password")


def invalid_token() -> EtcdError:
    return EtcdError("UNAUTHENTICATED", "etcdserver: invalid auth token")


def permission_denied() -> EtcdError:
    return EtcdError("PERMISSION_DENIED", "etcdserver: permission denied")


def user_empty() -> EtcdError:
    return EtcdError("INVALID_ARGUMENT", "etcdserver: user name is empty")


def unimplemented(what: str) -> EtcdError:
    return EtcdError("UNIMPLEMENTED", f"kraft-spark: {what} is not implemented yet (issue 64 "
                                      "phase 1: see docs/etcd-api.md)")
