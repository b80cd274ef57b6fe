"""The application's start-up line: one JSON object on stdout naming everything a user needs
(the HTTP endpoint and etcd's beside it, the tables, the SQL endpoint, the credentials'
files), also published under the warehouse for clients that cannot know where the driver runs
(``--deploy-mode cluster``). Paths only: no secret is ever in it."""

from __future__ import annotations

import json
import os
from typing import Any, Protocol

from driver.config import AppConfig
from driver.etcd_endpoint import etcd_address, voter_etcd_addresses
from driver.placement import driver_host
from kraft_spark import app_endpoint
from kraft_spark.quorum_auth import QuorumAuth
from kraft_spark.sql_endpoint import url_of


class Application(Protocol):
    """What the line is made of (``driver.app.Application``)."""

    config: AppConfig
    cluster_id: str
    sql_port: int
    http_credentials_path: str | None
    quorum_auth: QuorumAuth | None
    spark: Any
    _front: Any
    _etcd_front: Any
    _tasks: dict[int, Any]
    _observer: Any

    def voter_http_urls(self) -> dict[int, str]: ...


def start_summary(app: Application) -> dict[str, Any]:
    cfg = app.config
    assert app._front is not None
    etcd = app._etcd_front
    return {
        "http": f"http://{cfg.http_host}:{app._front.port}",
        # etcd's v3 API beside it (driver/etcd_endpoint.py): an etcdctl --endpoints value
        **({"etcd": etcd_address(cfg.http_host, etcd.port)} if etcd is not None else {}),
        "docs": f"http://{cfg.http_host}:{app._front.port}/docs",
        "warehouse": cfg.warehouse,
        "tables": [os.path.join(cfg.warehouse, t) for t in ("records", "snapshot",
                                                            "quorum_events")],
        "cluster_id": app.cluster_id,
        "voters": cfg.voters,
        "voter_http": app.voter_http_urls(),
        **({"voter_etcd": voter_etcd_addresses(app)} if etcd is not None else {}),
        **({"sql": url_of(cfg.sql_host, app.sql_port)} if app.sql_port else {}),
        **({"credentials": app.http_credentials_path} if app.http_credentials_path else {}),
        # The Kafka-protocol listeners' client settings (SASL/PLAIN; kraft_spark.quorum_auth).
        **({"command_config": app.quorum_auth.admin_properties} if app.quorum_auth else {}),
    }


def announce(app: Application) -> tuple[str, str]:
    """Print the start-up line and publish it; returns the HTTP endpoint's URL and, for the
    progress line, where etcd's API is (", etcd API at host:port", or "")."""
    summary = start_summary(app)
    print(json.dumps(summary), flush=True)
    assert app._front is not None and app.spark is not None
    master = str(app.spark.sparkContext.master)
    host = driver_host(master, app.spark)
    advertised = {"http": app_endpoint.advertised_url(app.config.http_host, app._front.port,
                                                      host)}
    if app._etcd_front is not None:
        advertised["etcd"] = app_endpoint.advertised_url(
            app.config.http_host, app._etcd_front.port, host).removeprefix("http://")
    app_endpoint.publish(app.config.warehouse, app.spark, {**summary, **advertised})
    etcd = f", etcd API at {summary['etcd']}" if "etcd" in summary else ""
    return str(summary["http"]), etcd
