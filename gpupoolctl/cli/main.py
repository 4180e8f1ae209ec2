"""The `gpupoolctl` entry point: run the root command, library errors -> one line and an exit code.

The root command itself (global options, the table of commands) is gpupoolctl.cli.root. This
module imports it, and typer, only when the command line needs them: a bare
`gpupoolctl --version` (scripts check it to see what they talk to) answers from here.
"""

from __future__ import annotations

import sys
from typing import Any

from gpupoolctl import __version__

# What tests and tools take from here, defined in gpupoolctl.cli.root.
_FROM_ROOT = frozenset(
    {"COMMANDS", "FORKS_DEPRECATED", "MAX_TIMEOUT_S", "RootGroup", "app", "root"}
)


def __getattr__(name: str) -> Any:
    if name in _FROM_ROOT:
        from gpupoolctl.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def os_error_message(exc: OSError) -> str:
    """One line for a file the system refused: the file and each reason, in order.

    `open(..., O_CREAT)` failing with EACCES and then a read-only open of the same file
    failing with ENOENT says both, because the first is what the person must fix.
    """
    reasons: list[str] = []
    where = None
    cause: BaseException | None = exc
    while isinstance(cause, OSError):
        reason = cause.strerror or str(cause)
        if reason not in reasons:
            reasons.insert(0, reason)
        where = where or cause.filename
        cause = cause.__cause__ or cause.__context__
    text = ", then ".join(reasons)
    return f"{where}: {text}" if where is not None else text


def _bare_version() -> bool:
    """`gpupoolctl --version` and nothing else: print what the root's --version prints.

    The root's --version is eager, so typer answers it before any other option or variable
    is looked at; with nothing else on the line there is nothing else to answer. False when
    stdout refused the line (typer's path then says so as it always has).
    """
    if sys.argv[1:] != ["--version"]:
        return False
    try:
        sys.stdout.write(f"gpupoolctl {__version__}\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        return False
    return True


def run() -> None:
    """Console-script entry point: library errors become one line and an exit code.

    Typer's standalone mode already turns usage errors into exit 2 and Ctrl-C into "Aborted!"
    (and a closed stdout into exit 1); what reaches us here is the library's typed errors and
    files the system refused (permissions, a read-only folder), which must never print a
    traceback.
    """
    if _bare_version():
        sys.exit(0)
    from typer.main import get_command

    from gpupoolctl.cli.argv import hoist_global_options
    from gpupoolctl.cli.console import error
    from gpupoolctl.cli.root import app
    from gpupoolctl.errors import ExitCode, GpupoolError

    command = get_command(app)
    args = hoist_global_options(sys.argv[1:], command)
    try:
        command.main(args=args, prog_name="gpupoolctl")
    except GpupoolError as exc:
        error(str(exc))
        sys.exit(int(exc.exit_code))
    except OSError as exc:
        error(os_error_message(exc))
        sys.exit(int(ExitCode.ERROR))


if __name__ == "__main__":
    run()
