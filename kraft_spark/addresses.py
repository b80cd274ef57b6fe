"""What an address says about who can reach it."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``host`` names this machine's loopback interface only (``localhost``, 127.0.0.0/8,
    ``::1``); a wildcard (``0.0.0.0``, ``::``) or a name is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as a URL or a ``host:port`` writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def http_url(host: str, port: int) -> str:
    return f"http://{url_host(host)}:{port}"
