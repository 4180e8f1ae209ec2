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
