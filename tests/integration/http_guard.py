"""Every route of a served HTTP API tried without a credential, with a wrong one and with one
of too small a scope (``kraft_spark.http_auth``): shared by the security tests of `kraft-spark
local` (tests/integration/test_security.py) and of the Spark application
(tests/spark/test_application.py)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

from kraft_spark.http_auth import Scope, required_scope


def call(url: str, method: str = "GET", token: str | None = None,
         body: Any = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One request: (status, parsed JSON answer, headers)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else (b"{}" if method in (
        "POST", "PUT") else None)
    request = urllib.request.Request(url, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            status, answer_headers = response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        text, status, answer_headers = err.read().decode(), err.code, dict(err.headers)
        err.close()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = {"text": text}
    return status, parsed if isinstance(parsed, dict) else {"list": parsed}, answer_headers


def routes(base: str, token: str) -> list[tuple[str, str]]:
    """Every (method, concrete path) of the served OpenAPI schema (path parameters filled)."""
    status, schema, _ = call(f"{base}/openapi.json", token=token)
    assert status == 200, schema
    found = []
    for path, operations in schema["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "7", path.replace("{key:path}", "k"))
        found += [(method.upper(), concrete) for method in operations]
    return found


def assert_every_route_guarded(base: str, tokens: dict[Scope, str]) -> list[tuple[str, str]]:
    """Each route of ``base`` but the probes: 401 without a token, with an unknown one and with
    the admin's altered by one character; 403 with each token of too small a scope, naming
    the scope needed. Returns the routes tried (the caller checks that nothing changed)."""
    admin = tokens[Scope.ADMIN]
    tried = routes(base, admin)
    for method, route in tried:
        needed = required_scope(method, route.split("?")[0])
        if needed is None:  # the probes stay open
            assert route in ("/healthz", "/readyz"), route
            continue
        for token in (None, "not-a-token", admin[:-1] + ("x" if admin[-1] != "x" else "y")):
            status, answer, headers = call(f"{base}{route}", method, token)
            assert status == 401, (base, method, route, token, status, answer)
            assert not token or token not in json.dumps(answer)  # never echoed
            assert "Authorization: Bearer <token>" in answer["error"]
            assert headers["www-authenticate"].startswith("Bearer")
        for scope, token in tokens.items():
            if scope >= needed:
                continue
            status, answer, headers = call(f"{base}{route}", method, token)
            assert status == 403, (base, method, route, scope, status, answer)
            assert token not in json.dumps(answer) + json.dumps(headers)
            assert f"needs scope {needed.label}" in answer["error"]
            assert "insufficient_scope" in headers["www-authenticate"]
    return tried
