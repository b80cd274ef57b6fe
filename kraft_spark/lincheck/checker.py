"""Linearizability checking of key-value histories with porcupine (a Go library).

The checker is the Go program in ``porcupine/`` (its doc comment defines the model). It is
built once per version of its sources into ``$XDG_CACHE_HOME/kraft-spark/porcupine-<hash>/``
(``~/.cache`` without XDG_CACHE_HOME), fetching github.com/anishathalye/porcupine through the
Go module proxy the first time.

A history is ``{"ops": [op, ...]}``; each op is a dict::

    {"client": int, "kind": "get" | "put" | "cas" | "delete", "key": str,
     "value": str | None,            # put / cas: the value written (cas None: a delete)
     "expect_version": int | None,   # cas: the version the key must have (0: absent)
     "call_ns": int, "return_ns": int | None,   # None: the outcome is unknown
     "ok": bool | None,              # put / delete: True; cas: whether it was applied
     "present": bool | None, "out_value": str | None, "out_version": int | None}  # get

A write with no answer (a timeout, a lost connection, a 504) has ``return_ns`` None: it may
have taken effect at any point after its call. Its ``ok`` None means the outcome is unknown
too (it may or may not have applied); an ``ok`` learned afterwards (from the log, see
:func:`resolve_unknown`) keeps the time unknown but fixes the outcome. An op that failed
without effect is left out (a read that failed, a write refused before it was attempted).
:class:`History` records one.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft_spark.lincheck.go_build import build_program

SOURCE_DIR = Path(__file__).resolve().parent / "porcupine"
SOURCES = ("go.mod", "go.sum", "main.go")
BUILD_TIMEOUT_S = 300.0
KINDS = ("get", "put", "cas", "delete")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    summary: str
    visualization: Path | None
    verdict: str = ""  # "ok", "illegal" or "unknown" (the check timed out)


def _cache_dir() -> Path:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kraft-spark" / f"porcupine-{digest.hexdigest()[:16]}"


_build_lock = threading.Lock()
_built: list[tuple[Path | None, str | None]] = []  # [(binary, reason it is unusable)]


def _build() -> tuple[Path | None, str | None]:
    with _build_lock:
        if not _built:
            _built.append(_build_once())
        return _built[0]


def _build_once() -> tuple[Path | None, str | None]:
    try:
        cache = _cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return None, f"cannot create the checker's cache directory: {exc}"
    return build_program(SOURCE_DIR, [SOURCE_DIR / name for name in SOURCES], cache / "lincheck",
                         modules="github.com/anishathalye/porcupine (the linearizability "
                         "checker)", timeout_s=BUILD_TIMEOUT_S)


def go_available() -> str | None:
    """None when the checker can run; otherwise why not (for ``pytest.skip``): no Go, or the
    porcupine module cannot be downloaded. Builds it the first time (that can take a while);
    a build that fails otherwise raises RuntimeError (a bug, not a reason to skip)."""
    return _build()[1]


def _as_ops(ops: History | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(ops, History):
        return ops.ops()
    return [dict(op) for op in ops]


def check_history(ops: History | Iterable[Mapping[str, Any]], timeout_s: float = 60.0, *,
                  out_dir: Path | None = None) -> CheckResult:
    """Check ``ops`` (dicts of the module's format, or a :class:`History`). The history (as
    ``history.json``) and, on a violation, porcupine's visualization (``violation.html``) are
    written to ``out_dir`` (a new temporary directory when None, removed again when the history
    is linearizable: the simulator checks one per seed)."""
    binary, reason = _build()
    if binary is None:
        raise RuntimeError(reason)
    out = Path(tempfile.mkdtemp(prefix="lincheck-")) if out_dir is None else out_dir
    out.mkdir(parents=True, exist_ok=True)
    history_path = out / "history.json"
    history_path.write_text(json.dumps({"ops": _as_ops(ops)}))
    viz = out / "violation.html"
    with contextlib.suppress(FileNotFoundError):
        viz.unlink()
    cmd = [str(binary), str(history_path), "-timeout", f"{timeout_s}s", "-viz", str(viz)]
    try:
        # Writing the visualization of a large history takes a while after the check itself.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60,
                              check=False)
    except subprocess.TimeoutExpired:
        return CheckResult(False, f"lincheck: unknown: the checker ran over {timeout_s:.0f} s "
                           f"(history: {history_path})", None, "unknown")
    summary = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    line = summary[-1] if summary else f"lincheck exited {proc.returncode}"
    if proc.returncode == 0:
        if out_dir is None:
            shutil.rmtree(out, ignore_errors=True)
        return CheckResult(True, line, None, "ok")
    if proc.returncode == 1:
        return CheckResult(False, line, viz if viz.is_file() else None, "illegal")
    if proc.returncode == 2:
        return CheckResult(False, line, None, "unknown")
    raise RuntimeError(f"lincheck failed (exit {proc.returncode}) on {history_path}: "
                       f"{proc.stderr.strip()}")


def resolve_unknown(ops: Iterable[Mapping[str, Any]], logged: Collection[tuple[str, str]],
                    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Settle unanswered writes with the log: ``logged`` holds the (key, value) of every
    record the log committed, read after every op of the history had completed (values being
    unique to their op). A put or cas whose value is not there never took effect: it is left
    out. A put whose value is there took effect (``ok`` True, the time still unknown); a cas
    there was judged where it landed, so its outcome stays unknown, as does a delete's (its
    record names no op).

    Sound because no op of the history can have seen a write that is not in the log by then,
    and it keeps the checker fast on a violation: each unknown outcome is a branch it explores
    at every step from its call on. Returns the ops and counts of what was done."""
    out: list[dict[str, Any]] = []
    stats = {"dropped": 0, "applied": 0, "unknown": 0}
    for original in ops:
        op = dict(original)
        if op["return_ns"] is None and op["ok"] is None and op["kind"] in ("put", "cas"):
            if (op["key"], op["value"]) not in logged:
                stats["dropped"] += 1
                continue
            if op["kind"] == "put":
                op["ok"] = True
                stats["applied"] += 1
            else:
                stats["unknown"] += 1
        elif op["return_ns"] is None and op["ok"] is None:
            stats["unknown"] += 1
        out.append(op)
    return out, stats


class History:
    """Records operations as they happen, from threads or coroutines (each method takes a
    lock for a moment and never blocks otherwise). Times come from ``time.monotonic_ns()``.

    ``invoke`` when a request is about to be sent; then exactly one of ``ok`` (the answer),
    ``fail`` (a definite failure without effect: the op is dropped) or ``unknown`` (no answer
    known: the op may have taken effect). Ops still pending when :meth:`ops` is called count
    as unknown (a get is dropped: a read has no effect)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._ops: dict[int, dict[str, Any]] = {}
        self._done: set[int] = set()
        self._dropped = dict.fromkeys(KINDS, 0)

    def invoke(self, client: int, kind: str, key: str, *, value: str | None = None,
               expect_version: int | None = None) -> int:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        op: dict[str, Any] = {
            "client": client, "kind": kind, "key": key, "value": value,
            "expect_version": expect_version, "call_ns": 0, "return_ns": None, "ok": None,
            "present": None, "out_value": None, "out_version": None,
        }
        with self._lock:
            handle = next(self._ids)
            op["call_ns"] = time.monotonic_ns()  # under the lock: ids follow call times
            self._ops[handle] = op
        return handle

    def _finish(self, handle: int, **fields: Any) -> None:
        now = time.monotonic_ns()
        with self._lock:
            if handle in self._done:
                raise ValueError(f"op {handle} already completed")
            op = self._ops[handle]
            op.update(fields)
            op["return_ns"] = now
            self._done.add(handle)

    def ok(self, handle: int, *, ok: bool = True, present: bool | None = None,
           value: str | None = None, version: int | None = None) -> None:
        """The answer: for a get ``present`` / ``value`` / ``version`` (``version`` 0 or None
        when absent), for a cas ``ok`` (False: the condition failed), else nothing."""
        with self._lock:
            kind = self._ops[handle]["kind"]
        if kind == "get":
            if present is None:
                raise ValueError("a get's answer needs present")
            self._finish(handle, present=present, out_value=value if present else None,
                         out_version=(version or 0) if present else 0)
        else:
            if not ok and kind != "cas":
                raise ValueError(f"a {kind} cannot fail definitely: use fail()")
            self._finish(handle, ok=ok)

    def fail(self, handle: int) -> None:
        """A definite failure that had no effect: the op is left out of the history."""
        with self._lock:
            if handle in self._done:
                raise ValueError(f"op {handle} already completed")
            self._dropped[self._ops.pop(handle)["kind"]] += 1

    def unknown(self, handle: int) -> None:
        """No answer known (timeout, connection lost, 504): it may or may not have applied."""
        with self._lock:
            if handle in self._done:
                raise ValueError(f"op {handle} already completed")
            self._done.add(handle)  # return_ns stays None

    def ops(self) -> list[dict[str, Any]]:
        """The history so far, in call order (copies)."""
        with self._lock:
            out = []
            for handle in sorted(self._ops):
                op = dict(self._ops[handle])
                if handle not in self._done and op["kind"] == "get":
                    continue
                out.append(op)
            return out

    def counts(self) -> dict[str, dict[str, int]]:
        """Per kind: how many ops ``succeeded`` (answered: a cas that applied), ``failed``
        (answered, not applied: a cas whose condition failed), ``unknown``, ``pending`` and
        ``dropped`` (failed without effect, left out)."""
        with self._lock:
            out = {k: {"succeeded": 0, "failed": 0, "unknown": 0, "pending": 0,
                       "dropped": self._dropped[k]} for k in KINDS}
            for handle, op in self._ops.items():
                bucket = out[op["kind"]]
                if handle not in self._done:
                    bucket["pending"] += 1
                elif op["return_ns"] is None:
                    bucket["unknown"] += 1
                elif op["kind"] == "cas" and not op["ok"]:
                    bucket["failed"] += 1
                else:
                    bucket["succeeded"] += 1
        return out
