"""Generate the Python modules of etcd's v3 API from the vendored ``.proto`` files.

``python -m kraft_spark.etcd.pb.generate`` (``make etcd-protos``) rewrites this package's
``*_pb2.py`` and ``*_pb2.pyi``; ``--check`` only says whether regenerating
would change them (tests/etcd/test_protos.py runs it, so the committed modules never drift from
the vendored sources). Needs ``grpcio-tools`` (a dev dependency); the generated modules need
only ``protobuf`` at run time. No ``*_pb2_grpc.py``: the servers register each service from
its descriptor (``api.etcd.handlers``), which is what those stubs hold, in a few lines.

The sources are etcd's own, unmodified, in ``third_party/etcd/`` (see its NOTICE). They import
annotations that only matter to Go (grpc-gateway's HTTP mapping, OpenAPI, gogoproto, etcd's
``versionpb`` field versions); :func:`strip` removes those imports and every custom option
``(...)`` that uses them, and points the remaining imports at this package. Nothing else
changes: every message, field (name, number, type), enum, service and method stays as etcd
defines it, so the bytes on the wire and the gRPC method names (``/etcdserverpb.KV/Range``) are
etcd's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO = PACKAGE_DIR.parents[2]
VENDORED = REPO / "third_party" / "etcd"
PROTO_PACKAGE = "kraft_spark/etcd/pb"
# etcd's path -> this package's module name (the .proto's stem).
SOURCES = {
    "api/mvccpb/kv.proto": "kv",
    "api/authpb/auth.proto": "auth",
    "api/etcdserverpb/rpc.proto": "rpc",
    "server/etcdserver/api/v3lock/v3lockpb/v3lock.proto": "v3lock",
    "server/etcdserver/api/v3election/v3electionpb/v3election.proto": "v3election",
}
# Imports that only Go's generators use.
_DROPPED_IMPORTS = ("google/api/annotations.proto", "protoc-gen-openapiv2/",
                    "gogoproto/", "etcd/api/versionpb/")


def _skip_option(text: str, start: int) -> int:
    """The index just past the custom option statement starting at ``start`` (``option (``):
    its value is a string or a ``{...}`` block (balanced, strings skipped), then ``;``."""
    i, depth, quote = start, 0, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    raise ValueError(f"unterminated option at {start}")


def strip(source: str) -> str:
    """``source`` without Go-only imports and custom options, its imports made local."""
    lines = []
    for line in source.splitlines():
        match = re.match(r'\s*import\s+"([^"]+)"\s*;', line)
        if match:
            path = match.group(1)
            if path.startswith(_DROPPED_IMPORTS):
                continue
            stem = next((s for p, s in SOURCES.items() if path == f"etcd/{p}"), None)
            if stem is None:
                raise ValueError(f"unknown import {path!r}: vendor it or drop it")
            lines.append(f'import "{PROTO_PACKAGE}/{stem}.proto";')
            continue
        lines.append(line)
    text = "\n".join(lines) + "\n"
    # Statement options: `option (name) = value;` (a string, or a {...} block).
    out, pos = [], 0
    for match in re.finditer(r"option\s*\(", text):
        if match.start() < pos:
            continue
        out.append(text[pos:match.start()])
        pos = _skip_option(text, match.start())
    out.append(text[pos:])
    text = "".join(out)
    # Field and enum-value options: `[(name)="x"]`, alone in their brackets in etcd's files.
    text = re.sub(r'\s*\[\s*\([A-Za-z_.]+\)\s*=\s*"[^"]*"\s*\]', "", text)
    if "(" in re.sub(r"rpc\s+\w+\s*\([^)]*\)\s*returns\s*\([^)]*\)|//[^\n]*", "", text):
        raise ValueError("a custom option is left: extend strip()")
    return text


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules into ``out_dir``; returns their paths."""
    from grpc_tools import protoc  # a dev dependency: only generating needs it

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        gen = Path(tmp) / "gen"
        (src / PROTO_PACKAGE).mkdir(parents=True)
        gen.mkdir()
        names = []
        for path, stem in SOURCES.items():
            text = strip((VENDORED / path).read_text(encoding="utf-8"))
            (src / PROTO_PACKAGE / f"{stem}.proto").write_text(text, encoding="utf-8")
            names.append(f"{PROTO_PACKAGE}/{stem}.proto")
        code = protoc.main(["grpc_tools.protoc", f"-I{src}", f"--python_out={gen}",
                            f"--pyi_out={gen}", *names])
        if code != 0:
            raise RuntimeError(f"protoc failed ({code})")
        written = []
        for file in sorted((gen / PROTO_PACKAGE).iterdir()):
            target = out_dir / file.name
            shutil.copyfile(file, target)
            written.append(target)
        return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only say whether regenerating would change the committed modules")
    args = parser.parse_args(argv)
    if not args.check:
        for path in generate(PACKAGE_DIR):
            print(path.relative_to(REPO))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = [p.name for p in generate(Path(tmp))
                 if not (PACKAGE_DIR / p.name).exists()
                 or (PACKAGE_DIR / p.name).read_bytes() != p.read_bytes()]
    if stale:
        print(f"stale generated modules: {', '.join(stale)}: run `make etcd-protos`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
