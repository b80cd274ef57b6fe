"""PyPI's aetcd (asyncio, generated with protobuf >= 4: works beside this project's protobuf 7
and grpcio, in the ``dev`` extra) against a real ``kraft-spark local``: put/get/prefix/delete,
a Txn down both branches, a watch, a lease with a key and its revocation, and aetcd's lock
(its own recipe over KV and Lease, not the Lock service). Credentials as etcd's: user = the
credential's name, password = its token.

When this interpreter lacks aetcd, the session runs in a venv of its own, made once under
``~/.cache/kraft-spark/`` (skipped, saying why, when PyPI cannot be reached)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.lincheck.nemesis import KvQuorum

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

AETCD = "aetcd==1.0.0"
SESSION = Path(__file__).with_name("aetcd_session.py")
CACHED_VENV = Path.home() / ".cache" / "kraft-spark" / "aetcd-1.0.0"


def _python_with_aetcd() -> str:
    if importlib.util.find_spec("aetcd") is not None:
        return sys.executable
    python = CACHED_VENV / "bin" / "python"
    if not python.exists():
        venv.create(CACHED_VENV, with_pip=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--timeout", "20",
                               AETCD], capture_output=True, text=True, timeout=180,
                              check=False)
        if done.returncode != 0:
            shutil.rmtree(CACHED_VENV, ignore_errors=True)
            pytest.skip(f"aetcd is not installed and pip could not install it: "
                        f"{done.stderr.strip()[-300:]}")
    return str(python)


def test_aetcd_session(etcd_quorum: KvQuorum, etcd_admin: tuple[str, str]) -> None:
    python = _python_with_aetcd()
    host, port = str(etcd_quorum.nodes[0]["etcd"]).rsplit(":", 1)
    done = subprocess.run([python, str(SESSION), host, port, *etcd_admin],
                          capture_output=True, text=True, timeout=15, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "get": "1", "prefix": ["py/a", "py/b"], "then": [True, None], "else": [False, "11"],
        "watch": ["PUT", "x"], "leased": "v", "revoked": True, "locked": True,
        "deleted": 3}
