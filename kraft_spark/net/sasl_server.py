"""The listener's side of SASL: which requests a connection may send before it has
authenticated, and the SaslHandshake / SaslAuthenticate answers (``sasl_plain`` for the
mechanism).

Invariants (Kafka's ``SaslServerAuthenticator``):

* on a SASL listener a connection sends ApiVersions, SaslHandshake and SaslAuthenticate, in
  that order, before anything else; any other request is answered with ILLEGAL_SASL_STATE (and
  a message naming the fix) and the connection is closed, so nothing unauthenticated reaches
  the node;
* a failed authentication is answered SASL_AUTHENTICATION_FAILED and the connection closed;
* a successful one makes the connection's principal ``User:<username>``;
* a listener without SASL answers SaslHandshake with UNSUPPORTED_SASL_MECHANISM (offering
  none) and SaslAuthenticate with ILLEGAL_SASL_STATE, and closes the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from kraft_spark.protocol import ApiKey, ErrorCode, RequestHeader
from kraft_spark.protocol.sasl_plain import AUTH_FAILED, MECHANISM, PlainUsers

log = logging.getLogger("kraft_spark.net.sasl")

SASL_KEYS = frozenset((ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))
_NEEDS_AUTH = ("this listener requires SASL/PLAIN authentication before any request "
               "(security.protocol=SASL_PLAINTEXT, sasl.mechanism=PLAIN and the credentials "
               "in the client's configuration, e.g. kraft-spark's --command-config)")


class SaslConnection(Protocol):
    peer: str
    principal: str
    authenticated: bool
    sasl_mechanism: str | None

    def respond(self, api_key: int, api_version: int, correlation_id: int,
                body: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def _handshake_body(error: int, mechanisms: list[str]) -> dict[str, Any]:
    return {"error_code": error, "mechanisms": mechanisms}


def _authenticate_body(error: int, message: str | None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "auth_bytes": b"",
            "session_lifetime_ms": 0}


ErrorBody = Callable[[int, int, str], dict[str, Any]]


def _no_error_body(api_key: int, error: int, message: str) -> dict[str, Any]:
    raise LookupError(f"no error response for api key {api_key}")


class SaslGate:
    """Decides, per request, whether it passes to the node (``admit``). ``error_body(api_key,
    code, message)`` builds the error response of another API (``protocol.wire``'s)."""

    def __init__(self, users: PlainUsers | None, name: str,
                 error_body: ErrorBody = _no_error_body) -> None:
        self._users = users
        self._name = name
        self._error_body = error_body

    @property
    def required(self) -> bool:
        return self._users is not None

    def admit(self, conn: SaslConnection, header: RequestHeader, body: Any) -> bool:
        """True when the request goes on to the node; otherwise it was answered here (and the
        connection perhaps closed)."""
        key = header.api_key
        if key == ApiKey.SASL_HANDSHAKE:
            self._handshake(conn, header, body)
            return False
        if key == ApiKey.SASL_AUTHENTICATE:
            self._authenticate(conn, header, body)
            return False
        if conn.authenticated:
            return True
        log.warning("%s: closing %s: %s before authenticating", self._name, conn.peer,
                    _api_name(key))
        try:
            conn.respond(key, header.api_version, header.correlation_id,
                         self._error_body(key, ErrorCode.ILLEGAL_SASL_STATE, _NEEDS_AUTH))
        except Exception:  # an API without an error body: the close says it
            log.debug("%s: no error body for %s", self._name, _api_name(key), exc_info=True)
        conn.close()
        return False

    def _handshake(self, conn: SaslConnection, header: RequestHeader, body: Any) -> None:
        mechanism = body.get("mechanism") if isinstance(body, dict) else None
        if self._users is None or conn.authenticated or conn.sasl_mechanism is not None:
            offered = [MECHANISM] if self._users is not None else []
            code = (ErrorCode.ILLEGAL_SASL_STATE if self._users is not None
                    else ErrorCode.UNSUPPORTED_SASL_MECHANISM)
            conn.respond(header.api_key, header.api_version, header.correlation_id,
                         _handshake_body(code, offered))
            conn.close()
            return
        if mechanism != MECHANISM or header.api_version < 1:
            # v0 sends raw tokens after the handshake, which this listener does not read.
            log.warning("%s: closing %s: SASL mechanism %r (v%d) is not PLAIN over "
                        "SaslAuthenticate", self._name, conn.peer, mechanism, header.api_version)
            conn.respond(header.api_key, header.api_version, header.correlation_id,
                         _handshake_body(ErrorCode.UNSUPPORTED_SASL_MECHANISM, [MECHANISM]))
            conn.close()
            return
        conn.sasl_mechanism = MECHANISM
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     _handshake_body(ErrorCode.NONE, [MECHANISM]))

    def _authenticate(self, conn: SaslConnection, header: RequestHeader, body: Any) -> None:
        if self._users is None or conn.authenticated or conn.sasl_mechanism != MECHANISM:
            conn.respond(header.api_key, header.api_version, header.correlation_id,
                         _authenticate_body(ErrorCode.ILLEGAL_SASL_STATE,
                                            "SaslAuthenticate without a SaslHandshake for PLAIN "
                                            "on a SASL listener"))
            conn.close()
            return
        token = body.get("auth_bytes") if isinstance(body, dict) else None
        username = self._users.authenticate(bytes(token or b""))
        if username is None:
            log.warning("%s: authentication failed from %s", self._name, conn.peer)
            conn.respond(header.api_key, header.api_version, header.correlation_id,
                         _authenticate_body(ErrorCode.SASL_AUTHENTICATION_FAILED, AUTH_FAILED))
            conn.close()
            return
        conn.authenticated = True
        conn.principal = f"User:{username}"
        conn.respond(header.api_key, header.api_version, header.correlation_id,
                     _authenticate_body(ErrorCode.NONE, None))


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"
