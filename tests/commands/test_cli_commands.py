"""The command table of kraft_spark/cli.py: each command's parser is built from its own modules
only, and the table names exactly the commands each module registers."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from kraft_spark.cli import COMMAND_MODULES, COMMANDS, SUMMARIES, build_parser


def _registered(module: str) -> list[str]:
    subparsers = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(subparsers)
    return list(subparsers.choices)


def test_the_table_names_what_every_module_registers() -> None:
    table: dict[str, list[str]] = {}
    for module in COMMAND_MODULES:
        for command in _registered(module):
            table.setdefault(command, []).append(module)
    assert {c: tuple(m) for c, m in table.items()} == COMMANDS


def test_the_top_level_help_is_what_every_module_registers() -> None:
    subparsers = argparse.ArgumentParser().add_subparsers()
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(subparsers)
    registered = {a.dest: a.help for a in subparsers._choices_actions}
    assert registered == SUMMARIES
    assert list(SUMMARIES) == list(COMMANDS)  # the same commands, in the same order


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_parser_holds_its_modules_commands(command: str) -> None:
    expected = {c for m in COMMANDS[command] for c in _registered(m)}
    assert set(_choices(build_parser([command, "--whatever"]))) == expected


@pytest.mark.parametrize("argv", [[], ["--help"], ["no-such-command"]])
def test_no_command_or_an_unknown_one_names_them_all_and_imports_none(argv: list[str]) -> None:
    probe = ("import json, sys\nfrom kraft_spark.cli import build_parser\n"
             f"parser = build_parser({argv!r})\n"
             "action = next(a for a in parser._actions if a.dest == 'command')\n"
             "print(json.dumps([sorted(action.choices), sorted(m for m in sys.modules if "
             "m.startswith(('kraft_spark.commands.', 'kraft_spark.log', 'kraft_spark.sim', "
             "'bench')))]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    choices, loaded = json.loads(done.stdout)
    assert choices == sorted(COMMANDS)
    assert loaded == []


def test_an_unknown_command_is_named_with_the_choices() -> None:
    done = subprocess.run([sys.executable, "-m", "kraft_spark", "no-such-command"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "invalid choice: 'no-such-command'" in done.stderr and "'metadata-quorum'" in done.stderr


def test_a_nodes_parser_imports_neither_the_simulator_nor_the_http_layer() -> None:
    probe = ("import json, sys\nfrom kraft_spark.cli import build_parser\n"
             "build_parser(['node', '--config', 'x'])\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith("
             "('kraft_spark.sim', 'bench', 'fastapi', 'api')))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []


def _undocumented(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _undocumented(sub, [*words, name])
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            out.append(" ".join([*words, *(action.option_strings or [action.dest])]))
    return out


def test_every_argument_of_every_command_says_what_it_is() -> None:
    assert _undocumented(build_parser(), []) == []


def test_command_config_speaks_of_add_controller_only_where_it_is_one() -> None:
    def config_help(argv: list[str]) -> str:
        parser = build_parser(argv)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        action = next(a for a in sub.choices[argv[0]]._actions if "--command-config" in
                      a.option_strings)
        return str(action.help)

    assert "add-controller" not in config_help(["append"])
    assert "add-controller" not in config_help(["read"])
    assert "add-controller" in config_help(["metadata-quorum"])
