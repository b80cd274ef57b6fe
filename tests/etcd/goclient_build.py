"""Builds ``tests/etcd/goclient`` (etcd's Go client against kraft-spark) once per version of
its sources, into a directory the caller gives (the pytest cache); says why not when there is
no Go toolchain or the Go module proxy cannot be reached (a reason to skip), raises when the
build itself fails (a bug in the program)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "goclient"
TIMEOUT_S = 300.0


def _sources() -> list[Path]:
    return sorted([SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum", *SOURCE_DIR.glob("*.go")])


def _go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    default = Path("/usr/local/go/bin/go")
    return str(default) if default.is_file() else None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env["GOFLAGS"] = " ".join([*flags, "-mod=mod", "-buildvcs=false"])
    env.setdefault("GOTOOLCHAIN", "local")  # never download a toolchain
    return env


def build(cache: Path) -> tuple[Path | None, str | None]:
    """(the binary, None) or (None, why it cannot be built here)."""
    go = _go()
    if go is None:
        return None, "no Go toolchain (`go` is not on PATH nor in /usr/local/go/bin)"
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    binary = cache / f"goclient-{digest.hexdigest()[:16]}"
    if binary.is_file():
        return binary, None
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # another process may be building it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary, None
        src = Path(tempfile.mkdtemp(prefix="goclient-src-", dir=cache))
        try:
            for path in _sources():  # built from a copy: `go` never rewrites tracked files
                shutil.copy(path, src / path.name)
            try:
                fetched = subprocess.run([go, "mod", "download"], cwd=src, env=_env(),
                                         capture_output=True, text=True, timeout=TIMEOUT_S,
                                         check=False)
            except subprocess.TimeoutExpired:
                return None, f"downloading go.etcd.io/etcd/client/v3 took over {TIMEOUT_S:.0f} s"
            if fetched.returncode != 0:
                detail = (fetched.stderr or fetched.stdout).strip().splitlines()[-3:]
                return None, ("cannot download go.etcd.io/etcd/client/v3 (is the Go module "
                              "proxy reachable?): " + " | ".join(detail))
            tmp = cache / f"goclient.{os.getpid()}.tmp"
            done = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=src, env=_env(),
                                  capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"building {SOURCE_DIR} failed:\n{done.stderr}{done.stdout}")
            tmp.replace(binary)
        finally:
            shutil.rmtree(src, ignore_errors=True)
    return binary, None
