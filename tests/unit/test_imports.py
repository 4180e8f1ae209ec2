"""The floors of the house (ARCHITECTURE.md), read from the source: every import, at the top,
inside a function or under TYPE_CHECKING, counts."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import gpupoolctl

PACKAGE = Path(gpupoolctl.__file__).resolve().parent

# Package -> the packages of the house it must never import (those on the floors above it).
FORBIDDEN = {
    "sched": ("ledger", "jobs", "cli", "board", "export", "stress", "slurm"),
}
# Stdlib only: zipped into the agent's payload and run by a node's bare python3 (the vendor
# bindings and torch where a node has them, imported only where they are used).
NODE_SIDE = ("agent", "hw", "sim")
NODE_OPTIONAL = ("pynvml", "amdsmi", "torch")
PAYLOAD_ROOT = ("gpupoolctl", "gpupoolctl.__version__")  # gpupoolctl/__init__.py ships too


def imports_of(path: Path) -> list[tuple[int, str]]:
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    return imports_in(path.read_text(), package, str(path))


def imports_in(text: str, package: str, name: str = "<source>") -> list[tuple[int, str]]:
    """(line, dotted module) of every import in `text`, a module of `package`; relative
    imports resolved."""
    found = []
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                module = f"{base}.{module}" if module else base
            # `from gpupoolctl import sim` imports gpupoolctl.sim
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def floor_of(module: str) -> str | None:
    """The package of the house a module is in ("ledger" for gpupoolctl.ledger.state)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "gpupoolctl" and len(parts) > 1 else None


def sources(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_floor_never_imports_one_above_it(package: str) -> None:
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
        for path in sources(package)
        for line, module in imports_of(path)
        if floor_of(module) in FORBIDDEN[package]
    ]
    assert wrong == []


@pytest.mark.parametrize("package", NODE_SIDE)
def test_the_node_side_imports_the_standard_library_and_itself_only(package: str) -> None:
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
        for path in sources(package)
        for line, module in imports_of(path)
        if module not in PAYLOAD_ROOT
        and (
            floor_of(module) not in (*NODE_SIDE, None)
            or (
                floor_of(module) is None
                and module.split(".")[0] not in (*sys.stdlib_module_names, *NODE_OPTIONAL)
            )
        )
    ]
    assert wrong == []


def test_the_floor_check_sees_every_kind_of_import() -> None:
    """What the checks above rest on: relative, in a function, under TYPE_CHECKING."""
    text = (
        "from typing import TYPE_CHECKING\n"
        "from . import ids\n"
        "if TYPE_CHECKING:\n    from gpupoolctl.ledger.state import State\n"
        "def f():\n    import gpupoolctl.jobs.alloc\n"
        "from ..cli import root\n"
    )
    found = sorted(module for _, module in imports_in(text, "gpupoolctl.sched"))
    assert found == [
        "gpupoolctl.cli.root",
        "gpupoolctl.jobs.alloc",
        "gpupoolctl.ledger.state.State",
        "gpupoolctl.sched.ids",
        "typing.TYPE_CHECKING",
    ]


# Card ids ("host/gpuN") formatted anywhere but hw/slice.py drift apart; file paths are not ids.
_CARD_ID = re.compile(r"""f["'][^"']*/gpu\{""")
_NOT_IDS = {"export/slurm.py"}  # Slurm's File= placeholder paths


def test_card_ids_are_formatted_in_one_place() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name == "hw/slice.py":
            continue
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if _CARD_ID.search(text) and not (name in _NOT_IDS and "folder" in text):
                wrong.append(f"{name}:{number}: {text.strip()}")
    assert wrong == []
