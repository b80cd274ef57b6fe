"""The documentation cannot rot: the site builds with ``mkdocs build --strict`` (a broken link or
anchor, a page missing from the nav, any warning fails), the README's links point at files that
exist, the generated references name every command, flag and HTTP route, every setting and
metric has its line, and every ``kraft-spark`` command shown in a session still parses.

When a reference check fails after a change to the CLI or the HTTP API: ``make docs`` (or
``.venv/bin/python docs/gen_reference.py``) regenerates docs/reference/cli.md and http-api.md."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
REGENERATE = "regenerate the references with `make docs` (docs/gen_reference.py)"
# [text](target) and [text]: target, outside code spans and blocks.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def _docs_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans."""
    out, in_code = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if not in_code:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _code_lines(text: str) -> Iterator[str]:
    in_code = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if in_code:
            yield line


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{output[-5000:]}"
    assert "WARNING" not in output, output[-5000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "store-api" / "index.html").is_file()


def test_every_internal_link_of_the_readme_points_at_a_file() -> None:
    targets = LINK.findall(_prose(README.read_text(encoding="utf-8")))
    internal = [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)
                and not t.startswith("#")]
    assert internal, "the README links into the docs"
    missing = [t for t in internal if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readme_stays_short_and_names_the_test_command() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220, "keep the README short: move detail into docs/"
    assert "make test" in text and "make run" in text


def _command_parsers() -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    from kraft_spark.cli import build_parser

    def walk(parser: argparse.ArgumentParser,
             words: list[str]) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
        yield words, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*words, name])

    yield from walk(build_parser(), [])


def test_the_cli_reference_names_every_command_and_flag() -> None:
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    missing = []
    for words, parser in _command_parsers():
        name = " ".join(["kraft-spark", *words])
        if f"## `{name}`" not in page:
            missing.append(name)
            continue
        section = page.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        missing += [f"{name} {flag}" for action in parser._actions
                    for flag in action.option_strings if flag not in section]
    assert not missing, f"missing from docs/reference/cli.md: {missing}; {REGENERATE}"


def test_the_http_reference_names_every_route() -> None:
    from api.app import create_app
    from kraft_spark.http_auth import Credentials

    app = create_app(object(), credentials=Credentials.single("docs"))  # type: ignore[arg-type]
    page = (DOCS / "reference" / "http-api.md").read_text(encoding="utf-8")
    routes = [(method.upper(), path) for path, ops in app.openapi()["paths"].items()
              for method in ops]
    assert len(routes) > 10
    missing = [f"{m} {p}" for m, p in routes if f"## `{m} {p}`" not in page]
    assert not missing, f"missing from docs/reference/http-api.md: {missing}; {REGENERATE}"


def test_every_setting_is_documented() -> None:
    from kraft_spark.config_keys import ALL_KEYS
    from kraft_spark.raft.config import PROPERTY_NAMES

    keys = set(ALL_KEYS) | set(PROPERTY_NAMES)
    for module in ("kraft_spark/net/config.py", "kraft_spark/state/policy.py"):
        source = (ROOT / module).read_text(encoding="utf-8")
        keys |= set(re.findall(r'"([a-z]+(?:\.[a-z0-9]+)+)"', source))
    page = (DOCS / "operations" / "configuration.md").read_text(encoding="utf-8")
    missing = sorted(k for k in keys if f"`{k}`" not in page)
    assert not missing, f"settings missing from docs/operations/configuration.md: {missing}"


def test_every_metric_is_documented() -> None:
    from tests.net.test_metrics_families import (
        APP_FAMILIES_BEFORE,
        NODE_FAMILIES_ADDED,
        NODE_FAMILIES_BEFORE,
    )

    names = {*APP_FAMILIES_BEFORE, *NODE_FAMILIES_BEFORE, *NODE_FAMILIES_ADDED,
             "kraft_spark_log_dir_failures_total"}
    page = (DOCS / "operations" / "metrics.md").read_text(encoding="utf-8")
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"metrics missing from docs/operations/metrics.md: {missing}"


def _shown_commands() -> Iterator[tuple[str, list[str]]]:
    """Every ``$ kraft-spark ...`` line of a code block in the README and the docs (the
    generated CLI reference aside), cut at the first shell operator."""
    for path in [README, *_docs_pages()]:
        if path.name == "cli.md":
            continue
        for line in _code_lines(path.read_text(encoding="utf-8")):
            text = line.strip()
            if not text.startswith("$ "):
                continue
            try:
                words = shlex.split(text[2:], comments=True)
            except ValueError:
                continue
            if not words or words[0].rsplit("/", 1)[-1] != "kraft-spark":
                continue
            args = []
            for word in words[1:]:
                if word in ("|", "||", "&", "&&", ";") or word.startswith((">", "2>", "<")):
                    break
                args.append(word)
            yield f"{path.relative_to(ROOT)}: {text}", args


def test_every_command_shown_still_parses(capsys: pytest.CaptureFixture[str]) -> None:
    from kraft_spark.cli import build_parser

    shown = list(_shown_commands())
    assert len(shown) > 20
    broken = []
    for where, args in shown:
        try:
            build_parser().parse_args(args)
        except SystemExit:
            broken.append(f"{where}\n    {capsys.readouterr().err.strip()}")
    assert not broken, "commands shown in the docs no longer parse:\n" + "\n".join(broken)
