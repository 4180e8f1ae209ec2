"""One rule for every option and argument: an empty value given on the command line is a
usage error naming it (gpupoolctl.cli.nonempty), checked before the command runs.

Every parameter of every command that takes a value is given '' (and '  '), and must be
refused with "NAME must not be empty"; the command after `submit --` only for its program.
A new option is covered without a line of its own: this test walks the commands as built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.main import get_command

from gpupoolctl.cli.main import app
from gpupoolctl.cli.nonempty import empty_value
from gpupoolctl.errors import UsageError


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    children = getattr(command, "commands", None)
    for name in list(children or ()):
        yield from commands(children[name], (*path, name))


def takes_value(param: Any) -> bool:
    return not (getattr(param, "is_flag", False) or getattr(param, "count", False))


def cases() -> list[tuple[tuple[str, ...], str]]:
    """(the command line with one empty value, the name the error must give)."""
    out: list[tuple[tuple[str, ...], str]] = []
    for path, command in commands(get_command(app)):
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        for param in command.params:
            if not takes_value(param):
                continue
            if param.param_type_name == "option":
                name = next((o for o in param.opts if o.startswith("--")), param.opts[0])
                out.append(((*path, param.opts[0], ""), name))
                continue
            before = ["x"] * arguments.index(param)  # earlier arguments get a value
            dashes = ["--"] if param.nargs == -1 else []
            out.append(((*path, *before, *dashes, ""), param.name.upper()))
    return out


CASES = cases()


def refusal(args: tuple[str, ...]) -> str:
    from gpupoolctl.cli.argv import hoist_global_options

    command = get_command(app)
    with pytest.raises(UsageError) as caught:
        command.main(args=hoist_global_options(list(args), command), prog_name="gpupoolctl")
    return str(caught.value)


def test_every_command_with_a_value_is_walked() -> None:
    names = {name for _, name in CASES}
    # The options of issue 31, and one of each kind: root, path, text, list, argument.
    for name in ("--html", "RESULT_FILE", "--file", "--filter", "--name", "--workdir"):
        assert name in names
    for name in ("--inventory", "--limit", "--env", "--textfile", "COMMAND", "TARGETS"):
        assert name in names
    assert len(CASES) > 80


@pytest.mark.parametrize(("args", "name"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_an_empty_value_is_refused_naming_it(args: tuple[str, ...], name: str) -> None:
    assert refusal(args) == f"{name} must not be empty"


@pytest.mark.parametrize(
    "args",
    [
        ("pool", "--html", "  "),
        ("submit", "--name", " ", "--", "true"),
        ("submit", "-e", "A=1", "-e", "", "--", "true"),
        ("sim", "fault", "sg-dgx01", "xid=79", " "),
        ("--ledger", "\t", "pool"),
    ],
)
def test_blank_values_and_one_empty_item_of_a_list_are_refused(args: tuple[str, ...]) -> None:
    assert refusal(args).endswith("must not be empty")


def test_only_the_program_of_a_command_line_must_be_named() -> None:
    assert empty_value(["", "x"], first_item_only=True)
    assert not empty_value(["printf", "%s", ""], first_item_only=True)
    assert empty_value(["a", ""])  # a list of names: each must be given
    assert not empty_value(None) and not empty_value(3) and not empty_value(("a", "b"))
