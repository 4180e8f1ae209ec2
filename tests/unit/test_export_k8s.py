"""The Kubernetes export: label syntax, the mig-parted ConfigMap built from the bundled sim
pool's real facts (each node's config holds on that node), and the shell form."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.export.k8s import (
    ALL_DISABLED,
    CONFIG_KEY,
    CONFIGMAP_NAME,
    MIG_CONFIG_LABEL,
    config_name,
    k8s_export,
    sanitize_label_value,
    valid_label_key,
    valid_label_value,
)
from gpupoolctl.export.migparted import MIG_PARTED_FIELDS, mig_entries
from gpupoolctl.inventory import load_inventory
from gpupoolctl.partition import assert_host, parse_spec
from gpupoolctl.remote import run_agent
from gpupoolctl.remote.target import target_from_vars

ROOT = Path(__file__).resolve().parents[2]
MIG_HOSTS = ["sg-dgx01", "sg-dgx02", "sg-a100-01", "dxb-a100-01"]
NO_MIG_HOSTS = ["dxb-mi300x-01", "dxb-l40s-01"]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """{host: (groups, facts)} for every host of inventories/sim.yaml, on a fresh sim state."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPOOL_SIM_DIR", str(tmp_path_factory.mktemp("sim")))
        inventory = load_inventory(ROOT / "inventories" / "sim.yaml")
        hosts = list(inventory.hosts.values())
        results = run_agent(
            [target_from_vars(h.name, h.vars) for h in hosts], {"verb": "facts", "args": {}}
        )
        assert all(r.ok for r in results), [r.error for r in results]
        yield {h.name: (h.groups, r.data) for h, r in zip(hosts, results, strict=True)}


def facts_of(pool: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {host: facts for host, (_, facts) in pool.items()}


# -- label syntax --------------------------------------------------------------------------

VALID_VALUE = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")


@given(st.text())
def test_sanitized_values_are_always_valid(text: str) -> None:
    value = sanitize_label_value(text)
    assert valid_label_value(value)
    assert sanitize_label_value(value) == value  # idempotent


@given(VALID_VALUE)
def test_valid_values_are_kept_as_they_are(value: str) -> None:
    assert valid_label_value(value)
    assert sanitize_label_value(value) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("  AMD Instinct MI300X ", "AMD-Instinct-MI300X"),
        ("a/b:c", "a-b-c"),
        ("---", ""),
        ("x" * 70, "x" * 63),
        ("a" * 62 + ".b", "a" * 62),  # cut at 63 would end on '.': trimmed again
    ],
)
def test_sanitize_examples(text: str, expected: str) -> None:
    assert sanitize_label_value(text) == expected


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("nvidia.com/mig.config", True),
        ("gpupoolctl.io/gpu.model", True),
        ("plain", True),
        ("Upper.example/name", False),  # prefixes are lowercase DNS names
        ("a" * 254 + "/x", False),
        ("example.com/", False),
        ("example.com/" + "n" * 64, False),
        ("example.com/-bad", False),
        ("-bad.example/x", False),
    ],
)
def test_label_keys(key: str, ok: bool) -> None:
    assert valid_label_key(key) is ok


@given(st.text(max_size=300))
def test_keys_accepted_are_well_formed(key: str) -> None:
    if valid_label_key(key):
        prefix, _, name = key.rpartition("/")
        assert 0 < len(name) <= 63 and len(prefix) <= 253
        assert prefix == prefix.lower()


# -- the export on the sim pool ------------------------------------------------------------


def test_every_label_is_valid_kubernetes_syntax(pool: dict[str, Any]) -> None:
    export = k8s_export(facts_of(pool), pool="sim pool/1")
    assert [n.host for n in export.nodes] == list(pool)
    for node in export.nodes:
        for key, value in node.labels.items():
            assert valid_label_key(key), key
            assert valid_label_value(value), (key, value)
        assert node.labels["gpupoolctl.io/pool"] == "sim-pool-1"
        assert node.labels["gpupoolctl.io/host"] == node.host


def test_mig_nodes_are_labelled_with_a_config_of_the_configmap(pool: dict[str, Any]) -> None:
    export = k8s_export(facts_of(pool), pool="sim")
    by_host = {n.host: n for n in export.nodes}
    assert ALL_DISABLED in export.configs  # the operator's default must exist
    for host in MIG_HOSTS:
        name = by_host[host].labels[MIG_CONFIG_LABEL]
        assert name == by_host[host].mig_config and name in export.configs
        assert valid_label_value(name)
    for host in NO_MIG_HOSTS:
        assert MIG_CONFIG_LABEL not in by_host[host].labels
        assert by_host[host].mig_config is None
    # The sim pool: dgx01 has MIG off everywhere; dgx02 has two MIG GPUs; both A100 nodes
    # share one layout, so they share one config.
    assert by_host["sg-dgx01"].mig_config == ALL_DISABLED
    assert by_host["sg-dgx02"].mig_config != ALL_DISABLED
    assert by_host["sg-a100-01"].mig_config == by_host["dxb-a100-01"].mig_config
    assert len(export.configs) == 3


def test_each_nodes_config_holds_on_that_node(pool: dict[str, Any]) -> None:
    """What mig-manager would apply on a node is the layout the node has now."""
    export = k8s_export(facts_of(pool), pool="sim")
    spec = parse_spec(export.config_text(), source="config.yaml")
    for node in export.nodes:
        if node.mig_config is None:
            continue
        groups, facts = pool[node.host]
        assert assert_host(spec, node.mig_config, node.host, groups, facts) == [], node.host


def test_configs_use_only_fields_mig_parted_accepts(pool: dict[str, Any]) -> None:
    export = k8s_export(facts_of(pool), pool="sim")
    for entries in export.configs.values():
        assert entries
        for entry in entries:
            assert set(entry) <= set(MIG_PARTED_FIELDS), entry
            assert "devices" in entry and "mig-enabled" in entry
    _, mi300x = pool["dxb-mi300x-01"]
    assert mig_entries("dxb-mi300x-01", mi300x) == []


def test_config_names_are_stable_and_follow_the_layout(pool: dict[str, Any]) -> None:
    first = k8s_export(facts_of(pool), pool="sim")
    again = k8s_export(facts_of(pool), pool="sim")
    assert first.configs == again.configs
    _, dgx02 = pool["sg-dgx02"]
    entries = mig_entries("sg-dgx02", dgx02)
    changed = [dict(e) for e in entries]
    changed[-1]["mig-devices"] = {"7g.80gb": 1}
    assert config_name(changed) != config_name(entries)
    assert config_name([{"devices": "all", "mig-enabled": False}]) == ALL_DISABLED


def test_node_names_come_from_the_mapping(pool: dict[str, Any]) -> None:
    export = k8s_export(facts_of(pool), pool="sim", node_names={"sg-dgx02": "node-7.k8s.example"})
    names = {n.host: n.node for n in export.nodes}
    assert names["sg-dgx02"] == "node-7.k8s.example"
    assert names["sg-dgx01"] == "sg-dgx01"


@pytest.mark.parametrize(
    "node",
    [
        "--all",
        "--server=https://attacker.example",
        "-l",
        "SG-DGX02",
        "node 7",
        "node_7",
        pytest.param("x" * 254, id="254-chars"),
    ],
)
def test_names_that_cannot_be_nodes_are_refused(pool: dict[str, Any], node: str) -> None:
    # In the commands script `kubectl label node --all ...` would label every node of the
    # cluster (and --server would send kubectl's credentials elsewhere): quoting cannot help.
    with pytest.raises(UsageError, match="k8s_node_name") as refused:
        k8s_export(facts_of(pool), pool="sim", node_names={"sg-dgx02": node})
    assert "sg-dgx02" in str(refused.value)


def test_an_inventory_name_that_is_no_node_name_needs_the_mapping(pool: dict[str, Any]) -> None:
    facts = facts_of(pool)
    facts["GPU Box 7"] = facts.pop("dxb-l40s-01")
    with pytest.raises(UsageError, match="GPU Box 7"):
        k8s_export(facts, pool="sim")
    export = k8s_export(facts, pool="sim", node_names={"GPU Box 7": "gpu-box-7"})
    assert [n.node for n in export.nodes if n.host == "GPU Box 7"] == ["gpu-box-7"]


def test_manifest_is_one_configmap_with_the_config(pool: dict[str, Any]) -> None:
    export = k8s_export(facts_of(pool), pool="sim", namespace="ops-gpu")
    documents = [d for d in yaml.safe_load_all(export.manifest()) if d is not None]
    assert len(documents) == 1
    configmap = documents[0]
    assert configmap["apiVersion"] == "v1" and configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["name"] == CONFIGMAP_NAME
    assert configmap["metadata"]["namespace"] == "ops-gpu"
    assert list(configmap["data"]) == [CONFIG_KEY]
    config = yaml.safe_load(configmap["data"][CONFIG_KEY])
    assert config == {"version": "v1", "mig-configs": export.configs}
    assert f"{CONFIG_KEY}: |" in export.manifest()  # a readable block, not an escaped line


@pytest.mark.parametrize("namespace", ["", "Gpu", "gpu_operator", "-x", "n" * 64])
def test_bad_namespaces_are_usage_errors(pool: dict[str, Any], namespace: str) -> None:
    with pytest.raises(UsageError, match="--namespace"):
        k8s_export(facts_of(pool), pool="sim", namespace=namespace)


def test_to_dict_gives_tools_labels_per_node(pool: dict[str, Any]) -> None:
    data = k8s_export(facts_of(pool), pool="sim").to_dict()
    assert data["namespace"] == "gpu-operator"
    assert data["configmap"]["kind"] == "ConfigMap"
    dgx02 = next(n for n in data["nodes"] if n["host"] == "sg-dgx02")
    assert dgx02["labels"][MIG_CONFIG_LABEL] == dgx02["mig_config"]
    assert dgx02["labels"]["gpupoolctl.io/gpu.count"] == "8"
    assert dgx02["labels"]["gpupoolctl.io/gpu.model"] == "NVIDIA-H100-80GB-HBM3"


# -- the shell form ------------------------------------------------------------------------

FAKE_KUBECTL = """#!/bin/sh
# Records each call: its arguments, one per line, and for `apply` what came on stdin.
n=$(ls "$LOG" | wc -l)
for arg in "$@"; do printf '%s\\n' "$arg"; done > "$LOG/call$n.args"
if [ "$1" = apply ]; then cat > "$LOG/call$n.stdin"; fi
"""


def test_commands_apply_the_configmap_then_label_each_node(
    pool: dict[str, Any], tmp_path: Path
) -> None:
    facts = facts_of(pool)
    facts["odd host's name"] = facts.pop("dxb-l40s-01")  # only its label value, sanitized
    export = k8s_export(facts, pool="sim", node_names={"odd host's name": "dxb-l40s-01.k8s"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    log = tmp_path / "log"
    log.mkdir()
    script = tmp_path / "labels.sh"
    script.write_text(export.commands())
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log)}
    subprocess.run(["sh", str(script)], check=True, env=env, timeout=30)

    calls = sorted(log.glob("*.args"), key=lambda p: int(p.stem.removeprefix("call")))
    argvs = [p.read_text().splitlines() for p in calls]
    assert argvs[0] == ["apply", "-f", "-"]
    assert (log / "call0.stdin").read_text() == export.manifest()
    assert len(argvs) == 1 + len(export.nodes)
    for argv, node in zip(argvs[1:], export.nodes, strict=True):
        assert argv[:4] == ["label", "node", node.node, "--overwrite"]
        assert dict(a.split("=", 1) for a in argv[4:]) == node.labels
    assert "gpupoolctl.io/host=odd-host-s-name" in argvs[-1]


# -- islands -------------------------------------------------------------------------------


def test_island_label_and_ansibles_var_come_from_one_count(pool: dict[str, Any]) -> None:
    from gpupoolctl.export.ansible import node_facts
    from gpupoolctl.hw.topology import island_count

    export = k8s_export(facts_of(pool), pool="sim")
    for node in export.nodes:
        facts = facts_of(pool)[node.host]
        count = island_count(facts)
        assert count is not None  # every sim node reports its link matrix
        assert node.labels["gpupoolctl.io/islands"] == str(count)
        assert node_facts(facts)["gpupool_islands"] == count
    # A DGX (NVSwitch) is one island of 8; the L40S node (PCIe only) is islands of one.
    assert island_count(facts_of(pool)["sg-dgx01"]) == 1
    gpus = len(facts_of(pool)["dxb-l40s-01"]["gpus"])
    assert island_count(facts_of(pool)["dxb-l40s-01"]) == gpus > 1


@pytest.mark.parametrize(
    "facts",
    [
        {},
        {"gpus": []},
        {"gpus": [{"index": 0}, {"index": 1}]},  # no link matrix
        {"gpus": [{"index": 0}, {"index": 1}], "topology": {"matrix": [["X"]]}},  # too short
    ],
)
def test_island_count_is_none_when_the_topology_is_unknown(facts: dict[str, Any]) -> None:
    from gpupoolctl.hw.topology import island_count

    assert island_count(facts) is None
    assert "gpupoolctl.io/islands" not in k8s_export({"h": facts}, pool="p").nodes[0].labels
