"""An etcd user added over the Auth API reads over HTTP only what its roles let it read, on
``GET /v1/range`` as on ``GET /v1/kv``: the range judged is the one the route reads (a key, a
prefix, or from a key on), whatever the revision (etcd judges past reads by today's roles)."""

from __future__ import annotations

from typing import cast

import pytest

from api.kv_users import refusal
from kraft_spark.auth_users import Caller


class _Reader:
    """A caller allowed to read the prefix ``a/`` only (etcd's range [a/, a0))."""

    name = "alice"

    def allows(self, key: bytes, range_end: bytes, *, write: bool) -> bool:
        if write:
            return False
        if not range_end:  # one key
            return b"a/" <= key < b"a0"
        return range_end != b"\0" and key >= b"a/" and range_end <= b"a0"


@pytest.mark.parametrize(("query", "allowed"), [
    (b"key=a/x", True),
    (b"key=a/x&revision=3", True),
    (b"key=a/&prefix=true", True),
    (b"key=a/&prefix=1&limit=5&after=a/b", True),
    (b"key=b", False),
    (b"key=a/x&from_key=true", False),  # from a/x on: past the prefix
    (b"key=&from_key=true", False),     # every key
    (b"key=a/&prefix=false&key=b", False),  # the last value, as the route reads it
    (b"key=a%2Fx", True),                # percent-encoded as clients send it
])
def test_range_reads_are_judged_on_the_range_read(query: bytes, allowed: bool) -> None:
    why = refusal(cast(Caller, _Reader()), "GET", "/v1/range", query)
    assert (why is None) == allowed, why
    if not allowed:
        assert why is not None and "may not read" in why and "etcd permission denied" in why


def test_writes_and_other_routes_stay_refused() -> None:
    why = refusal(cast(Caller, _Reader()), "POST", "/v1/range", b"key=a/x")
    assert why is not None and "GET /v1/range" in why
