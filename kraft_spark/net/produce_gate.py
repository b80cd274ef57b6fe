"""The reserved-header rule (``kraft_spark.store.reserved_headers``) on the Kafka-protocol
listener: a Produce whose records its sender may not write is answered INVALID_RECORD, with
the message naming the record, the header and the fix, before the core sees it (nothing of
the batch is appended, the connection stays open).

Who is ``TRUSTED`` here (every other principal is a ``PRINCIPAL``):

* a principal in ``super.users`` (the administrators Kafka's authorizer names);
* the quorum's own identity, the one this node authenticates as toward its peers: its SASL
  user (``kraft.sasl.plain.username``; the nodes share the users file), or, over mutual TLS
  without SASL, a connection presenting this node's own certificate. Followers' HTTP APIs, the
  sidecar and the driver forward what their lease API built (``by`` filled from their caller's
  credential) as that identity; nodes that do not share one certificate are trusted through
  ``super.users``;
* on a listener with neither SASL nor TLS every connection is ``User:ANONYMOUS``, the nodes'
  own included: nothing tells a client from a node, so all are trusted (Kafka without an
  authorizer; such a listener is on loopback unless ``kraft.listener.plaintext.allowed``).

Requests from this node's own process (``RaftNode.submit_local``) do not pass here: its HTTP
API applies the rule as an HTTP caller before adding headers of its own, and its lease expirer
writes only what ``store.leases`` encodes.
"""

from __future__ import annotations

import logging
import ssl

from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.net.principal import ANONYMOUS
from kraft_spark.protocol import ErrorCode, RequestHeader
from kraft_spark.protocol.wire import error_response_body
from kraft_spark.raft.messages import ProduceRequest
from kraft_spark.store.reserved_headers import Standing, refusal

log = logging.getLogger("kraft_spark.net.produce_gate")


def _first_certificate(path: str) -> bytes | None:
    """The DER bytes of the first certificate of a PEM file (None if it has none)."""
    with open(path, encoding="ascii", errors="replace") as f:
        text = f.read()
    begin, end = text.find(ssl.PEM_HEADER), text.find(ssl.PEM_FOOTER)
    if begin < 0 or end < begin:
        return None
    return ssl.PEM_cert_to_DER_cert(text[begin:end + len(ssl.PEM_FOOTER)])


class ProduceGate:
    """Decides each Produce's standing from its connection and refuses what the rule
    refuses. Built once per node from its configuration."""

    def __init__(self, cfg: NodeConfig) -> None:
        self._node_id = cfg.node_id
        self._super_users = cfg.acl.super_users
        self._own_principal: str | None = None
        self._own_certificate: bytes | None = None
        if cfg.sasl is not None:
            self._own_principal = f"User:{cfg.sasl.client.username}"
        elif cfg.tls is not None:
            self._own_certificate = _first_certificate(cfg.tls.certfile)
        else:
            self._own_principal = ANONYMOUS

    def standing(self, conn: ServerConnection) -> Standing:
        principal = conn.principal
        if principal in self._super_users or principal == self._own_principal:
            return Standing.TRUSTED
        own = self._own_certificate
        if own is not None and conn.certificate == own:
            return Standing.TRUSTED
        return Standing.PRINCIPAL

    def refused(self, conn: ServerConnection, header: RequestHeader, message: object) -> bool:
        """Answer INVALID_RECORD (and log it) when ``message`` is a Produce whose records
        ``conn``'s principal may not append; True when it was refused."""
        if type(message) is not ProduceRequest:
            return False
        records = message.records
        if not any(record.headers for record in records):
            return False  # the common case: nothing to look at, standing not even needed
        why = refusal(records, self.standing(conn), conn.principal)
        if why is None:
            return False
        text = f"{why}; nothing of the batch was appended"
        log.warning("node %d: refused a Produce from %s (%s): %s", self._node_id,
                    conn.principal, conn.peer, text)
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     error_response_body(header.api_key, ErrorCode.INVALID_RECORD, text))
        return True


__all__ = ["ProduceGate"]
