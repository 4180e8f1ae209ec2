"""The root command loads command modules lazily: same commands, same help, less start-up."""

from __future__ import annotations

import json
import sys

import pytest
import typer

from gpupoolctl.cli.lazy import LazyCommands
from gpupoolctl.cli.main import COMMANDS, RootGroup, app, run


def _fresh_root() -> RootGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, RootGroup)
    return group


def _commands(group: RootGroup) -> LazyCommands:
    assert isinstance(group.commands, LazyCommands)
    return group.commands


def _help(group: RootGroup) -> str:
    return group.get_help(typer.Context(group, info_name="gpupoolctl"))


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """The console script's entry point in-process: (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["gpupoolctl", *args])
        try:
            run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


def _listed(help_text: str) -> list[str]:
    """The command names under "Commands:" in a help text."""
    _, found, section = help_text.partition("\nCommands:\n")
    assert found, help_text
    return [
        line.split()[0] for line in section.splitlines() if line.startswith("  ") and line[2] != " "
    ]


def test_the_table_names_every_command_the_modules_define():
    # A command a module adds but the table lacks could never be looked up.
    group = _fresh_root()
    defined = {name for entry in COMMANDS for name in group.build(entry)}
    assert defined == {entry.name for entry in COMMANDS}
    assert len(COMMANDS) == len(defined)  # no name twice


@pytest.mark.parametrize("entry", COMMANDS, ids=[entry.name for entry in COMMANDS])
def test_each_summary_is_the_commands_own_short_help(entry):
    group = _fresh_root()
    real = group.build(entry)[entry.name]
    assert not real.hidden and not real.deprecated and not real.short_help
    # An unbounded limit gives the first sentence, which is what any narrower limit cuts from.
    assert entry.summary == real.get_short_help_str(limit=10**6)


def test_root_help_is_the_same_before_and_after_loading_every_command():
    group = _fresh_root()
    lazy_help = _help(group)
    assert _commands(group).built() == []  # listing imported no command module
    for name in group.commands:
        group.commands[name]
    assert sorted(_commands(group).built()) == sorted(e.name for e in COMMANDS)
    assert _help(group) == lazy_help
    assert _listed(lazy_help) == [entry.name for entry in COMMANDS]


def test_looking_up_one_command_builds_only_its_module():
    commands = _commands(_fresh_root())
    assert "pool" in commands and "nosuch" not in commands and len(commands) == len(COMMANDS)
    assert commands.built() == []
    assert commands["ledger"].name == "ledger"
    assert sorted(commands.built()) == ["alloc", "ledger", "pool", "release"]
    with pytest.raises(KeyError):
        commands["nosuch"]


def test_every_command_listed_by_help_prints_its_own_help(cli):
    reached: list[str] = []

    def visit(path: list[str]) -> None:
        code, out, err = cli(*path, "--help")
        assert code == 0, (path, err)
        assert out.startswith(f"Usage: gpupoolctl {' '.join(path)}".rstrip() + " "), out
        reached.append(" ".join(path))
        if "\nCommands:\n" in out:
            for name in _listed(out):
                visit([*path, name])

    visit([])
    assert reached[0] == ""
    assert {"pool", "jobs", "ledger show", "partition apply", "export slurm"} <= set(reached)
    assert len(reached) >= 1 + len(COMMANDS) + 20  # root, commands, and the groups' own


def test_unknown_command_is_still_a_usage_error_with_a_suggestion(cli):
    code, _, err = cli("jbos")
    assert code == 2
    assert "No such command 'jbos'. Did you mean 'jobs'?" in err


def test_global_options_after_a_lazily_loaded_command_are_still_hoisted(cli, tmp_path):
    ledger = str(tmp_path / "ledger.jsonl")
    code, out, err = cli("ledger", "show", "--ledger", ledger, "-o", "json")
    assert code == 0, err
    assert json.loads(out) == []
    code, out, err = cli("ledger", "show", "--ledger", ledger, "-o", "bogus")
    assert code == 2 and "'-o' / '--output'" in err
