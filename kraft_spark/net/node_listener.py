"""A node's Kafka-protocol listener, built from its configuration: TLS (mutual) when
configured, SASL/PLAIN before any request when configured (``net.sasl_server``), and the
limits that keep a misbehaving client from exhausting the node (frame size, connection count,
idle connections)."""

from __future__ import annotations

from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import FrameServer, Handler, RequestDecoder
from kraft_spark.net.sasl_server import SaslGate
from kraft_spark.protocol.wire import error_response_body


def node_listener(cfg: NodeConfig, handler: Handler, decode: RequestDecoder) -> FrameServer:
    name = f"node {cfg.node_id}"
    return FrameServer(
        cfg.host,
        cfg.port,
        handler,
        ssl_context=cfg.tls.server_context() if cfg.tls is not None else None,
        max_frame_bytes=cfg.max_frame_bytes,
        name=name,
        decode=decode,
        max_connections=cfg.max_connections,
        sasl_gate=SaslGate(cfg.sasl.users if cfg.sasl is not None else None, name,
                           error_response_body),
        idle_timeout_s=cfg.connections_max_idle_ms / 1000,
    )
