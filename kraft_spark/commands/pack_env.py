"""``kraft-spark pack-env``: the project's environment as one relocatable archive for a cluster.

Spark's "Python Package Management" page ships a virtual environment with venv-pack and
``spark-submit --archives ENV.tar.gz#environment`` (``spark.pyspark.python=
./environment/bin/python``): every executor then runs the voters with the project and its
dependencies, on hosts where nothing was installed. ``kraft-spark run --env-archive`` submits
that way.

venv-pack refuses editable installs, and the development environment (``.venv``) is one
(``pip install -e``), so this builds a fresh, non-editable environment in a temporary directory
with ``pip install`` of the source tree and packs that. Left out: pyspark and py4j (its
dependency), which Spark itself puts first on every Python worker's path (its
``python/lib/pyspark.zip`` and ``py4j-*.zip``), so a copy in the archive would never be
imported and would add about 450 MB; delta-spark is installed without its dependencies for the
same reason (it depends on pyspark). venv-pack does not copy the interpreter: the hosts need the
same Python at the same path as this one (the Spark documentation's condition too; conda-pack or
a container image lift it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from kraft_spark.errors import CommandError

DEFAULT_OUTPUT = "dist/kraft-spark-env.tar.gz"
# Provided by Spark on every worker's PYTHONPATH, ahead of site-packages.
SPARK_PROVIDED = ("pyspark", "py4j")
# Installed without dependencies: their only heavy one is pyspark.
WITHOUT_DEPS = ("delta-spark",)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pack-env", help="build the environment archive for a cluster's executors (venv-pack)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT,
                        help=f"the archive to write (default {DEFAULT_OUTPUT})")
    parser.add_argument("--source", default=None,
                        help="the project's source tree (default: the one this command runs from)")
    parser.set_defaults(func=_pack_env)


def _name(requirement: str) -> str:
    match = _NAME.match(requirement.strip())
    return match.group(0).lower().replace("_", "-") if match else ""


def split_requirements(source: Path) -> tuple[list[str], list[str]]:
    """The project's dependencies (pyproject.toml) as (with their dependencies, without)."""
    with open(source / "pyproject.toml", "rb") as fh:
        dependencies: list[str] = tomllib.load(fh)["project"]["dependencies"]
    with_deps: list[str] = []
    without: list[str] = []
    for requirement in dependencies:
        name = _name(requirement)
        if name in SPARK_PROVIDED:
            continue
        (without if name in WITHOUT_DEPS else with_deps).append(requirement)
    return with_deps, without


def _source_tree(given: str | None) -> Path:
    source = Path(given) if given else Path(__file__).resolve().parents[2]
    if not (source / "pyproject.toml").is_file():
        raise CommandError(f"{source}: no pyproject.toml; pass --source with the project's "
                           "source tree")
    return source


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise CommandError(f"{' '.join(cmd[:4])} ... failed ({done.returncode}):\n{tail}", 1)


def pack(source: Path, output: Path, say: Any = print) -> Path:
    """Build the archive (see the module docstring); returns its path."""
    try:
        import venv_pack
    except ImportError:
        raise CommandError("venv-pack is not installed: pip install 'kraft-spark[pack]' "
                           "(or pip install venv-pack)", 1) from None
    with_deps, without = split_requirements(source)
    with tempfile.TemporaryDirectory(prefix="kraft-spark-env-") as tmp:
        env = Path(tmp) / "env"
        say(f"creating a fresh environment in {env}")
        _run([sys.executable, "-m", "venv", str(env)])
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet",
               "--disable-pip-version-check"]
        # A wheel build of the source in a copy: pip must not write build/ or *.egg-info into
        # the user's tree, and the copy leaves out their data, venv and caches.
        build = Path(tmp) / "src"
        shutil.copytree(source, build, ignore=shutil.ignore_patterns(
            ".venv", ".git", "data", "dist", "build", "site", "*.egg-info", "__pycache__",
            ".*_cache", "*.so"))
        say(f"installing the project at {source} (not editable) and its dependencies but "
            f"{', '.join(SPARK_PROVIDED)}")
        _run([*pip, "--no-deps", str(build), *without])
        _run([*pip, *with_deps])
        output.parent.mkdir(parents=True, exist_ok=True)
        say(f"packing {env} into {output} (venv-pack)")
        venv_pack.pack(prefix=str(env), output=str(output), force=True, verbose=False)
    return output


def _pack_env(args: argparse.Namespace) -> int:
    started = time.monotonic()
    output = Path(args.output).resolve()
    pack(_source_tree(args.source), output,
         lambda line: print(f"[pack-env] {line}", file=sys.stderr, flush=True))
    size_mb = os.path.getsize(output) / 1e6
    print(f"{output} ({size_mb:.0f} MB, {time.monotonic() - started:.0f} s): submit with "
          f"kraft-spark run --master URL --env-archive {args.output}")
    return 0
