"""``kraft_spark.addresses``: what an address says, and how a URL writes it."""

from __future__ import annotations

import pytest

from kraft_spark.addresses import http_url, is_loopback, url_host

pytestmark = pytest.mark.loop_free


def test_loopback_hosts_and_others() -> None:
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.3.4.5", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.org"))


def test_ipv6_hosts_are_bracketed_in_urls() -> None:
    assert (url_host("127.0.0.1"), url_host("::1"), url_host("node-1")) == (
        "127.0.0.1", "[::1]", "node-1")
    assert http_url("::1", 8080) == "http://[::1]:8080"
    assert http_url("localhost", 0) == "http://localhost:0"
