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
