"""One spelling everywhere: MIG layouts, whole cards, PCI bus ids, the meaning of -f and -n.

Every command that shows the same thing to a person writes it the same way, on the bundled
simulated pool through the real command line.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

LAYOUTS = Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml"
SYSFS_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]")


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_inventory_show_and_plan_write_a_layout_the_same_way(cli):
    inventory = cli("inventory", "-o", "csv")
    show = cli("partition", "show", "-o", "csv")
    plan = cli("-o", "json", "partition", "plan", "-f", str(LAYOUTS), "-c", "inference")
    assert inventory.code == show.code == plan.code == 0, (inventory.stderr, show.stderr)
    listed = {(r["host"], int(r["gpu"])): r["partition"] for r in _csv(inventory.stdout)}
    shown = {(r["host"], int(r["gpu"])): r["state"] for r in _csv(show.stdout)}
    assert listed == shown
    # Largest profile first, joined with " + ": the sim's A100s hold 2x2g.10gb and 1x3g.20gb.
    assert listed[("sg-a100-01", 3)] == "MIG 1x3g.20gb + 2x2g.10gb"
    assert listed[("sg-dgx02", 6)] == "MIG 7x1g.10gb"
    assert listed[("sg-dgx01", 0)] == "MIG off"
    assert listed[("dxb-mi300x-01", 0)] == "SPX/NPS1"
    planned = {
        (host["name"], gpu["index"]): gpu["current"]
        for host in plan.json()["hosts"]
        for gpu in host["gpus"]
    }
    assert planned and all(listed[key] == text for key, text in planned.items())
    assert planned[("sg-a100-01", 3)] == "MIG 1x3g.20gb + 2x2g.10gb"
    text = cli("partition", "plan", "-f", str(LAYOUTS), "-c", "inference")
    assert "GPU 3 NVIDIA A100-PCIE-40GB: MIG 1x3g.20gb + 2x2g.10gb -> " in text.stdout


def test_a_card_without_partitions_is_a_whole_card_everywhere(cli):
    inventory = _csv(cli("inventory", "-o", "csv").stdout)
    show = _csv(cli("partition", "show", "-o", "csv").stdout)
    l40s = [r["partition"] for r in inventory if r["host"] == "dxb-l40s-01"]
    assert l40s == ["whole card"] * 4
    assert [r["state"] for r in show if r["host"] == "dxb-l40s-01"] == ["whole card"] * 4
    table = cli("-l", "dxb-l40s-01", "inventory")
    rows = [line for line in table.stdout.splitlines() if line.startswith("dxb-l40s-01")]
    assert len(rows) == 4 and all(" whole card " in line for line in rows), table.stdout


def test_pci_bus_ids_are_written_as_sysfs_does_for_every_vendor(cli):
    doc = cli("inventory", "-o", "json").json()
    ids = {
        (host["name"], gpu["index"]): gpu["pci_bus_id"]
        for host in doc["hosts"]
        for gpu in host["facts"]["gpus"]
    }
    assert len(ids) == 36
    assert all(SYSFS_BUS_ID.fullmatch(i) for i in ids.values()), ids
    assert ids[("sg-dgx01", 0)] == "0000:18:00.0"  # NVML says 00000000:18:00.0
    assert ids[("sg-dgx01", 5)] == "0000:ab:00.0"  # lower case, as /sys/bus/pci/devices
    assert ids[("dxb-mi300x-01", 0)] == "0000:05:00.0"  # amdsmi's own form, unchanged
    rows = _csv(cli("inventory", "-o", "csv").stdout)
    assert {(r["host"], int(r["gpu"])): r["pci_bus_id"] for r in rows} == ids


FORKS_WARNING = (
    "gpupoolctl: warning: -f for forks is deprecated: use --forks; -f will mean a file or follow"
)


def test_forks_is_spelled_out_and_the_old_f_warns_once(cli):
    new = cli("--forks", "8", "inventory", "-o", "json")
    assert new.code == 0, new.stderr
    assert "deprecated" not in new.stderr
    for args in (("-f", "8", "inventory", "-o", "json"), ("inventory", "-o", "json", "-f", "8")):
        old = cli(*args)
        assert old.code == 0, old.stderr
        assert old.json()["summary"]["ok"] == 6
        assert old.stderr.splitlines().count(FORKS_WARNING) == 1, old.stderr
    quiet = cli("-q", "-f", "8", "inventory", "hosts")
    assert quiet.code == 0 and quiet.stderr == FORKS_WARNING + "\n"  # -q keeps it: it matters
    assert cli("-f", "0", "inventory").code == 2  # still checked as a count of hosts
    usage = cli("--help").stdout
    assert re.search(r"^\s+--forks ", usage, re.M) and not re.search(r"^\s+-f\b", usage, re.M)


def test_f_of_a_command_is_its_file_or_follow_never_forks(cli):
    plan = cli("partition", "plan", "-f", str(LAYOUTS), "-c", "inference", "-o", "json")
    assert plan.code == 0, plan.stderr
    assert plan.json()["label"] == "inference" and "deprecated" not in plan.stderr
    logs = cli("logs", "-f", "j-404")
    assert logs.code == 1, logs.stderr  # an unknown job, not "-f takes a number"
    assert "j-404" in logs.stderr and "deprecated" not in logs.stderr
    k8s = cli("export", "k8s", "-f", str(LAYOUTS), "-n", "gpu-operator")
    assert k8s.code == 0, k8s.stderr
    assert "deprecated" not in k8s.stderr and "namespace: gpu-operator" in k8s.stdout


COUNT_WARNING = (
    "gpupoolctl: warning: alloc --count/-n is deprecated: use --gpus/-g, as submit does; "
    "-n is a namespace (export k8s -n)"
)


def test_alloc_counts_with_gpus_as_submit_does_and_n_warns(cli):
    new = cli("alloc", "--mem", "40gb", "--gpus", "2", "-o", "json")
    assert new.code == 0, new.stderr
    assert len(new.json()["slices"]) == 2 and "deprecated" not in new.stderr
    short = cli("alloc", "--profile", "1g.10gb", "-g", "3", "-o", "json")
    assert short.code == 0 and len(short.json()["slices"]) == 3, short.stderr
    for old_spelling in ("-n", "--count"):
        old = cli("alloc", "--profile", "1g.10gb", old_spelling, "2", "-o", "json")
        assert old.code == 0, old.stderr
        assert len(old.json()["slices"]) == 2
        assert old.stderr.splitlines().count(COUNT_WARNING) == 1, old.stderr
    held = cli("-q", "pool", "--no-refresh", "-o", "json").json()
    taken = [s for n in held["nodes"] for s in n["slices"] if s["state"] == "held"]
    assert len(taken) == 2 + 3 + 2 + 2
    assert "--gpus" in cli("alloc", "--help").stdout
