"""Global options may follow the command; a command's own option of the same name wins."""

from __future__ import annotations

import typer
from typer.main import get_command

from gpupoolctl.cli.argv import hoist_global_options
from gpupoolctl.cli.main import app


def _demo_app() -> typer.Typer:
    demo = typer.Typer()

    @demo.callback()
    def root(
        forks: int = typer.Option(32, "-f", "--forks"),
        output: str = typer.Option("auto", "-o", "--output"),
        verbose: int = typer.Option(0, "-v", count=True),
    ) -> None: ...

    group = typer.Typer()
    demo.add_typer(group, name="partition")

    @group.command("plan")
    def plan(file: str = typer.Option(..., "-f", "--file")) -> None: ...

    @group.command("show")
    def show() -> None: ...

    return demo


def test_real_app_moves_output_and_limit_before_the_command():
    command = get_command(app)
    args = ["inventory", "hosts", "-o", "json", "--limit=sg-*", "-q"]
    assert hoist_global_options(args, command) == [
        "-o",
        "json",
        "--limit=sg-*",
        "-q",
        "inventory",
        "hosts",
    ]


def test_leading_global_options_stay_put():
    command = get_command(app)
    args = ["-o", "json", "inventory", "--topology"]
    assert hoist_global_options(args, command) == args


def test_command_option_with_same_name_is_not_hoisted():
    command = get_command(_demo_app())
    args = ["partition", "plan", "-f", "layouts.yaml", "-o", "json", "-v"]
    assert hoist_global_options(args, command) == [
        "-o",
        "json",
        "-v",
        "partition",
        "plan",
        "-f",
        "layouts.yaml",
    ]
    # In a command without its own -f, -f is the global --forks.
    assert hoist_global_options(["partition", "show", "-f", "4"], command) == [
        "-f",
        "4",
        "partition",
        "show",
    ]


def test_nothing_after_double_dash_is_touched():
    command = get_command(_demo_app())
    args = ["partition", "show", "--", "-o", "json"]
    assert hoist_global_options(args, command) == args


def test_the_users_command_after_submit_is_never_touched():
    command = get_command(app)
    args = ["submit", "--mem", "10G", "python", "train.py", "-f", "3", "-o", "out.txt"]
    assert hoist_global_options(args, command) == args
    # Global options before the job's command still move; the job's own flags stay.
    args = ["submit", "-q", "--name", "-o", "python", "x.py", "-q"]
    assert hoist_global_options(args, command) == [
        "-q",
        "submit",
        "--name",
        "-o",
        "python",
        "x.py",
        "-q",
    ]


def test_a_commands_own_f_is_never_read_as_forks():
    command = get_command(app)
    for args in (
        ["partition", "plan", "-f", "layouts.yaml", "-c", "inference"],
        ["partition", "apply", "-f", "layouts.yaml", "-c", "inference", "--yes"],
        ["partition", "assert", "-f", "layouts.yaml", "-c", "inference"],
        ["export", "k8s", "-f", "layouts.yaml", "-n", "gpu-operator"],
        ["logs", "-f", "j-1"],
        ["logs", "j-1", "-f"],
    ):
        assert hoist_global_options(args, command) == args
    # Global options around them still move; -f and its value stay with the command.
    assert hoist_global_options(["logs", "-f", "j-1", "--forks", "4"], command) == [
        "--forks",
        "4",
        "logs",
        "-f",
        "j-1",
    ]
    assert hoist_global_options(["partition", "plan", "-f", "x.yaml", "-q"], command) == [
        "-q",
        "partition",
        "plan",
        "-f",
        "x.yaml",
    ]


def test_forks_is_long_only_and_the_old_f_still_parses_for_one_release():
    command = get_command(app)
    forks = next(p for p in command.params if p.name == "forks")
    old = next(p for p in command.params if p.name == "old_forks")
    assert forks.opts == ["--forks"] and not forks.secondary_opts
    assert old.opts == ["-f"] and old.hidden  # not offered in --help or completion
    # After a command without its own -f, the old -f N still moves to the front.
    assert hoist_global_options(["inventory", "-f", "8"], command) == ["-f", "8", "inventory"]
    assert hoist_global_options(["inventory", "--forks", "8"], command) == [
        "--forks",
        "8",
        "inventory",
    ]


def _settings(*args: str):
    command = get_command(app)
    ctx = command.make_context("gpupoolctl", [*args, "inventory"])
    with ctx:
        ctx.invoke(command.callback, **ctx.params)
    return ctx.obj


def test_the_old_f_sets_forks_with_a_warning(capsys):
    assert _settings("-f", "8").forks == 8
    assert capsys.readouterr().err == (
        "gpupoolctl: warning: -f for forks is deprecated: use --forks; "
        "-f will mean a file or follow\n"
    )
    assert _settings("--forks", "8").forks == 8
    assert _settings().forks == 32
    assert capsys.readouterr().err == ""
    assert _settings("--forks", "5", "-f", "8").forks == 5  # the new spelling wins
    assert "deprecated" in capsys.readouterr().err
