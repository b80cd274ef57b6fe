"""The HTTP credentials a benchmark's clients send, as a user's clients would: the tokens of
the credentials file the system under test printed on start-up (``kraft-spark local``'s sidecar
line and ``kraft-spark run``'s summary line name it as ``"credentials"``), or, for
``kraft-spark local`` without a sidecar, the file it keeps in its data directory
(``<data-dir>/http-credentials``, created on a first start).

Each client takes the smallest scope its calls need (``kraft_spark.http_auth``): read for
read-only workloads (reads by key, watches, ``GET /v1/quorum``, ``/metrics``), write for
appends, conditional writes and leases, admin only for voter changes. Authentication stays on:
the figures include checking a token on every request, as users' requests pay it.

No token is ever logged: :class:`Tokens`' ``repr`` leaves them out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope


@dataclass(frozen=True)
class Tokens:
    """One token of each scope, from one credentials file."""

    path: str
    read: str = field(repr=False)
    write: str = field(repr=False)
    admin: str = field(repr=False)

    @classmethod
    def load(cls, path: str) -> Tokens:
        """The tokens of the credentials file at ``path`` (it must hold one of each scope, as
        the files ``kraft-spark local`` and ``kraft-spark run`` create do)."""
        credentials = Credentials.load(path)
        found = {scope: credentials.token_of(scope) for scope in Scope}
        missing = [scope.label for scope, token in found.items() if token is None]
        if missing:
            raise RuntimeError(f"{path}: no {', '.join(missing)} credential in it; the "
                               "benchmarks need one token of each scope")
        return cls(path, read=str(found[Scope.READ]), write=str(found[Scope.WRITE]),
                   admin=str(found[Scope.ADMIN]))

    @classmethod
    def printed(cls, line: dict[str, Any], what: str) -> Tokens:
        """The tokens of the file a start-up line names (``"credentials"``)."""
        path = line.get("credentials")
        if not path:
            raise RuntimeError(
                f"{what} printed no credentials file in its start-up line (keys: "
                f"{', '.join(sorted(line))}): the benchmarks need the HTTP API's tokens; do not "
                "run them with kraft.http.insecure or a single kraft.http.token")
        return cls.load(str(path))

    @classmethod
    def in_data_dir(cls, data_dir: str) -> Tokens:
        """The tokens ``kraft-spark local`` keeps in ``data_dir`` (its HTTP API's default
        credentials, created before any node starts)."""
        return cls.load(os.path.join(data_dir, CREDENTIALS_FILE))


def bearer(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header carrying ``token`` (none without one: etcd, PySyncObj)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
