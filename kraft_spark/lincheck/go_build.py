"""Building a small Go program of the repository once per version of its sources: the
linearizability checker (``porcupine/``, :mod:`kraft_spark.lincheck.checker`), the test
suite's etcd client program (``tests/etcd/goclient``) and etcd's own benchmark tool, a ``tool``
of the module in ``bench/etcd_benchmark`` (:mod:`bench.etcd_tool`).

A program is built from a copy of its files (``go`` never rewrites tracked files), under a file
lock (several processes may ask at once: the first builds, the others find the binary), into a
cache directory whose name or binary carries the sources' hash. Fetching its modules through the
Go module proxy comes first: its failure (no Go proxy reachable) is a reason to skip, given
back; a build that fails afterwards is a bug in the program and raises.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_program", "go_binary", "go_env"]

NO_GO = "no Go toolchain (`go` is not on PATH nor in /usr/local/go/bin)"


def go_binary() -> str | None:
    """The ``go`` command: on PATH, else the official install's place; None if neither."""
    found = shutil.which("go")
    if found:
        return found
    default = Path("/usr/local/go/bin/go")
    return str(default) if default.is_file() else None


def go_env(cache: Path) -> dict[str, str]:
    """The environment of ``go``: modules as go.mod says (``-mod=mod``), no VCS stamping, never
    a toolchain download (go.mod may ask for another Go), and, without a home directory, the
    module and build caches under ``cache``."""
    env = dict(os.environ)
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env["GOFLAGS"] = " ".join([*flags, "-mod=mod", "-buildvcs=false"])
    env.setdefault("GOTOOLCHAIN", "local")
    if not env.get("HOME") and not env.get("GOPATH"):
        env["GOPATH"] = str(cache / "gopath")
    if not env.get("HOME") and not env.get("GOCACHE"):
        env["GOCACHE"] = str(cache / "gocache")
    return env


def build_program(source_dir: Path, files: Sequence[Path], binary: Path, *, modules: str,
                  timeout_s: float, package: str = ".") -> tuple[Path | None, str | None]:
    """``(binary, None)`` once the Go program made of ``files`` (of ``source_dir``) is built at
    ``binary`` (at once if it is there already), or ``(None, why not)`` when there is no Go or
    its modules (``modules``, named in the reason) cannot be fetched. ``package`` is what
    ``go build`` builds: the files' own main package, or a main package of a module they
    require (a ``tool`` line of their go.mod). Raises RuntimeError when the build itself
    fails."""
    go = go_binary()
    if go is None:
        return None, NO_GO
    if binary.is_file():
        return binary, None
    cache = binary.parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # another process may be building it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary, None
        src = Path(tempfile.mkdtemp(prefix="src-", dir=cache))
        try:
            for path in files:
                shutil.copy(path, src / path.name)
            env = go_env(cache)
            try:
                fetched = subprocess.run([go, "mod", "download"], cwd=src, env=env,
                                         capture_output=True, text=True, timeout=timeout_s,
                                         check=False)
            except subprocess.TimeoutExpired:
                return None, (f"downloading {modules} took over {timeout_s:.0f} s (is the Go "
                              "module proxy reachable?)")
            if fetched.returncode != 0:
                detail = (fetched.stderr or fetched.stdout).strip().splitlines()[-3:]
                return None, (f"cannot download {modules} (is the Go module proxy "
                              "reachable?): " + " | ".join(detail))
            tmp = cache / f"{binary.name}.{os.getpid()}.tmp"
            done = subprocess.run([go, "build", "-o", str(tmp), package], cwd=src, env=env,
                                  capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
            if done.returncode != 0:
                raise RuntimeError(f"building {source_dir} failed:\n{done.stderr}{done.stdout}")
            tmp.replace(binary)
        finally:
            shutil.rmtree(src, ignore_errors=True)
    return binary, None
