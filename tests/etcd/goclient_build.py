"""Builds ``tests/etcd/goclient`` (etcd's Go client against kraft-spark) once per version of
its sources, into a directory the caller gives (the pytest cache); says why not when there is
no Go toolchain or the Go module proxy cannot be reached (a reason to skip), raises when the
build itself fails (a bug in the program)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kraft_spark.lincheck.go_build import build_program

SOURCE_DIR = Path(__file__).resolve().parent / "goclient"
TIMEOUT_S = 300.0


def _sources() -> list[Path]:
    return sorted([SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum", *SOURCE_DIR.glob("*.go")])


def build(cache: Path) -> tuple[Path | None, str | None]:
    """(the binary, None) or (None, why it cannot be built here)."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return build_program(SOURCE_DIR, _sources(), cache / f"goclient-{digest.hexdigest()[:16]}",
                         modules="go.etcd.io/etcd/client/v3", timeout_s=TIMEOUT_S)
