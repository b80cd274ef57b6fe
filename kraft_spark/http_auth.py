"""Who may call the HTTP API: bearer tokens, each with a name and a scope.

Scopes are ordered, each including the ones below it, as etcd's roles and Kafka's ACLs separate
use from administration:

* ``read``: every ``GET`` (records, keys, watches, the quorum, metrics, the API's docs);
* ``write``: appends, conditional writes and deletes, leases (grant; keep alive and revoke the
  ones it granted: ``kraft_spark.store.leases``);
* ``admin``: changing the voters (``/v1/quorum/voters``, the application's ``/v1/app/...``),
  keeping alive and revoking any lease.

``/healthz`` and ``/readyz`` stay open (probes carry no credentials; they tell only whether a
leader is known).

The credentials file has one credential per line, ``<scope> <token> [<name>]``; ``#`` starts a
comment. It must be readable by its owner only (``kraft_spark.secret_files``). The single-token
setting ``kraft.http.token`` is one ``admin`` credential named ``token``.

Invariants: a token is compared in constant time against every credential (no early exit that
times which one matched); no error message, log line or ``repr`` carries a token (errors name
the file and the line number).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from kraft_spark import secret_files
from kraft_spark.addresses import is_loopback
from kraft_spark.secret_files import (
    SecretFileError,
    new_token,
    read_secret,
    write_secret,
)

log = logging.getLogger("kraft_spark.http_auth")

CREDENTIALS_FILE = secret_files.CREDENTIALS_FILE  # in the data directory, when generated

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
ADMIN_PREFIXES = ("/v1/quorum/voters", "/v1/app/")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Scope(enum.IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Scope:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown scope {text!r}: use read, write or admin") from None


@dataclass(frozen=True)
class Identity:
    name: str
    scope: Scope


@dataclass(frozen=True)
class Credential:
    scope: Scope
    token: str = field(repr=False)
    name: str = ""


class Credentials:
    """The tokens a server accepts. Picklable (it travels to the executors' voters inside the
    barrier task, never through a command line or a file others can read)."""

    def __init__(self, entries: Iterable[Credential]) -> None:
        self.entries = tuple(entries)
        if not self.entries:
            raise ValueError("no credentials: give at least one")
        for entry in self.entries:
            if not entry.token or any(c.isspace() for c in entry.token):
                raise ValueError(f"credential {entry.name or entry.scope.label!r}: a token is "
                                 "one word without spaces")
        self._digests = tuple(
            (hashlib.sha256(e.token.encode()).digest(), Identity(e.name or e.scope.label,
                                                                 e.scope))
            for e in self.entries
        )

    def __repr__(self) -> str:  # never the tokens
        names = ", ".join(f"{i.name}:{i.scope.label}" for _, i in self._digests)
        return f"Credentials({names})"

    def __reduce__(self) -> tuple[type[Credentials], tuple[tuple[Credential, ...]]]:
        return (Credentials, (self.entries,))

    def identify(self, token: bytes) -> Identity | None:
        """The identity ``token`` belongs to, or None. Compares against every credential."""
        digest = hashlib.sha256(token).digest()
        found: Identity | None = None
        for known, identity in self._digests:
            if hmac.compare_digest(digest, known) and found is None:
                found = identity
        return found

    def token_of(self, scope: Scope) -> str | None:
        """The first token of exactly ``scope`` (clients on the owner's host pick theirs)."""
        return next((e.token for e in self.entries if e.scope == scope), None)

    @classmethod
    def single(cls, token: str) -> Credentials:
        """``kraft.http.token``: one admin credential."""
        return cls([Credential(Scope.ADMIN, token.strip(), "token")])

    @classmethod
    def parse(cls, text: str, source: str) -> Credentials:
        entries = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            if len(words) not in (2, 3):
                raise SecretFileError(
                    f"{source} line {number}: expected '<scope> <token> [<name>]' "
                    f"({len(words)} words found)")
            try:
                scope = Scope.parse(words[0])
            except ValueError as exc:
                raise SecretFileError(f"{source} line {number}: {exc}") from None
            entries.append(Credential(scope, words[1], words[2] if len(words) == 3 else ""))
        if not entries:
            raise SecretFileError(f"{source}: no credentials in it; add lines "
                                  "'<scope> <token> [<name>]'")
        return cls(entries)

    @classmethod
    def load(cls, path: str) -> Credentials:
        """Read a credentials file (refused when others can read it)."""
        return cls.parse(read_secret(path), path)

    def render(self) -> str:
        lines = ["# kraft-spark HTTP credentials: <scope> <token> [<name>]; scopes read < write "
                 "< admin. Keep this file mode 0600."]
        lines += [f"{e.scope.label} {e.token} {e.name}".rstrip() for e in self.entries]
        return "\n".join(lines) + "\n"


def load_or_create(path: str) -> tuple[Credentials, bool]:
    """The credentials kept at ``path``, created on a first start with one token per scope
    (named admin, writer, reader). Returns them and whether they were created now."""
    if os.path.exists(path):
        return Credentials.load(path), False
    created = Credentials([Credential(Scope.ADMIN, new_token(), "admin"),
                           Credential(Scope.WRITE, new_token(), "writer"),
                           Credential(Scope.READ, new_token(), "reader")])
    write_secret(path, created.render())
    return created, True


def token_in(path: str, scope: Scope) -> str:
    """The first token of exactly ``scope`` in the credentials file at ``path`` (a client on
    the owner's host: tests, benchmarks, the CLI)."""
    token = Credentials.load(path).token_of(scope)
    if token is None:
        raise SecretFileError(f"{path}: no {scope.label} credential in it")
    return token


def required_scope(method: str, path: str) -> Scope | None:
    """The scope a request needs; None for the open paths."""
    if path in OPEN_PATHS:
        return None
    if path.startswith(ADMIN_PREFIXES) and method not in READ_METHODS:
        return Scope.ADMIN
    return Scope.READ if method in READ_METHODS else Scope.WRITE


def bearer_token(header: bytes | None) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header value, None otherwise."""
    if header is None:
        return None
    scheme, _, token = header.partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return None
    return token.strip()


def resolve_http_credentials(path: str | None, token: str | None, insecure: bool,
                             host: str) -> Credentials | None:
    """See :func:`http_credentials_of` (shared with the Spark application's settings)."""
    # Imported here: the raft package (~50 ms) is a server's, and the command-line clients
    # read their token through this module.
    from kraft_spark.raft.config import ConfigError

    if path and token:
        raise ConfigError("give kraft.http.credentials.file or kraft.http.token, not both")
    if path:
        try:
            return Credentials.load(path)
        except (SecretFileError, OSError) as exc:
            raise ConfigError(f"kraft.http.credentials.file: {exc}") from None
    if token:
        return Credentials.single(token)
    if insecure:
        log.warning("kraft.http.insecure=true: the HTTP API on %s takes every call without "
                    "credentials; anyone who reaches it can append and change the voters", host)
        return None
    if not is_loopback(host):
        raise ConfigError(
            f"the HTTP API would listen on {host} without authentication: set "
            "kraft.http.credentials.file (scoped tokens) or kraft.http.token, or bind it to "
            "127.0.0.1, or set kraft.http.insecure=true to accept anyone who reaches it")
    return None


def server_credentials(*, path: str | None, token: str | None, insecure: bool,
                       default_path: str) -> tuple[str | None, Credentials | None, bool]:
    """What a product entry point (``make run``'s application, ``kraft-spark local``) serves
    with: the operator's credentials file or token, nothing with ``insecure``, else the
    credentials kept at ``default_path`` (created on a first start). Returns the file (None for
    a token or insecure), the credentials, and whether the file was created now. Raises
    ConfigError naming the setting."""
    from kraft_spark.raft.config import ConfigError  # as resolve_http_credentials

    if insecure and (path or token):
        raise ConfigError("kraft.http.insecure=true contradicts the credentials given: "
                          "remove one")
    if insecure:
        return None, None, False
    if path or token:
        return path, resolve_http_credentials(path, token, False, "127.0.0.1"), False
    try:
        credentials, created = load_or_create(default_path)
    except (SecretFileError, OSError) as exc:
        raise ConfigError(f"the HTTP API's credentials: {exc}") from None
    return default_path, credentials, created
