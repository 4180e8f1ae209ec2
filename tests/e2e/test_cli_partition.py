"""`gpupoolctl partition` end to end on the bundled simulated pool (local transport)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupoolctl.sim import pynvml as fake_nvml
from gpupoolctl.sim.state import SimState

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = REPO / "playbooks" / "layouts.yaml"
H100 = "sg-dgx02"  # dgx-h100-mig: GPUs 0-5 whole, 6 = 7x1g.10gb, 7 = 2x3g.40gb


@pytest.fixture
def gp(cli):
    """The real CLI in a subprocess (tests/e2e/conftest.py), stdin never a terminal."""
    return cli


def layouts(gp, *limit: str) -> dict[str, list[tuple[Any, ...]]]:
    """host -> per GPU (uuid, MIG mode, instances with placements and CIs, AMD modes, VFs)."""
    args = ["inventory", "-o", "json", "-q"]
    if limit:
        args += ["-l", ",".join(limit)]
    run = gp(*args)
    assert run.code == 0, run.stderr
    out = {}
    for host in run.json()["hosts"]:
        rows = []
        for g in host["facts"]["gpus"]:
            mig = g.get("mig") or {}
            rows.append(
                (
                    g["uuid"],
                    mig.get("mode"),
                    tuple(
                        (
                            i["profile"],
                            i["placement_start"],
                            tuple(c["profile"] for c in i["compute_instances"]),
                        )
                        for i in mig.get("instances", [])
                    ),
                    (g.get("partition") or {}).get("compute"),
                    (g.get("partition") or {}).get("memory"),
                    (g.get("sriov") or {}).get("num_vfs"),
                )
            )
        out[host["name"]] = rows
    return out


def test_plan_shows_ordered_ops_and_changes_nothing(gp):
    before = layouts(gp, H100)
    run = gp("partition", "plan", "-f", str(LAYOUTS), "-c", "inference", "-l", H100, "-q")
    assert run.code == 0, run.stderr
    assert f"{H100}: 7 GPU(s) to change, 1 already right" in run.stdout
    assert "GPU 7 NVIDIA H100 80GB HBM3: MIG 2x3g.40gb -> MIG 7x1g.10gb" in run.stdout
    assert "1. set_mig_mode enabled" in run.stdout
    assert "create_gi 1g.10gb@6:1" in run.stdout
    doc = gp(
        "partition", "plan", "-f", str(LAYOUTS), "-c", "inference", "-l", H100, "-o", "json"
    ).json()
    gpus = {g["index"]: g for g in doc["hosts"][0]["gpus"]}
    assert gpus[6]["unchanged"] and gpus[6]["ops"] == []
    assert [op["op"] for op in gpus[7]["ops"]] == ["destroy_ci"] * 2 + ["destroy_gi"] * 2 + [
        "create_gi"
    ] * 7
    assert layouts(gp, H100) == before


def test_apply_then_assert_and_another_label_fails(gp):
    args = ["-f", str(LAYOUTS), "-c", "inference", "-l", f"{H100},dxb-mi300x-01"]
    run = gp("partition", "apply", *args, "--yes", "-o", "json")
    assert run.code == 0, run.stderr
    hosts = {h["name"]: h for h in run.json()["hosts"]}
    assert all(g["ok"] for h in hosts.values() for g in h["gpus"])
    assert len(hosts[H100]["gpus"]) == 7  # GPU 6 already was 7x1g.10gb: not sent
    held = gp("partition", "assert", *args)
    assert held.code == 0, held.stdout + held.stderr
    other = gp("partition", "assert", "-f", str(LAYOUTS), "-c", "training", "-l", H100)
    assert other.code == 4
    assert f"{H100} GPU 0 (NVIDIA H100 80GB HBM3): MIG is enabled, wanted disabled" in other.stdout
    # A second apply finds nothing to do.
    again = gp("partition", "apply", *args, "--yes")
    assert again.code == 0 and "nothing to change" in again.stderr


def test_fault_on_one_gpu_exits_3_rolls_back_and_others_apply(gp):
    before = layouts(gp, H100)
    state = SimState.open(H100, "dgx-h100-mig", gp.sim_dir)
    fake_nvml.sim_add_fault(state, "create_gpu_instance", gpu=7, nth=4)
    run = gp(
        "partition",
        "apply",
        "-f",
        str(LAYOUTS),
        "-c",
        "inference",
        "-l",
        H100,
        "--yes",
        "-o",
        "json",
    )
    assert run.code == 3, run.stderr
    outcomes = {g["index"]: g for g in run.json()["hosts"][0]["gpus"]}
    assert outcomes[7]["ok"] is False and outcomes[7]["rolled_back"] is True
    assert "Insufficient resources" in outcomes[7]["error"]
    assert all(outcomes[i]["ok"] for i in range(6))
    after = layouts(gp, H100)[H100]
    assert after[7] == before[H100][7]  # GPU 7 keeps its 2x3g.40gb
    assert all(row[1] == "enabled" for row in after[:6])
    table = gp("partition", "apply", "-f", str(LAYOUTS), "-c", "inference", "-l", H100, "--yes")
    assert table.code == 0  # the fault fired once; the retry completes GPU 7


def test_apply_without_yes_off_a_terminal_is_refused(gp):
    before = layouts(gp, H100)
    run = gp("partition", "apply", "-f", str(LAYOUTS), "-c", "inference", "-l", H100)
    assert run.code == 2
    assert "--yes" in run.stderr and "nothing was changed" in run.stderr
    assert gp("partition", "reset", "-l", H100).code == 2
    assert layouts(gp, H100) == before


def test_reset_returns_to_whole_cards(gp):
    limit = f"{H100},dxb-mi300x-01,sg-a100-01"
    assert (
        gp("partition", "apply", "-f", str(LAYOUTS), "-c", "mixed", "-l", limit, "--yes").code == 0
    )
    run = gp("partition", "reset", "-l", limit, "--yes")
    assert run.code == 0, run.stderr
    for host, rows in layouts(gp, *limit.split(",")).items():
        for _, mig, instances, compute, memory, _ in rows:
            assert mig in (None, "disabled") and instances == (), host
            assert (compute, memory) in ((None, None), ("SPX", "NPS1")), host
    assert gp("partition", "assert", "-f", str(LAYOUTS), "-c", "training", "-l", limit).code == 0


def test_export_round_trips_through_apply_and_assert(gp):
    limit = f"{H100},dxb-mi300x-01,dxb-a100-01"
    assert (
        gp("partition", "apply", "-f", str(LAYOUTS), "-c", "mixed", "-l", limit, "--yes").code == 0
    )
    wanted = layouts(gp, *limit.split(","))
    exported = gp("partition", "export", "-l", limit, "-q")
    assert exported.code == 0, exported.stderr
    config = yaml.safe_load(exported.stdout)
    assert config["version"] == "v1" and list(config["mig-configs"]) == ["current"]
    path = gp.tmp / "current.yaml"
    path.write_text(exported.stdout)
    assert gp("partition", "reset", "-l", limit, "--yes").code == 0
    assert gp("partition", "assert", "-f", str(path), "-c", "current", "-l", limit).code == 4
    assert (
        gp("partition", "apply", "-f", str(path), "-c", "current", "-l", limit, "--yes").code == 0
    )
    held = gp("partition", "assert", "-f", str(path), "-c", "current", "-l", limit)
    assert held.code == 0, held.stdout
    again = layouts(gp, *limit.split(","))

    def shape(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        # Export writes profile counts (as mig-parted does), not placements: the same slices
        # come back, possibly at other slots.
        return [(r[1], sorted((p, cis) for p, _, cis in r[2]), *r[3:]) for r in rows]

    assert {h: shape(rows) for h, rows in again.items()} == {
        h: shape(rows) for h, rows in wanted.items()
    }
    as_json = gp("partition", "export", "-l", limit, "-o", "json", "-q").json()
    assert as_json == config


def test_spec_error_is_one_line_with_file_and_line(gp):
    bad = gp.tmp / "bad.yaml"
    bad.write_text(
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
        '      mig-devices:\n        "1g.5gb": 7\n'
    )
    run = gp("partition", "plan", "-f", str(bad), "-c", "x", "-l", H100, "-q")
    assert run.code == 1
    lines = run.stderr.strip().splitlines()
    assert lines[0].startswith(f"gpupoolctl: error: {bad}:7: ")
    assert "1g.5gb is not a MIG profile" in lines[0] and "valid: 1g.10gb" in lines[0]
    assert "Traceback" not in run.stderr and run.stdout == ""
    typo = gp.tmp / "typo.yaml"
    typo.write_text("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabld: true\n")
    run = gp("partition", "apply", "-f", str(typo), "-c", "x", "--yes", "-q")
    assert run.code == 1 and f"{typo}:5:" in run.stderr and "Traceback" not in run.stderr


def test_unreachable_host_gives_exit_3(gp):
    inventory = gp.tmp / "inv.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "h1": {"transport": "local", "sim": "dgx-h100"},
                        "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1},
                    }
                }
            }
        )
    )
    run = gp("-i", str(inventory), "partition", "plan", "-f", str(LAYOUTS), "-c", "inference")
    assert run.code == 3, run.stderr
    assert "h1: 8 GPU(s) to change" in run.stdout and "gone: unreachable" in run.stderr
    applied = gp(
        "-i",
        str(inventory),
        "partition",
        "apply",
        "-f",
        str(LAYOUTS),
        "-c",
        "inference",
        "--yes",
        "-o",
        "json",
    )
    assert applied.code == 3
    hosts = {h["name"]: h for h in applied.json()["hosts"]}
    assert hosts["gone"]["outcome"] == "unreachable"
    assert all(g["ok"] for g in hosts["h1"]["gpus"])


def test_profiles_catalog_and_driver(gp):
    catalog = gp("partition", "profiles", "--model", "A100-SXM4-40GB", "-o", "json")
    assert catalog.code == 0, catalog.stderr
    names = {row["profile"] for row in catalog.json()["profiles"]}
    assert {"1g.5gb", "3g.20gb", "7g.40gb"} <= names
    driver = gp("partition", "profiles", "-l", "sg-a100-01", "-o", "json", "-q")
    assert driver.code == 0, driver.stderr
    doc = driver.json()
    assert doc["source"] == "driver" and doc["differences"] == []
    assert {row["profile"] for row in doc["profiles"]} == names
    assert {row["gpus"] for row in doc["profiles"]} == {"0,1,2,3"}
    unknown = gp("partition", "profiles", "--model", "Z9000")
    assert unknown.code == 2 and "unknown GPU model" in unknown.stderr


def test_show_lists_instances_with_placements(gp):
    run = gp("partition", "show", "-l", H100, "-o", "json", "-q")
    assert run.code == 0, run.stderr
    gpus = run.json()["hosts"][0]["gpus"]
    assert [i["placement_start"] for i in gpus[7]["mig"]["instances"]] == [0, 4]
    table = gp("partition", "show", "-l", H100, "-q")
    assert "3g.40gb@0 3g.40gb@4" in table.stdout


def test_hooks_file_in_mig_parted_format(gp):
    log = gp.tmp / "hooks.log"
    hooks = gp.tmp / "hooks.yaml"
    step = [sys.executable, "-c", f"import sys; open({str(log)!r}, 'a').write(sys.argv[1] + '\\n')"]
    hooks.write_text(
        yaml.safe_dump(
            {
                "version": "v1",
                "hooks": {
                    name: [{"command": step[0], "args": [*step[1:], name]}]
                    for name in ("apply-start", "pre-apply-mode", "pre-apply-config", "apply-exit")
                },
            }
        )
    )
    run = gp(
        "partition",
        "apply",
        "-f",
        str(LAYOUTS),
        "-c",
        "inference",
        "-l",
        H100,
        "--yes",
        "--hooks",
        str(hooks),
        "-o",
        "json",
    )
    assert run.code == 0, run.stderr
    assert log.read_text().split() == [
        "apply-start",
        "pre-apply-mode",
        "pre-apply-config",
        "apply-exit",
    ]
    assert [h["hook"] for h in run.json()["hosts"][0]["hooks"]] == log.read_text().split()
    bad = gp.tmp / "bad-hooks.yaml"
    bad.write_text("pre-apply-config:\n  - systemctl stop kubelet\n")
    refused = gp(
        "partition",
        "apply",
        "-f",
        str(LAYOUTS),
        "-c",
        "inference",
        "-l",
        H100,
        "--yes",
        "--hooks",
        str(bad),
    )
    assert refused.code == 1 and "without a shell" in refused.stderr


def test_busy_gpu_is_refused_unless_forced(gp):
    state = SimState.open(H100, "dgx-h100-mig", gp.sim_dir)
    fake_nvml.sim_add_process(state, 0, pid=31337, name="train")
    run = gp("partition", "apply", "-f", str(LAYOUTS), "-c", "inference", "-l", H100, "--yes")
    assert run.code == 3
    assert "refused" in run.stdout and "busy: pid 31337 (train)" in run.stdout
    assert layouts(gp, H100)[H100][0][1] == "disabled"


def test_assert_of_a_label_that_selects_nothing_does_not_hold(gp):
    spec = gp.tmp / "typo.yaml"
    spec.write_text(
        "version: v1\nmig-configs:\n  typo:\n"
        "    - devices: all\n      hosts: [h100-typo]\n      mig-enabled: false\n"
    )
    run = gp("-l", H100, "partition", "assert", "-f", str(spec), "-c", "typo")
    assert run.code == 4
    assert "selects no GPU on the hosts read" in run.stdout


def test_busy_gpu_is_refused_with_older_vendor_libraries(gp):
    # libnvidia-ml without the _v3 process call (nvidia-ml-py 13 then raises
    # NVMLLibraryMismatchError), and amdsmi 6.0, which lists process handles, not dicts.
    nvidia = SimState.open(H100, "dgx-h100-mig", gp.sim_dir)
    fake_nvml.sim_add_process(nvidia, 0, pid=31337, name="train")
    with nvidia.mutate() as data:
        data["nvidia"]["missing"] = ["nvmlDeviceGetComputeRunningProcesses_v3"]
    amd = SimState.open("dxb-mi300x-01", "mi300x-8", gp.sim_dir)
    with amd.mutate() as data:
        data["amd"]["process_handles"] = True
        data["amd"]["gpus"][0]["processes"] = [
            {"pid": 4711, "name": "llama", "vram_mb": 1024, "partition": 0, "gfx": 0}
        ]
    limit = f"{H100},dxb-mi300x-01"
    args = ["-f", str(LAYOUTS), "-c", "inference", "-l", limit, "--yes", "-o", "json"]
    run = gp("partition", "apply", *args)
    assert run.code == 3, run.stderr
    gpus = {(h["name"], g["index"]): g for h in run.json()["hosts"] for g in h["gpus"]}
    for key, label in (
        ((H100, 0), "pid 31337 (train)"),
        (("dxb-mi300x-01", 0), "pid 4711 (llama)"),
    ):
        assert gpus[key]["applied"] == 0 and gpus[key]["error"].startswith(f"busy: {label}")
    after = layouts(gp, H100, "dxb-mi300x-01")
    assert after[H100][0][1] == "disabled"
    assert after["dxb-mi300x-01"][0][3:5] == ("SPX", "NPS1")


def test_reset_leaves_vfs_a_vm_holds_unless_forced(gp):
    # An MxGPU host: cards 0 and 1 have one VF each; card 0's is open in a VM (vfio-pci).
    inventory = gp.tmp / "sriov.yaml"
    hosts = {"mx1": {"transport": "local", "sim": "mi300x-8-sriov"}}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    state = SimState.open("mx1", "mi300x-8-sriov", gp.sim_dir)
    with state.mutate() as data:
        for gpu in data["amd"]["gpus"][:2]:
            gpu["sriov"]["num_vfs"] = 1
        data["amd"]["gpus"][0]["sriov"]["vfs"] = {"0": {"driver": "vfio-pci", "open": True}}

    def vf_counts() -> list[int]:
        run = gp("-i", str(inventory), "inventory", "-o", "json", "-q")
        assert run.code == 0, run.stderr
        return [g["sriov"]["num_vfs"] for g in run.json()["hosts"][0]["facts"]["gpus"]]

    reset = ["-i", str(inventory), "partition", "reset", "--yes"]
    run = gp(*reset, "-o", "json")
    assert run.code == 3, run.stdout + run.stderr
    gpus = {g["index"]: g for g in run.json()["hosts"][0]["gpus"]}
    assert gpus[0]["applied"] == 0 and gpus[0]["error"].startswith(
        "busy: VF 0000:05:02.0 (virtfn0) is open through vfio-pci"
    )
    assert gpus[1]["ok"] and sorted(gpus) == [0, 1]
    assert vf_counts() == [1, 0, 0, 0, 0, 0, 0, 0]
    # The table names the GPU and the VF too.
    table = gp(*reset)
    assert table.code == 3
    row = next(line for line in table.stdout.splitlines() if line.split()[:2] == ["mx1", "0"])
    assert "refused" in row and "VF 0000:05:02.0 (virtfn0)" in row
    forced = gp(*reset, "--force")
    assert forced.code == 0, forced.stdout + forced.stderr
    assert vf_counts() == [0] * 8


def test_devices_a_host_does_not_have_are_named_not_silently_skipped(gp, tmp_path):
    spec = tmp_path / "typo.yaml"
    spec.write_text(
        "version: v1\n"
        "mig-configs:\n"
        "  small:\n"
        "    - devices: [6, 9]\n"
        "      mig-enabled: true\n"
        "      mig-devices: {1g.10gb: 7}\n"
    )
    run = gp("-q", "partition", "plan", "-f", str(spec), "-c", "small", "-l", H100, "-o", "json")
    assert run.code == 0, run.stderr
    said = f"{spec}:4: devices 9 match no GPU on {H100} (it has GPUs 0-7)"
    assert said in run.stderr and run.stderr.count("\n") == 1
    (host,) = run.json()["hosts"]
    assert host["warnings"] == [f"{said}; nothing is done for them"]
    assert [g["index"] for g in host["gpus"]] == [6]
