"""SASL/PLAIN (RFC 4616) for the Kafka-protocol listener, as Kafka's ``SASL_PLAINTEXT``
listeners speak it: who a node is, who may connect, and the client's side of the exchange.

* A users file (``kraft.sasl.plain.users.file``) lists ``<username> <password>`` lines; it is a
  secret file (``secret_files``: refused when its group or others can read it).
* A node authenticates to its peers as one of those users (``kraft.sasl.plain.username``,
  default ``admin``, as Kafka's SASL examples run controllers as their administrator), so every
  node of a quorum shares the file. Whoever can read the file can act as any user in it: it
  protects the quorum from everyone else on the network or the host.
* The exchange (Kafka's, since 1.0): SaslHandshake v1 naming ``PLAIN``, then one
  SaslAuthenticate whose token is ``authzid NUL username NUL password``; the server answers
  with an empty token or SASL_AUTHENTICATION_FAILED and closes the connection.
* The principal of an authenticated connection is ``User:<username>`` (Kafka's default
  principal builder), which ``super.users`` names.

Passwords never appear in a repr, a log line or an error message.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraft_spark.protocol import ApiKey, ErrorCode
from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import SecretFileError, read_secret

MECHANISM = "PLAIN"
USERS_FILE_KEY = "kraft.sasl.plain.users.file"
USERNAME_KEY = "kraft.sasl.plain.username"
ADMIN_USER = "admin"
DEFAULT_NODE_USER = ADMIN_USER
_USERNAME = re.compile(r"[A-Za-z0-9._@-]{1,128}")
AUTH_FAILED = "Authentication failed: Invalid username or password"


class SaslError(Exception):
    """Authentication could not be done or was refused; the message names why (never a
    password)."""


@dataclass(frozen=True)
class PlainCredentials:
    """A client's identity: a username and its password (hidden from repr)."""

    username: str
    password: str = field(repr=False)

    def token(self) -> bytes:
        """RFC 4616's message, with no separate authorization identity."""
        return b"\0" + self.username.encode() + b"\0" + self.password.encode()


@dataclass(frozen=True)
class PlainUsers:
    """The users a listener accepts (username -> password, hidden from repr)."""

    passwords: Mapping[str, str] = field(repr=False)

    @classmethod
    def parse(cls, text: str, source: str) -> PlainUsers:
        passwords: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or not _USERNAME.fullmatch(parts[0]):
                # The line itself is not quoted: it may hold a password.
                raise SecretFileError(f"{source}: line {number} is not '<username> <password>' "
                                      "(usernames: letters, digits, . _ @ -)")
            if parts[0] in passwords:
                raise SecretFileError(f"{source}: user {parts[0]} is listed twice")
            passwords[parts[0]] = parts[1]
        if not passwords:
            raise SecretFileError(f"{source}: no users; add lines '<username> <password>'")
        return cls(passwords)

    @classmethod
    def load(cls, path: str) -> PlainUsers:
        return cls.parse(read_secret(path), path)

    def credentials(self, username: str, source: str) -> PlainCredentials:
        """The credentials a node of this file uses toward its peers."""
        if username not in self.passwords:
            raise SecretFileError(f"{source} has no user {username!r} ({USERNAME_KEY}): add "
                                  f"a line '{username} <password>' or name a listed user")
        return PlainCredentials(username, self.passwords[username])

    def authenticate(self, token: bytes) -> str | None:
        """The username ``token`` proves, or None. The comparison takes the same time whether
        the user exists or not, and whatever the password's length."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            return None
        authzid, user, password = parts
        try:
            username = user.decode()
        except UnicodeDecodeError:
            return None
        if authzid and authzid != user:  # Kafka refuses acting as another identity too
            return None
        expected = self.passwords.get(username)
        ok = hmac.compare_digest(password, (expected or "\0unknown user").encode())
        return username if ok and expected is not None else None


@dataclass(frozen=True)
class SaslServerConfig:
    """A listener's SASL/PLAIN: whom it accepts, and who this node is toward its peers."""

    users: PlainUsers
    client: PlainCredentials

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SaslServerConfig | None:
        path = props.get(USERS_FILE_KEY, "").strip()
        if not path:
            if props.get("listeners", "").strip().upper().startswith("SASL_"):
                raise ConfigError(f"listeners={props['listeners']} needs {USERS_FILE_KEY} "
                                  "(lines '<username> <password>', mode 0600)")
            return None
        username = props.get(USERNAME_KEY, "").strip() or DEFAULT_NODE_USER
        try:
            users = PlainUsers.load(path)
            return cls(users, users.credentials(username, path))
        except SecretFileError as exc:
            raise ConfigError(f"{USERS_FILE_KEY}: {exc}") from None


Request = Callable[[int, int, dict[str, Any]], Awaitable[dict[str, Any]]]


async def login(request: Request, credentials: PlainCredentials) -> None:
    """The client's side: SaslHandshake v1, then SaslAuthenticate v2 with the PLAIN token.
    ``request(api_key, api_version, body)`` sends one request on the new connection."""
    hello = await request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
    if hello["error_code"] != ErrorCode.NONE:
        offered = ", ".join(hello.get("mechanisms") or []) or "none"
        raise SaslError(f"the listener does not take SASL/{MECHANISM} (it offers: {offered}); "
                        "is it a SASL_PLAINTEXT listener?")
    answer = await request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": credentials.token()})
    if answer["error_code"] != ErrorCode.NONE:
        why = answer.get("error_message") or ErrorCode(answer["error_code"]).name
        raise SaslError(f"SASL/{MECHANISM} as {credentials.username!r} refused: {why}")
