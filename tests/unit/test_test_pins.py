"""The test environment is reproducible: README's test command installs with the pins of
constraints/test.txt, CI runs that very command, and the file pins every package the test
install pulls in (transitively), so a fresh machine tests what CI tests."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = "constraints/test.txt"


def readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("Install the test dependencies", 1)[1]
    block = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert block is not None, "README: no sh block after 'Install the test dependencies'"
    return block.group(1).strip()


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / CONSTRAINTS).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version.strip(), f"{CONSTRAINTS}: {line!r} is not NAME==VERSION"
        out[canonical(name)] = version.strip()
    return out


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_readme_and_ci_install_with_the_pins() -> None:
    command = readme_test_command()
    assert f"pip install -c {CONSTRAINTS} -e '.[test]'" in command
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pip" in line]
    assert ci[-1] == command  # CI runs exactly what a newcomer runs


def test_every_package_the_test_install_pulls_in_is_pinned() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    pinned = pins()
    seen: set[str] = set()
    todo = [Requirement(text) for text in wanted]
    while todo:
        requirement = todo.pop()
        name = canonical(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        assert name in pinned, f"{name} is installed by the tests but not pinned in {CONSTRAINTS}"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{name}=={pinned[name]} does not meet {requirement}"
        )
        for text in metadata.requires(requirement.name) or []:
            child = Requirement(text)
            if child.marker is None or child.marker.evaluate({"extra": ""}):
                todo.append(child)
    assert len(seen) > 30
