"""``kraft-spark local --http-port`` with ``--node-http-base-port``: the printed address is the
append router (``kraft_spark.proxy.front``), told who leads by asking the quorum."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kraft_spark.client.blocking import QuorumClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.net.config import DEFAULT_HTTP_HEADER_TIMEOUT_MS, DEFAULT_HTTP_MAX_CONNECTIONS
from kraft_spark.proxy.front import HttpFront

# DescribeQuorum this often: between two asks, appends to a leader that died are refused by
# its host and go through the sidecar, which finds the next leader itself.
ASK_EVERY_S = 0.25


def start_front(args: argparse.Namespace, sidecar_port: int, *, bootstrap: Sequence[str],
                cluster_id: str, urls: dict[int, str],
                security: ClientSecurity | None) -> HttpFront:
    client = QuorumClient(list(bootstrap), cluster_id=cluster_id,
                          **(security or ClientSecurity()).client_kwargs())

    def leader_url() -> str | None:
        return urls.get(client.describe_quorum().leader_id)

    return HttpFront(args.host, args.http_port, sidecar_port,
                     max_connections=DEFAULT_HTTP_MAX_CONNECTIONS,
                     header_timeout_s=DEFAULT_HTTP_HEADER_TIMEOUT_MS / 1000,
                     leader_url=leader_url, interval_s=ASK_EVERY_S, on_stop=client.close)
