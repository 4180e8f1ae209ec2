"""An empty value given on the command line is a usage error, for every option and argument.

`--html "$OUT"` with OUT unset passes an empty string: read as "not given" it silently does
something else, read as a path it is the current folder, read as a name it makes a job
nobody can find. So a value given on the command line that is empty or only spaces is
refused (exit 2) before the command runs, whatever the option: path, text, a list item, the
command after `--`. One rule, installed on every parameter as the commands are built
(gpupoolctl.cli.lazy), never a check per option.

A command that stops parsing options at its first plain word (`submit -- CMD ARGS...`) takes
a command line: its program must be named, its arguments are the user's own and may be
empty (`submit -- printf '%s' ''`). A variable an option reads (GPUPOOL_LEDGER) that holds
only spaces is refused naming the variable; one set to nothing click reads as unset, and the
root says so itself.
"""

from __future__ import annotations

import os
from typing import Any

from gpupoolctl.cli.argv import interspersed
from gpupoolctl.errors import UsageError

_GIVEN = frozenset({"COMMANDLINE", "ENVIRONMENT"})


def refuse_empty_values(command: Any) -> Any:
    """Make an empty value of any of the command's parameters (and its sub-commands') a
    UsageError naming the option; returns the command."""
    if getattr(command, "_refuses_empty", False):
        return command
    command._refuses_empty = True
    takes_command_line = not interspersed(command)
    for param in getattr(command, "params", []):
        _install(param, first_item_only=takes_command_line and _variadic_argument(param))
    commands = getattr(command, "commands", None)
    if isinstance(commands, dict):  # a plain group: the lazy root installs on its own
        for sub in commands.values():
            refuse_empty_values(sub)
    return command


def empty_value(value: Any, first_item_only: bool = False) -> bool:
    """Whether a given value (text, or a list of texts) has an empty or blank text in it."""
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple)):
        items = value[:1] if first_item_only else value
        return any(isinstance(item, str) and not item.strip() for item in items)
    return False


def set_but_empty(variable: str) -> UsageError:
    """The error for a variable set to nothing or spaces: never read as "not given"."""
    return UsageError(f"{variable} is set but empty: unset it, or give it a value")


def _install(param: Any, first_item_only: bool) -> None:
    consume = param.consume_value

    def consume_value(ctx: Any, opts: Any) -> tuple[Any, Any]:
        value, source = consume(ctx, opts)
        given = source is not None and source.name in _GIVEN
        if given and not ctx.resilient_parsing and empty_value(value, first_item_only):
            if source.name == "ENVIRONMENT":
                raise set_but_empty(_variable(param))
            raise UsageError(f"{_name(param)} must not be empty")
        return value, source

    param.consume_value = consume_value


def _name(param: Any) -> str:
    """How the user wrote it: the long option (`--name`), else the short, else ARGUMENT."""
    opts = list(getattr(param, "opts", []) or [])
    if getattr(param, "param_type_name", "") == "argument" or not opts:
        return (param.name or "value").upper()
    return next((opt for opt in opts if opt.startswith("--")), opts[0])


def _variable(param: Any) -> str:
    envvar = param.envvar
    names = [envvar] if isinstance(envvar, str) else list(envvar or ())
    return next((name for name in names if os.environ.get(name)), names[0] if names else "?")


def _variadic_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument" and param.nargs == -1
