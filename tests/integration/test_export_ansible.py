"""`gpupoolctl export ansible` against the real `ansible-inventory`.

For the bundled inventories, the groups, hosts and users' vars we export are what
`ansible-inventory -i FILE --list` prints (its output comes from the `ansible` fixture of
test_ansible_equivalence.py, reused here). And Ansible reading our export back, through
its script plugin (a file that cats the JSON, or gpupoolctl itself as a dynamic inventory
script), gives the same hosts, groups and vars, gpupool_ facts included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_ansible_equivalence import INVENTORIES
from tests.integration.test_ansible_equivalence import ansible as ansible  # the fixture

REPO = Path(__file__).resolve().parents[2]
BUNDLED = {
    "sim": next(inv for inv in INVENTORIES if inv.endswith("inventories/sim.yaml")),
    "example": next(inv for inv in INVENTORIES if inv.endswith("inventories/example.yaml")),
}

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-inventory") is None or find_spec("ansible") is None,
    reason="ansible-core is not installed (pip install ansible-core): nothing to compare with",
)


# The vars the export adds (gpupoolctl.export.ansible); other gpupool_ vars are the
# inventory's own (gpupool_site_links, gpupool_rendezvous_addr) and come back as they are.
EXPORTED = {f"gpupool_{name}" for name in ("gpus", "vendor", "model", "islands", "mig", "slices")}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An isolated HOME (empty ledger, own sim state) for gpupoolctl and Ansible alike."""
    home = tmp_path / "home"
    home.mkdir()
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_", "ANSIBLE_"))
    }
    return {
        **clean,
        "HOME": str(home),
        "GPUPOOL_SIM_DIR": str(tmp_path / "sim"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), clean.get("PYTHONPATH")])),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",  # a partial parse must not pass silently
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }


def gpupoolctl(env: dict[str, str], cwd: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", "-q", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def ansible_list(env: dict[str, str], cwd: Path, source: Path) -> dict[str, Any]:
    proc = subprocess.run(
        ["ansible-inventory", "-i", str(source), "--list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def inventory_path(name: str) -> Path:
    return (REPO / "tests" / "fixtures" / "inventories" / BUNDLED[name]).resolve()


@pytest.mark.parametrize("name", list(BUNDLED))
def test_export_without_facts_is_what_ansible_lists(ansible, env, tmp_path, name) -> None:
    source = str(inventory_path(name))
    ours = gpupoolctl(env, tmp_path, "-i", source, "export", "ansible", "--no-facts")
    assert ours == ansible[BUNDLED[name]]


def test_ansible_reads_our_export_back_unchanged(ansible, env, tmp_path) -> None:
    ours = gpupoolctl(env, tmp_path, "-i", str(inventory_path("sim")), "export", "ansible")
    hostvars = ours["_meta"]["hostvars"]
    assert hostvars["sg-dgx01"]["gpupool_gpus"] == 8  # facts were read: they must survive too
    users = {
        host: {k: v for k, v in values.items() if k not in EXPORTED}
        for host, values in hostvars.items()
    }
    assert users == ansible[BUNDLED["sim"]]["_meta"]["hostvars"]

    saved = tmp_path / "pool.json"
    saved.write_text(json.dumps(ours))
    script = tmp_path / "pool.sh"
    script.write_text(f"#!/bin/sh\nexec cat '{saved}'\n")
    script.chmod(0o755)
    assert ansible_list(env, tmp_path, script) == ours


def test_gpupoolctl_works_as_a_dynamic_inventory_script(ansible, env, tmp_path) -> None:
    script = tmp_path / "gpupool.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"exec '{sys.executable}' -m gpupoolctl.cli.main -q -i '{inventory_path('example')}' "
        'export ansible --no-facts "$@"\n'
    )
    script.chmod(0o755)
    assert ansible_list(env, tmp_path, script) == ansible[BUNDLED["example"]]
