"""etcd's v3 gRPC API of one node (``kraft.etcd.listener``): ``grpc.aio`` servers sharing its
port (``api.etcd.acceptors``) on the node's own event loop, over the ``NodeStore`` and
``NodeBackend`` of its HTTP API (started and stopped with it by ``api.node_http``). Auth is
etcd's RBAC over the node's credentials and the replicated users and roles (``api.etcd.auth``,
``api.etcd.auth_admin``). Lock and Election run clientv3's recipes over the node's own
servicers (``api.etcd.lock``, ``api.etcd.election``); the methods of the other services that
are not there yet answer UNIMPLEMENTED (``api.etcd.handlers``)."""

from __future__ import annotations

import logging
from typing import Final

from api.etcd.acceptors import Acceptors, bind
from api.etcd.auth import Authorizer
from api.etcd.auth_admin import AuthServicer
from api.etcd.context import EtcdContext, EtcdNode
from api.etcd.election import ElectionServicer
from api.etcd.handlers import service_handler
from api.etcd.kv import KvServicer
from api.etcd.lease import LeaseServicer
from api.etcd.local import LocalClient
from api.etcd.lock import LockServicer
from api.etcd.maintenance import MaintenanceServicer
from api.etcd.members import MembershipServicer
from api.etcd.tls import server_credentials
from api.etcd.watch import WatchServicer
from api.node_backend import NodeBackend
from kraft_spark.auth_users import Users
from kraft_spark.etcd.pb import rpc_pb2, v3election_pb2, v3lock_pb2
from kraft_spark.http_auth import Credentials
from kraft_spark.store.service import NodeStore

log = logging.getLogger(__name__)

# Calls in flight get this long to finish when the node stops; streams are then cut.
STOP_GRACE_S: Final = 1.0


class EtcdServer:
    """A running etcd API; ``await stop()`` once."""

    def __init__(self, servers: Acceptors, leases: LeaseServicer, host: str,
                 port: int) -> None:
        self._servers = servers
        self._leases = leases
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def stop(self) -> None:
        """Stop serving; never raises."""
        try:
            await self._leases.stop()
            await self._servers.stop(STOP_GRACE_S)
        except Exception:
            log.exception("stopping etcd's API on %s failed", self.address)


async def start_etcd(node: EtcdNode, store: NodeStore, backend: NodeBackend, host: str,
                     port: int, *, credentials: Credentials | None,
                     urls: dict[int, str]) -> EtcdServer:
    """Serve etcd's API for ``node`` on ``host:port`` (0: any free port) on the running
    loop. Raises OSError naming the setting when the port cannot be bound."""
    ctx = EtcdContext(node, store, backend, credentials, dict(urls))
    users = (Users(credentials, lambda: store.applied_state().auth)
             if credentials is not None else None)
    authorize = Authorizer(users)
    leases = LeaseServicer(ctx)
    cluster = MembershipServicer(ctx)
    kv, watch = KvServicer(ctx), WatchServicer(ctx)
    local = LocalClient(kv, leases, watch)
    services = rpc_pb2.DESCRIPTOR.services_by_name
    handlers = (
        service_handler(services["KV"], kv, authorize),
        service_handler(services["Watch"], watch, authorize),
        service_handler(services["Lease"], leases, authorize),
        service_handler(services["Cluster"], cluster, authorize),
        service_handler(services["Maintenance"], MaintenanceServicer(ctx, cluster), authorize),
        service_handler(services["Auth"], AuthServicer(ctx, users), authorize),
        service_handler(v3lock_pb2.DESCRIPTOR.services_by_name["Lock"], LockServicer(local),
                        authorize),
        service_handler(v3election_pb2.DESCRIPTOR.services_by_name["Election"],
                        ElectionServicer(local), authorize),
    )
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        tls = node.config.tls  # the node's certificate, client certificates required
        servers = bind(handlers, host, port, None if tls is None else server_credentials(tls))
    except (RuntimeError, OSError) as exc:
        raise OSError(f"kraft.etcd.listener: cannot listen on {target} ({exc}): choose "
                      "another port") from exc
    await servers.start()
    leases.start()
    if not urls:
        ctx.urls[node.config.node_id] = f"{host}:{servers.port}"
    return EtcdServer(servers, leases, host, servers.port)
