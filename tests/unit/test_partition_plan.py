"""plan_host / assert_host / reset_plan on hand-built facts: ordering, rules, errors."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.hw import catalog
from gpupoolctl.hw.ops import OP_NAMES
from gpupoolctl.partition import assert_host, parse_spec, plan_host, profile_rows, reset_plan
from gpupoolctl.partition.planner import check_layout

# The phase of each op in the contract's order (hw/ops.py).
PHASES = [
    ("destroy_ci", None),
    ("destroy_gi", None),
    ("set_sriov_vfs", "zero"),
    ("set_mig_mode", None),
    ("set_memory_partition", None),
    ("set_compute_partition", None),
    ("create_gi", None),
    ("set_sriov_vfs", "n"),
]


def phase(op: dict[str, Any]) -> int:
    kind = None
    if op["op"] == "set_sriov_vfs":
        kind = "zero" if op["count"] == 0 else "n"
    return PHASES.index((op["op"], kind))


def assert_ordered(ops: list[Any]) -> None:
    assert all(op["op"] in OP_NAMES for op in ops)
    phases = [phase(op) for op in ops]
    assert phases == sorted(phases), ops


def nvidia_gpu(
    index: int,
    key: str = "H100-SXM5-80GB",
    instances: list[tuple[str, int, list[str] | None]] | None = None,
    enabled: bool | None = None,
    sriov: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A GPU's facts; instances are (profile, start, CI names or None for one full CI)."""
    model = catalog.nvidia_model(key)
    geometry = model.mig
    gis = []
    for gi_id, (name, start, cis) in enumerate(instances or [], start=1):
        assert geometry is not None
        profile = geometry.by_name(name)
        assert profile is not None
        gis.append(
            {
                "gi_id": gi_id,
                "profile": name,
                "profile_id": profile.id,
                "placement_start": start,
                "placement_size": profile.placement_size,
                "memory_mib": profile.memory_mib,
                "sm_count": profile.sm_count,
                "compute_instances": [
                    {"ci_id": i, "profile": ci, "uuid": None}
                    for i, ci in enumerate(cis if cis is not None else [name])
                ],
            }
        )
    on = bool(instances) if enabled is None else enabled
    mig = None
    if geometry is not None:
        mig = {
            "capable": True,
            "mode": "enabled" if on else "disabled",
            "pending": "enabled" if on else "disabled",
            "instances": gis,
        }
    else:
        mig = {"capable": False, "mode": "n/a", "pending": None, "instances": []}
    return {
        "index": index,
        "vendor": "nvidia",
        "model": model.names[0],
        "uuid": f"GPU-{key}-{index}",
        "pci_device_id": model.pci_device_ids[0],
        "compute_capability": model.compute_capability,
        "mig": mig,
        "partition": None,
        "sriov": {"total_vfs": sriov[0], "num_vfs": sriov[1]} if sriov else None,
        "processes": [],
    }


CAPS = ["NPS1", "NPS2", "NPS4"]


def mi300x_gpu(
    index: int, compute: str = "SPX", memory: str = "NPS1", sriov: tuple[int, int] | None = None
) -> dict[str, Any]:
    return {
        "index": index,
        "vendor": "amd",
        "model": "AMD Instinct MI300X",
        "uuid": f"amd-{index}",
        "pci_device_id": "0x74A11002",
        "compute_capability": None,
        "mig": None,
        "partition": {
            "compute": compute,
            "memory": memory,
            "memory_caps": ["NPS1", "NPS2", "NPS4"],
        },
        "sriov": {"total_vfs": sriov[0], "num_vfs": sriov[1]} if sriov else None,
        "processes": [],
    }


def facts(*gpus: dict[str, Any]) -> dict[str, Any]:
    return {"host": "n1", "gpus": list(gpus)}


def spec(body: str) -> Any:
    text = "version: v1\nmig-configs:\n" + textwrap.indent(textwrap.dedent(body), "  ")
    return parse_spec(text, "layouts.yaml")


def one(body: str, *gpus: dict[str, Any], groups: tuple[str, ...] = ()) -> Any:
    return plan_host(spec(body), "x", "n1", list(groups), facts(*gpus))


def test_unchanged_gpu_gets_no_ops_and_is_sent_only_to_be_checked() -> None:
    plan = one(
        """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
        """,
        nvidia_gpu(0, instances=[("1g.10gb", s, None) for s in range(7)]),
        nvidia_gpu(1),
    )
    first, second = plan.gpus
    assert first.unchanged and first.ops == [] and first.current == first.desired
    assert not second.unchanged and plan.changed
    sent = plan.agent_args(force=False)["gpus"]
    # The unchanged GPU goes along with no ops and the state it was planned from: the node
    # refuses the whole request if another run changed it meanwhile.
    assert [(g["index"], len(g["ops"])) for g in sent] == [(0, 0), (1, len(second.ops))]
    assert sent[0]["expect"] == first.expect and first.expect


def test_same_profiles_elsewhere_are_unchanged_but_pins_must_match() -> None:
    gpu = nvidia_gpu(0, instances=[("3g.40gb", 0, None), ("1g.10gb", 4, None)])
    body = """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {"3g.40gb": 1, "1g.10gb": 1}
        """
    assert one(body, gpu).gpus[0].unchanged
    pinned = one(body.replace('"3g.40gb": 1', '"3g.40gb@4": 1'), gpu).gpus[0]
    assert not pinned.unchanged
    assert ("3g.40gb", 4) in pinned.placements
    # The 1g.10gb at slot 4 is in the way of the pinned 3g.40gb: everything is rebuilt.
    assert [op["op"] for op in pinned.ops].count("create_gi") == 2
    assert_ordered(pinned.ops)


def test_full_diff_order_with_sriov_and_mig() -> None:
    gpu = nvidia_gpu(0, instances=[("3g.40gb", 0, None), ("3g.40gb", 4, None)], sriov=(16, 2))
    plan = one(
        """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
            sriov-vfs: 4
        """,
        gpu,
    )
    ops = plan.gpus[0].ops
    assert_ordered(ops)
    assert [op["op"] for op in ops][:5] == [
        "destroy_ci",
        "destroy_ci",
        "destroy_gi",
        "destroy_gi",
        "set_sriov_vfs",
    ]
    assert ops[4] == {"op": "set_sriov_vfs", "count": 0}
    assert ops[-1] == {"op": "set_sriov_vfs", "count": 4}
    creates = [op for op in ops if op["op"] == "create_gi"]
    assert [(c["profile"], c["profile_id"], c["start"], c["size"]) for c in creates] == [
        ("1g.10gb", 19, s, 1) for s in range(7)
    ]
    assert plan.gpus[0].desired == "MIG 7x1g.10gb, 4 VFs"


@pytest.mark.parametrize(
    ("now", "want", "counts"),
    [(2, 4, [0, 4]), (0, 4, [4]), (4, 0, [0]), (3, 3, [])],
)
def test_sriov_goes_to_zero_first(now: int, want: int, counts: list[int]) -> None:
    plan = one(
        f"""\
        x:
          - devices: all
            sriov-vfs: {want}
        """,
        nvidia_gpu(0, key="L40S", sriov=(16, now)),
    )
    assert [op["count"] for op in plan.gpus[0].ops] == counts


def test_sriov_count_beyond_the_pf_names_the_choices() -> None:
    plan = one("x:\n  - devices: [0]\n    sriov-vfs: 20\n", nvidia_gpu(0, key="L40S", sriov=(4, 0)))
    assert plan.gpus == []
    assert plan.errors[0].startswith("layouts.yaml:5: n1 GPU 0 (NVIDIA L40S): 20 SR-IOV VFs")
    assert "valid: 0, 1, 2, 3, 4" in plan.errors[0]


def test_sriov_on_a_gpu_without_a_pf() -> None:
    body = "x:\n  - devices: {d}\n    sriov-vfs: 2\n"
    assert one(body.format(d="all"), nvidia_gpu(0, key="L40S")).errors == []
    errors = one(body.format(d="[0]"), nvidia_gpu(0, key="L40S")).errors
    assert "has no SR-IOV physical function" in errors[0]


def test_amd_nps4_only_with_cpx() -> None:
    plan = one(
        """\
        x:
          - devices: all
            compute-partition: SPX
            memory-partition: NPS4
        """,
        mi300x_gpu(0),
    )
    assert plan.gpus == []
    assert plan.errors[0].startswith(
        "layouts.yaml:6: n1 GPU 0 (AMD Instinct MI300X): SPX with NPS4"
    )
    assert "valid pairs: SPX/NPS1, DPX/NPS2, CPX/NPS4" in plan.errors[0]


def test_amd_memory_then_compute_both_ways() -> None:
    to_cpx = one("x:\n  - devices: all\n    memory-partition: NPS4\n", mi300x_gpu(0)).gpus[0]
    assert to_cpx.ops == [
        {"op": "set_memory_partition", "mode": "NPS4"},
        {"op": "set_compute_partition", "mode": "CPX"},
    ]
    assert (to_cpx.current, to_cpx.desired) == ("SPX/NPS1", "CPX/NPS4")
    assert any("hive" in n for n in to_cpx.notes)
    back = one(
        "x:\n  - devices: all\n    compute-partition: SPX\n    memory-partition: NPS1\n",
        mi300x_gpu(0, "CPX", "NPS4"),
    ).gpus[0]
    assert back.ops == [
        {"op": "set_memory_partition", "mode": "NPS1"},
        {"op": "set_compute_partition", "mode": "SPX"},
    ]
    # Compute alone keeps a memory mode that goes with it; CPX works with NPS1.
    cpx = one("x:\n  - devices: all\n    compute-partition: CPX\n", mi300x_gpu(0)).gpus[0]
    assert cpx.ops == [{"op": "set_compute_partition", "mode": "CPX"}]
    # SPX from CPX/NPS4 must leave NPS4 first (SPX is refused while NPS4 is set).
    spx = one("x:\n  - devices: all\n    compute-partition: SPX\n", mi300x_gpu(0, "CPX", "NPS4"))
    assert spx.gpus[0].ops == [
        {"op": "set_memory_partition", "mode": "NPS1"},
        {"op": "set_compute_partition", "mode": "SPX"},
    ]


def test_amd_mode_the_product_lacks() -> None:
    plan = one("x:\n  - devices: all\n    compute-partition: TPX\n", mi300x_gpu(0))
    assert "TPX is not a mode of AMD Instinct MI300X; valid: SPX, DPX, QPX, CPX" in plan.errors[0]


def test_amd_vf_counts_depend_on_the_mode() -> None:
    body = "x:\n  - devices: all\n    sriov-vfs: 8\n{extra}"
    spx = one(body.format(extra=""), mi300x_gpu(0, sriov=(8, 0)))
    assert "8 SR-IOV VFs are not possible in SPX/NPS1; valid: 0, 1" in spx.errors[0]
    cpx = one(
        body.format(extra="    compute-partition: CPX\n    memory-partition: NPS4\n"),
        mi300x_gpu(0, sriov=(8, 1)),
    )
    assert cpx.errors == []
    ops = cpx.gpus[0].ops
    assert ops == [
        {"op": "set_sriov_vfs", "count": 0},
        {"op": "set_memory_partition", "mode": "NPS4"},
        {"op": "set_compute_partition", "mode": "CPX"},
        {"op": "set_sriov_vfs", "count": 8},
    ]


def test_partition_change_with_vfs_up_cycles_them() -> None:
    plan = one(
        "x:\n  - devices: all\n    compute-partition: CPX\n    memory-partition: NPS1\n",
        mi300x_gpu(0, sriov=(8, 1)),
    )
    ops = plan.gpus[0].ops
    assert ops[0] == {"op": "set_sriov_vfs", "count": 0}
    assert ops[-1] == {"op": "set_sriov_vfs", "count": 1}
    assert_ordered(ops)


def test_aspects_from_several_entries_merge_later_wins() -> None:
    plan = one(
        """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
          - devices: [1]
            mig-enabled: true
            mig-devices: {"7g.80gb": 1}
          - devices: all
            sriov-vfs: 1
        """,
        nvidia_gpu(0, sriov=(4, 0)),
        nvidia_gpu(1, sriov=(4, 0)),
    )
    assert [g.desired for g in plan.gpus] == ["MIG 7x1g.10gb, 1 VFs", "MIG 1x7g.80gb, 1 VFs"]


def test_hosts_select_by_name_group_and_glob() -> None:
    body = """\
        x:
          - hosts: [{pattern}]
            devices: all
            mig-enabled: true
            mig-devices: {{"7g.80gb": 1}}
        """
    gpu = nvidia_gpu(0)
    assert one(body.format(pattern="n1"), gpu).gpus
    assert one(body.format(pattern="h100"), gpu, groups=("h100",)).gpus
    assert one(body.format(pattern="n*"), gpu).gpus
    assert not one(body.format(pattern="other"), gpu, groups=("h100",)).gpus


def test_non_mig_gpus_are_skipped_for_all_and_refused_by_index() -> None:
    body = "x:\n  - devices: {d}\n    mig-enabled: true\n    mig-devices: {{}}\n"
    l40s = nvidia_gpu(0, key="L40S")
    assert one(body.format(d="all"), l40s).gpus == []
    errors = one(body.format(d="[0]"), l40s).errors
    assert errors == [
        "layouts.yaml:4: n1 GPU 0 (NVIDIA L40S) is not MIG-capable; it cannot take "
        "mig-enabled: true"
    ]
    # mig-enabled: false on a non-MIG GPU is skipped, as mig-parted does.
    assert one("x:\n  - devices: [0]\n    mig-enabled: false\n", l40s).errors == []
    # AMD modes named for an NVIDIA GPU by index.
    errors = one("x:\n  - devices: [0]\n    compute-partition: CPX\n", l40s).errors
    assert "has no AMD compute/memory partition modes" in errors[0]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ('{"1g.10gb": 8}', "MIG 8x1g.10gb is impossible: at most 7 x 1g.10gb"),
        ('{"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}', "needs 8 compute slices; the GPU has 7"),
        ('{"3g.40gb": 2, "1g.10gb": 1}', "no placement fits MIG 2x3g.40gb + 1x1g.10gb"),
        ('{"1g.5gb": 1}', "1g.5gb is not a MIG profile of NVIDIA H100 80GB HBM3; valid: 1g.10gb"),
        ('{"3g.40gb@2": 1}', "3g.40gb cannot start at slot 2; valid starts: 0, 4"),
        ('{"5c.7g.80gb": 1}', "not a compute-instance profile of 7g.80gb; valid: 1c.7g.80gb"),
        ('{"1c.3g.40gb@0": 4}', "do not fit one 3g.40gb"),
        ('{"3g.40gb@0": 1, "1g.10gb@0": 1}', "no placement fits"),
    ],
)
def test_impossible_requests_name_gpu_model_and_choices(devices: str, message: str) -> None:
    plan = one(
        f"""\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {devices}
        """,
        nvidia_gpu(0),
    )
    assert plan.gpus == [] and len(plan.errors) == 1
    error = plan.errors[0]
    assert error.startswith("layouts.yaml:6: n1 GPU 0 (NVIDIA H100 80GB HBM3): "), error
    assert message in error


def test_compute_instances_pack_into_gpu_instances() -> None:
    plan = one(
        """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {"1c.3g.40gb": 4}
        """,
        nvidia_gpu(0),
    )
    creates = [op for op in plan.gpus[0].ops if op["op"] == "create_gi"]
    assert sorted(len(c.get("compute_instances", [])) for c in creates) == [1, 3]
    assert plan.gpus[0].desired == "MIG 1x3g.40gb[1x1c] + 1x3g.40gb[3x1c]"
    # Mixed CI sizes share a GI when their placements allow (2c at 0, 1c at 2).
    plan = one(
        """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {"2c.3g.40gb": 1, "1c.3g.40gb": 1}
        """,
        nvidia_gpu(0),
    )
    creates = [op for op in plan.gpus[0].ops if op["op"] == "create_gi"]
    assert [c["compute_instances"] for c in creates] == [["1c.3g.40gb", "2c.3g.40gb"]]


def test_keeps_current_instances_the_new_layout_can_keep() -> None:
    gpu = nvidia_gpu(0, instances=[("1g.10gb", 0, None), ("1g.10gb", 1, None)])
    plan = one(
        'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"1g.10gb": 4}\n', gpu
    )
    ops = plan.gpus[0].ops
    assert [op["op"] for op in ops] == ["create_gi", "create_gi"]
    assert check_layout(catalog.nvidia_model("H100-SXM5-80GB").mig, plan.gpus[0].placements) == []


def test_ampere_mode_change_says_reset() -> None:
    body = 'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"1g.5gb": 7}\n'
    a100 = one(body, nvidia_gpu(0, key="A100-SXM4-40GB")).gpus[0]
    assert a100.notes == ["MIG mode change on Ampere (A100/A30) needs a GPU reset"]
    assert a100.ops[0] == {"op": "set_mig_mode", "enabled": True}
    h100 = one(body.replace("1g.5gb", "1g.10gb"), nvidia_gpu(0)).gpus[0]
    assert h100.notes == []


def test_rtx_pro_6000_uses_twelve_slots() -> None:
    gpu = nvidia_gpu(0, key="RTX-PRO-6000-96GB")
    plan = one(
        "x:\n  - devices: all\n    mig-enabled: true\n"
        '    mig-devices: {"1g.24gb": 2, "2g.48gb": 1}\n',
        gpu,
    )
    assert plan.errors == []
    assert sorted(plan.gpus[0].placements) == [("1g.24gb", 6), ("1g.24gb", 9), ("2g.48gb", 0)]
    plan = one(
        'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"2g.48gb": 3}\n', gpu
    )
    assert "at most 2 x 2g.48gb" in plan.errors[0]


def test_mig_disable_destroys_cis_then_gis_then_mode() -> None:
    gpu = nvidia_gpu(0, instances=[("3g.40gb", 0, ["1c.3g.40gb", "2c.3g.40gb"])])
    ops = one("x:\n  - devices: all\n    mig-enabled: false\n", gpu).gpus[0].ops
    assert ops == [
        {"op": "destroy_ci", "gi": 1, "ci": 0},
        {"op": "destroy_ci", "gi": 1, "ci": 1},
        {"op": "destroy_gi", "gi": 1},
        {"op": "set_mig_mode", "enabled": False},
    ]


def test_assert_counts_and_pins() -> None:
    gpu = nvidia_gpu(0, instances=[("3g.40gb", 0, ["1c.3g.40gb"] * 3), ("1g.10gb", 4, None)])
    body = "x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {devices}\n"

    def check(devices: str) -> list[str]:
        return assert_host(spec(body.format(devices=devices)), "x", "n1", [], facts(gpu))

    assert check('{"1c.3g.40gb": 3, "1g.10gb": 1}') == []
    assert check('{"1c.3g.40gb@0": 3, "1g.10gb@4": 1}') == []
    assert check('{"1c.3g.40gb": 3, "1g.10gb@5": 1}') == [
        "n1 GPU 0 (NVIDIA H100 80GB HBM3): no 1g.10gb at slot 5"
    ]
    assert check('{"3g.40gb": 1, "1g.10gb": 1}') == [
        "n1 GPU 0 (NVIDIA H100 80GB HBM3): MIG 3x1c.3g.40gb + 1x1g.10gb, "
        "wanted MIG 1x3g.40gb + 1x1g.10gb"
    ]
    with pytest.raises(SourceError, match="not MIG-capable"):
        assert_host(
            spec(body.format(devices="{}").replace("all", "[0]")),
            "x",
            "n1",
            [],
            facts(nvidia_gpu(0, key="L40S")),
        )


def test_reset_plan_on_amd_and_sriov() -> None:
    plan = reset_plan("n1", facts(mi300x_gpu(0, "CPX", "NPS4", sriov=(8, 8)), nvidia_gpu(1)))
    amd = plan.gpus[0]
    assert amd.ops == [
        {"op": "set_sriov_vfs", "count": 0},
        {"op": "set_memory_partition", "mode": "NPS1"},
        {"op": "set_compute_partition", "mode": "SPX"},
    ]
    assert amd.desired == "SPX/NPS1"
    assert plan.gpus[1].unchanged


def test_profile_rows() -> None:
    rows = profile_rows("RTX-PRO-6000-96GB")
    assert {r["model"] for r in rows} == {"RTX-PRO-6000-96GB"}
    one_g = next(r for r in rows if r["profile"] == "1g.24gb")
    assert (one_g["placements"], one_g["memory_slots"], one_g["max_instances"]) == (
        "{0,3,6,9}:3",
        "3/12",
        4,
    )
    h100 = profile_rows("NVIDIA H100 80GB HBM3")
    assert [r["profile"] for r in h100][:2] == ["1g.10gb", "1g.10gb+me"]
    assert h100[0]["id"] == 19 and h100[0]["sms"] == 16
    amd = profile_rows("mi300x")
    assert "CPX/NPS4" in {r["profile"] for r in amd}
    assert any(r["model"] == "B200-180GB" for r in profile_rows(None))
    with pytest.raises(UsageError, match="unknown GPU model"):
        profile_rows("GTX 1080")


def runtime_profiles(key: str) -> list[dict[str, Any]]:
    geometry = catalog.nvidia_model(key).mig
    assert geometry is not None
    return [
        {
            "name": p.name,
            "id": p.id,
            "slices": p.compute_slices,
            "memory_mib": p.memory_mib,
            "sm_count": p.sm_count,
            "max_instances": p.max_instances,
            "placements": list(p.placement_starts),
            "size": p.placement_size,
        }
        for p in geometry.profiles
    ]


def test_driver_profiles_win_over_the_catalog_and_differences_are_noted() -> None:
    body = 'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"1g.10gb": 4}\n'
    gpu = nvidia_gpu(0)
    gpu["mig"]["profiles"] = runtime_profiles("H100-SXM5-80GB")
    same = one(body, gpu).gpus[0]
    assert same.notes == []
    for profile in gpu["mig"]["profiles"]:
        if profile["name"] == "1g.10gb":
            profile["placements"], profile["max_instances"] = [1, 3, 5], 3
    plan = one(body, gpu)
    assert "at most 3 x 1g.10gb" in plan.errors[0]
    three = one(body.replace('"1g.10gb": 4', '"1g.10gb": 3'), gpu).gpus[0]
    assert sorted(three.placements) == [("1g.10gb", 1), ("1g.10gb", 3), ("1g.10gb", 5)]
    assert three.notes == [
        "the driver's MIG profiles differ from the catalog (the driver wins): 1g.10gb: catalog "
        "id 19, 7 max, {0,1,2,3,4,5,6}:1, driver id 19, 3 max, {1,3,5}:1"
    ]


def test_a_model_the_catalog_lacks_plans_from_driver_profiles() -> None:
    gpu = nvidia_gpu(0)
    gpu["pci_device_id"], gpu["model"] = "0x999910DE", "NVIDIA Future GPU"
    body = 'x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {"3g.40gb": 2}\n'
    assert "no MIG geometry for PCI id 0x999910DE" in one(body, gpu).errors[0]
    gpu["mig"]["profiles"] = runtime_profiles("H100-SXM5-80GB")
    plan = one(body, gpu)
    assert plan.errors == [] and sorted(plan.gpus[0].placements) == [
        ("3g.40gb", 0),
        ("3g.40gb", 4),
    ]
    assert plan.gpus[0].notes == [
        "no catalog entry for this model: using the driver's MIG profiles"
    ]


def test_devices_beyond_the_host_are_warned_not_errors() -> None:
    spec = parse_spec(
        "version: v1\nmig-configs:\n  x:\n"
        "    - devices: [0, 4]\n      mig-enabled: false\n"
        "    - devices: all\n      mig-enabled: false\n",
        "s.yaml",
    )
    facts = {"gpus": [nvidia_gpu(i) for i in range(2)]}
    plan = plan_host(spec, "x", "n1", [], facts)
    assert plan.errors == []
    assert plan.warnings == [
        "s.yaml:4: devices 4 match no GPU on n1 (it has GPUs 0-1); nothing is done for them"
    ]
    assert plan_host(spec, "x", "n1", [], {"gpus": []}).warnings == []  # nothing read: quiet
