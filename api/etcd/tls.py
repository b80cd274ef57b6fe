"""TLS on the etcd listener: the node's own certificate and CA (``ssl.*``,
``kraft_spark.tls_config``), with client certificates required and verified, as the node's
quorum listener requires them (``TlsConfig.server_context``: mutual TLS, no certificate no
connection). A plaintext client never completes a handshake.

A client certificate proves only that its holder may connect: the calls still need the HTTP
API's credentials (``api.etcd.auth``), since the HTTP API takes no certificate principals
either (it serves plain HTTP). etcd's ``--client-cert-auth`` would take the certificate's
common name as the user; kraft-spark does not, so that both APIs accept the same callers.
"""

from __future__ import annotations

import grpc

from kraft_spark.tls_config import TlsConfig


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """gRPC's credentials for ``tls``; read once, at start (as the quorum listener's)."""
    return grpc.ssl_server_credentials(
        [(_read(tls.keyfile), _read(tls.certfile))], root_certificates=_read(tls.cafile),
        require_client_auth=True)
