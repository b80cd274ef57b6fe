"""The application's etcd address: the etcd front (``kraft_spark.etcd_front``) on
``kraft.http.host:kraft.etcd.port``, forwarding every call of etcd's v3 API to a voter's own
etcd listener (``kraft.voter.etcd.base.port``), the leader's first.

The driver learns each voter's etcd address as it learns its HTTP one: from the voter's hello
on the control channel (``executors/voter.py``, ``"etcd": "host:port"``), kept per generation
in ``Application._tasks``. The front is told the running generation's addresses whenever they
change (a relaunch moves the voters, a free port each), and whenever the leader changes, so a
write reaches the leader's node and takes no forwarding hop there.
"""

from __future__ import annotations

from typing import Any, Protocol

from driver.config import AppConfig
from driver.console import progress


class Application(Protocol):
    """What the front needs of ``driver.app.Application``."""

    config: AppConfig
    _tasks: dict[int, Any]
    _observer: Any


def voter_etcd_addresses(app: Application) -> dict[int, str]:
    """The etcd address of each voter of the running generation that serves one."""
    return {v: str(h["etcd"]) for v, h in sorted(app._tasks.items()) if h.get("etcd")}


def leader_first(app: Application) -> list[str]:
    """The voters' etcd addresses, the leader's (as the driver's observer knows it) first."""
    addresses = voter_etcd_addresses(app)
    observer = app._observer
    leader = observer.core.known_leader() if observer is not None else -1
    return sorted(addresses.values(), key=lambda a: a != addresses.get(leader))


def start_etcd_front(app: Application) -> Any:
    """The front, listening (None with ``kraft.etcd.port=-1`` or no voter etcd API, and when
    the voters have a certificate: their etcd listeners then take TLS with client
    certificates, which the front, plaintext, would have to end and stand in for). Raises
    EtcdFrontError naming ``kraft.etcd.port`` when its port cannot be bound."""
    cfg = app.config
    if cfg.etcd_port < 0 or cfg.voter_etcd_base_port < 0 or cfg.voter_http_base_port < 0:
        return None
    if cfg.tls is not None:
        progress("the voters serve etcd's API over TLS (ssl.*): no etcd address beside the "
                 "HTTP one; etcd's clients take the voters' own (voter_etcd)")
        return None
    from kraft_spark.etcd_front.front import EtcdFront

    front = EtcdFront(cfg.http_host, cfg.etcd_port, lambda: leader_first(app),
                      setting="kraft.etcd.port")
    front.port  # noqa: B018 (waits until it listens, or raises)
    return front


def etcd_address(host: str, port: int) -> str:
    """``host:port`` as etcdctl's ``--endpoints`` takes it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
