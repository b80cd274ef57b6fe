"""Where a command finds its HTTP credential: ``--token-file FILE`` (mode 0600), then
``$KRAFT_SPARK_HTTP_TOKEN``, then the admin token of ``<data-dir>/http-credentials`` (the file
``make run`` and ``kraft-spark local`` create; ``--data-dir``, default ``$KRAFT_SPARK_DATA_DIR``
or ``./data``). Readable only by the user who started the quorum, as a kubeconfig is.

``--token TOKEN`` is still accepted for scripts, but a token on a command line is visible to
every user of the host in ``ps``: the file or the environment is the way.
"""

from __future__ import annotations

import os
from typing import Any

from kraft_spark.errors import CommandError

TOKEN_ENV = "KRAFT_SPARK_HTTP_TOKEN"
DATA_DIR_ENV = "KRAFT_SPARK_DATA_DIR"


def token_args(parser: Any) -> None:
    parser.add_argument("--token-file", default=None, metavar="FILE",
                        help="a file (mode 0600) holding the bearer token")
    parser.add_argument("--token", default=None,
                        help="the bearer token (visible in ps: prefer --token-file or "
                        f"${TOKEN_ENV})")
    parser.add_argument("--data-dir", dest="token_data_dir", default=None, metavar="DIR",
                        help="take the admin token of DIR/http-credentials (default "
                        f"${DATA_DIR_ENV} or ./data), when no other token is given")


def resolve_token(args: Any) -> None:
    """Fill ``args.token`` for a command that took :func:`token_args` (None: send none)."""
    if not hasattr(args, "token_file"):
        return
    args.token = find_token(args.token, args.token_file, args.token_data_dir)


def find_token(token: str | None, token_file: str | None, data_dir: str | None) -> str | None:
    if token:
        return token
    if not token_file and os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip()
    from kraft_spark.secret_files import CREDENTIALS_FILE, SecretFileError, read_secret

    try:
        if token_file:
            return read_secret(token_file)
        directory = data_dir or os.environ.get(DATA_DIR_ENV) or "data"
        path = os.path.join(directory, CREDENTIALS_FILE)
        if not os.path.exists(path):
            return None
        # Imported here: reading credentials needs its hashing (~20 ms), no file does not.
        from kraft_spark.http_auth import Credentials, Scope

        return Credentials.load(path).token_of(Scope.ADMIN)
    except (SecretFileError, OSError) as exc:
        raise CommandError(f"the HTTP token: {exc}") from None
