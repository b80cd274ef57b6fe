"""``--warehouse URI``, the flag of the commands that take an address (``--endpoint``,
``--url``): the address is read from the running application's record in its warehouse
(``kraft_spark.app_endpoint``, imported only when the flag is given: it loads the warehouse's
file systems and logging, which a ``kraft-spark kv get`` does without)."""

from __future__ import annotations

from typing import Any, Final

# <warehouse>/_kraft_spark/endpoint.json
DIRECTORY: Final = "_kraft_spark"
FILE: Final = "endpoint.json"


def warehouse_arg(parser: Any, flag: str) -> None:
    """``--warehouse URI`` for a command that takes an address as ``flag``;
    ``kraft_spark.app_endpoint.resolve_args`` fills that address in from the warehouse."""
    parser.add_argument("--warehouse", dest="endpoint_warehouse", default=None, metavar="URI",
                        help=f"instead of {flag}: the address the running application recorded "
                        f"in its warehouse (<URI>/{DIRECTORY}/{FILE}; --deploy-mode cluster)")
