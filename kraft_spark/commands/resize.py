"""``kraft-spark resize --voters N``: resize the running Spark application's quorum live.

Asks the application's HTTP endpoint (``POST /v1/app/voters``), then follows ``GET /v1/quorum``
until the voters are ``0..N-1``, printing each change it sees; exit 1 when that does not happen
within ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from typing import Any

from kraft_spark.commands.http_token import token_args
from kraft_spark.commands.warehouse_flag import warehouse_arg
from kraft_spark.errors import CommandError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "resize", help="resize the running Spark application's quorum (KIP-853), live")
    parser.add_argument("--voters", type=int, required=True, help="the voter count to reach")
    parser.add_argument("--url", default="http://127.0.0.1:8080",
                        help="the application's HTTP endpoint (default http://127.0.0.1:8080)")
    token_args(parser)
    warehouse_arg(parser, "--url")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for the new voters (default 180)")
    parser.set_defaults(func=_resize)


def _call(url: str, token: str | None, body: Any = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise CommandError(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CommandError(f"{url}: {exc}; is the application running (kraft-spark run)? "
                           "(--url)", exit_code=1) from None


def _resize(args: argparse.Namespace) -> int:
    base = args.url.rstrip("/")
    answer = _call(f"{base}/v1/app/voters", args.token, {"voters": args.voters})
    print(f"resize {answer['from']} -> {answer['voters']}: {answer['change']}", flush=True)
    wanted = list(range(args.voters))
    deadline = time.monotonic() + args.timeout
    seen: list[int] | None = None
    while True:
        try:
            info = _call(f"{base}/v1/quorum", args.token)
            voters = sorted(int(v["id"]) for v in info["currentVoters"])
        except CommandError:
            voters = seen or []  # no leader for a moment: the voters are being relaunched
        if voters != seen:
            print(f"voters {voters}", flush=True)
            seen = voters
        if voters == wanted:
            return 0
        if time.monotonic() > deadline:
            raise CommandError(f"the voters are {voters} after {args.timeout:.0f} s, not "
                               f"{wanted}: see the application's log", exit_code=1)
        time.sleep(0.5)
