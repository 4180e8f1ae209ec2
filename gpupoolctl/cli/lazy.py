"""A root command group that imports a command's module only when that command is looked up.

Cron and CI scripts call gpupoolctl many times, and importing every command module and
building every command's options cost more than a cheap command's own work. The root knows
its commands from a table (name, module, one-line summary); looking a name up imports that
module and builds its commands through typer exactly as an eager `add_typer` would. Listing
the commands (`--help`, shell completion of a command name) uses the summaries instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_group

from gpupoolctl.cli.coerce import install
from gpupoolctl.cli.nonempty import refuse_empty_values


@dataclass(frozen=True)
class LazyCommand:
    name: str
    # Defines `register(app)` (adds its commands to the root) or `app` (a group named `name`).
    module: str
    # The first sentence of the command's help: what `--help` of the root shows for it.
    summary: str


class LazyCommands(MutableMapping[str, Any]):
    """Command name -> command, in the table's order; a command is built on first lookup.

    Membership and iteration read only the table, so hoisting global options
    (gpupoolctl.cli.argv) and "did you mean" suggestions import nothing.
    """

    def __init__(self, group: LazyGroup) -> None:
        self._group = group
        self._entries = {entry.name: entry for entry in group.table}
        self._names = list(self._entries)
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            entry = self._entries.get(name)
            if entry is None:
                raise KeyError(name)
            # A module's other commands come along: it is imported and registered once.
            for built_name, command in self._group.build(entry).items():
                self._built.setdefault(built_name, command)
        return self._built[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._built

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._names.remove(name)
        self._entries.pop(name, None)
        self._built.pop(name, None)

    def built(self) -> list[str]:
        """The names whose commands exist so far (their modules are imported)."""
        return list(self._built)

    def listed(self, name: str) -> Any:
        """The command if built, else a stand-in carrying only its name and summary."""
        if name in self._built or name not in self._entries:
            return self._built.get(name)
        return TyperCommand(name=name, help=self._entries[name].summary)


class LazyGroup(TyperGroup):
    """Subclass with `table` set, and pass it as `typer.Typer(cls=...)` of the root."""

    table: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        eager = dict(self.commands)
        self.commands: LazyCommands = LazyCommands(self)
        self.commands.update(eager)
        self._listing = False
        install(self)  # the root's own options: plain values without pydantic
        refuse_empty_values(self)  # and never an empty one

    def build(self, entry: LazyCommand) -> dict[str, Any]:
        """Import the entry's module and build its commands as the root's `add_typer` would."""
        module = importlib.import_module(entry.module)
        # What the root's Typer passes down when it builds its sub-commands itself.
        app = typer.Typer(rich_markup_mode=self.rich_markup_mode, add_completion=False)
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
        else:
            app.add_typer(module.app, name=entry.name)
        return {
            name: refuse_empty_values(install(command))
            for name, command in get_group(app).commands.items()
        }

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        if self._listing:
            return self.commands.listed(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.commands)  # names only: typer's own reads the values too

    def format_commands(self, ctx: typer.Context, formatter: Any) -> None:
        with self._summaries():
            super().format_commands(ctx, formatter)

    def shell_complete(self, ctx: typer.Context, incomplete: str) -> list[Any]:
        with self._summaries():
            return super().shell_complete(ctx, incomplete)

    @contextmanager
    def _summaries(self) -> Iterator[None]:
        """While listing commands, a lookup gives a summary instead of importing a module."""
        self._listing = True
        try:
            yield
        finally:
            self._listing = False
