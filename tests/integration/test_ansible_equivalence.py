"""Our inventory loader against the real `ansible-inventory` / `ansible --list-hosts`.

Every Ansible process of this module is started at once in one module-scoped fixture (each
costs about half a second of start-up), then the tests compare results.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from gpupoolctl.errors import InventoryError
from gpupoolctl.inventory import load_inventory
from gpupoolctl.inventory.model import ANSIBLE_INTERNAL_VARS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
INVENTORIES = [
    "yaml_fleet/hosts.yml",
    "ini_fleet/hosts.ini",
    "ini_noext/inventory",
    "priorities/inventory.yaml",
    "json_fleet/hosts.json",
    # The project's own inventories must mean to Ansible what they mean to us.
    "../../../inventories/example.yaml",
    "../../../inventories/sim.yaml",
]
# Fixtures where every host sits at most one level below `all`'s children, so that Ansible's
# own host order is deterministic and can be compared exactly.
ORDERED = ["ini_fleet/hosts.ini", "ini_noext/inventory"]
PATTERNS = [
    "gpus",
    "sites:!maintenance",
    "gpus:&site_sg:!sg-dgx0[!1]",
    "~dxb-(node|odd).*",
    "sg_h100[1:2]",
    "gpus[-1]",
    "maintenance,amd,admin01:!dxb-odd05",
]
BAD_RANGES = {
    "gpu[01:100]": "host range must specify equal-length begin and end formats",
    "gpu[1:]": "host range must specify end value",
    "gpu[1]": "host range must be begin:end or begin:end:step",
}

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-inventory") is None or find_spec("ansible") is None,
    reason="ansible-core is not installed (pip install ansible-core): nothing to compare with",
)


# Patterns, host order and range errors come from ansible-core's own InventoryManager in one
# helper process: one start-up instead of one per pattern.
HELPER = """
import json, sys
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.inventory import expand_hostname_range
req = json.load(sys.stdin)
out = {"order": {}, "patterns": {}, "ranges": {}}
for inv in req["order"]:
    manager = InventoryManager(loader=DataLoader(), sources=[inv])
    out["order"][inv] = [h.name for h in manager.get_hosts("all")]
manager = InventoryManager(loader=DataLoader(), sources=[req["pattern_inventory"]])
for pattern in req["patterns"]:
    manager.clear_pattern_cache()
    out["patterns"][pattern] = [h.name for h in manager.get_hosts(pattern)]
for entry in req["ranges"]:
    try:
        out["ranges"][entry] = expand_hostname_range(entry)
    except Exception as exc:
        out["ranges"][entry] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ansible(tmp_path_factory):
    work = tmp_path_factory.mktemp("ansible")  # an empty cwd: no playbook-side group_vars
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOME": str(work / "home"),
        "ANSIBLE_CONFIG": str(work / "none.cfg"),
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",  # a partial parse must not pass silently
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }
    commands: dict[str, list[str]] = {
        inv: ["ansible-inventory", "-i", str(FIXTURES / inv), "--list"] for inv in INVENTORIES
    }
    commands["helper"] = [sys.executable, "-c", HELPER]
    procs = {
        key: subprocess.Popen(
            cmd,
            cwd=work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key, cmd in commands.items()
    }
    request = {
        "order": [str(FIXTURES / inv) for inv in ORDERED],
        "pattern_inventory": str(FIXTURES / "yaml_fleet/hosts.yml"),
        "patterns": PATTERNS,
        "ranges": list(BAD_RANGES),
    }
    results = {}
    for key, proc in procs.items():
        out, err = proc.communicate(json.dumps(request) if key == "helper" else None, timeout=120)
        assert proc.returncode == 0, f"{commands[key]} failed: {err}"
        results[key] = json.loads(out)
    return results


@pytest.mark.parametrize("inv", INVENTORIES)
def test_list_output_is_identical(ansible, inv):
    assert load_inventory(FIXTURES / inv).to_ansible_list() == ansible[inv]


@pytest.mark.parametrize("inv", INVENTORIES)
def test_hosts_groups_and_merged_vars(ansible, inv):
    expected = ansible[inv]
    ours = load_inventory(FIXTURES / inv)
    hostvars = expected["_meta"]["hostvars"]
    children = {g: v.get("children", []) for g, v in expected.items() if g != "_meta"}
    direct = {g: v.get("hosts", []) for g, v in expected.items() if g != "_meta"}

    def groups_of(host):
        found = {g for g, hosts in direct.items() if host in hosts} | {"all"}
        while True:
            more = {p for p, kids in children.items() if found & set(kids)} - found
            if not more:
                return sorted(found)
            found |= more

    every_host = {h for hosts in direct.values() for h in hosts}
    assert set(ours.hosts) == every_host
    for name, host in ours.hosts.items():
        shown = {k: v for k, v in host.vars.items() if k not in ANSIBLE_INTERNAL_VARS}
        assert shown == hostvars.get(name, {}), name
        assert host.groups == groups_of(name), name
    for group, hosts in direct.items():
        if group != "all":  # Ansible never prints the hosts of 'all'
            assert ours.groups[group].hosts == hosts  # same members, same order
        assert ours.groups[group].children == children[group]


@pytest.mark.parametrize("inv", ORDERED)
def test_host_order_matches_ansible(ansible, inv):
    expected = ansible["helper"]["order"][str(FIXTURES / inv)]
    assert list(load_inventory(FIXTURES / inv).hosts) == expected


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_select_what_ansible_selects(ansible, pattern):
    expected = ansible["helper"]["patterns"][pattern]
    ours = load_inventory(FIXTURES / "yaml_fleet/hosts.yml").select(pattern)
    assert sorted(ours.names) == sorted(expected)
    assert ours.names, "a pattern that selects nothing proves little"


@pytest.mark.parametrize("entry", list(BAD_RANGES))
def test_bad_ranges_give_ansibles_message(ansible, entry, tmp_path):
    assert ansible["helper"]["ranges"][entry] == BAD_RANGES[entry]
    path = tmp_path / "bad.ini"
    path.write_text(f"[g]\n{entry}\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.line == 2
    assert info.value.detail == BAD_RANGES[entry]
