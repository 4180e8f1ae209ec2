"""Session-wide set-up shared by every test folder."""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's bytecode once, before any test starts a `gpupoolctl` process.

    A regular install compiles the package; an editable one (the README's test command)
    does not, and where PYTHONDONTWRITEBYTECODE is set (as on some CI images) nothing ever
    writes it, so each of the suite's thousands of CLI subprocesses would compile every
    module it imports from source: about a quarter of a short command's CPU. Python still
    reads bytecode it finds under that setting, so compiling once here removes the cost.
    Only the controller does it (xdist workers start after it), and a read-only checkout
    merely keeps the cost.
    """
    if hasattr(config, "workerinput"):
        return
    for folder in (ROOT / "gpupoolctl", ROOT / "tests"):
        compileall.compile_dir(folder, quiet=2, workers=1)
