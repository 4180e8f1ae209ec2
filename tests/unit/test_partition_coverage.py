"""A label that reaches no GPU, or asks its GPUs for what none of them has, is refused across
the hosts read (partition.coverage), on hand-built facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupoolctl.partition import load_spec
from gpupoolctl.partition.coverage import HostRead, entry_problems, label_errors
from tests.unit.test_partition_plan import facts, mi300x_gpu, nvidia_gpu, spec

LAYOUTS = Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml"


def pool() -> list[HostRead]:
    """A small mixed pool: two H100 hosts, an A100 host, an MI300X host, an L40S host."""
    return [
        HostRead("h1", ["all", "h100"], facts(*(nvidia_gpu(i) for i in range(8)))),
        HostRead("h2", ["all", "h100"], facts(*(nvidia_gpu(i) for i in range(8)))),
        HostRead(
            "a1", ["all", "a100"], facts(*(nvidia_gpu(i, "A100-SXM4-40GB") for i in range(4)))
        ),
        HostRead("m1", ["all", "mi300x"], facts(*(mi300x_gpu(i) for i in range(8)))),
        HostRead("l1", ["all", "l40s"], facts(*(nvidia_gpu(i, "L40S") for i in range(4)))),
    ]


def known(read: list[HostRead]) -> list[tuple[str, list[str]]]:
    return [(h.name, list(h.groups)) for h in read]


def errors_of(body: str, read: list[HostRead], everyone: list[HostRead] | None = None) -> Any:
    errors, warnings = label_errors(spec(body), "x", read, known(everyone or read), "inv.yaml")
    return [str(e) for e in errors], warnings


def test_a_typo_in_hosts_that_leaves_the_label_empty_is_refused_naming_the_entry() -> None:
    errors, warnings = errors_of(
        """\
        x:
          - hosts: [h1000]
            devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
        """,
        pool(),
    )
    assert errors == [
        "layouts.yaml:4: x: hosts: h1000 names no host or group of inv.yaml, so this entry "
        "selects no GPU"
    ]
    assert warnings == []


def test_mig_asked_of_l40s_cards_only_is_refused() -> None:
    errors, _ = errors_of(
        """\
        x:
          - hosts: [l40s]
            devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
        """,
        pool(),
    )
    assert errors == [
        "layouts.yaml:6: x: this entry asks mig-enabled: true, but none of the GPUs it "
        "selects is MIG-capable: l1 GPU 0-3 (NVIDIA L40S)"
    ]


def test_amd_modes_asked_of_nvidia_cards_are_refused_even_when_others_select_gpus() -> None:
    errors, _ = errors_of(
        """\
        x:
          - devices: all
            mig-enabled: false
          - hosts: [h100]
            devices: all
            compute-partition: CPX
        """,
        pool(),
    )
    assert len(errors) == 1
    assert errors[0].startswith(
        "layouts.yaml:8: x: this entry asks compute-partition: CPX, but none of the GPUs it "
        "selects has AMD compute/memory partition modes"
    )
    assert "h1 GPU 0-7 (NVIDIA H100 80GB HBM3), h2 GPU 0-7" in errors[0]


def test_vfs_asked_of_cards_without_sriov_are_refused_but_zero_vfs_hold() -> None:
    body = """\
        x:
          - hosts: [a100]
            devices: all
            sriov-vfs: {n}
        """
    errors, _ = errors_of(body.format(n=4), pool())
    assert errors and "asks sriov-vfs: 4" in errors[0] and "SR-IOV physical function" in errors[0]
    assert errors_of(body.format(n=0), pool())[0] == [
        "layouts.yaml: x selects no GPU on the hosts read (check its hosts:, devices: and "
        "device-filter:)"
    ]


def test_devices_all_still_skips_cards_without_mig_when_some_card_takes_it() -> None:
    # mig-parted's own semantics: one entry for a mixed fleet.
    errors, warnings = errors_of(
        """\
        x:
          - devices: all
            mig-enabled: true
            mig-devices: {}
        """,
        pool(),
    )
    assert errors == [] and warnings == []


def test_an_entry_for_named_hosts_that_selects_none_of_their_gpus_is_refused() -> None:
    body = """\
        x:
          - devices: all
            mig-enabled: false
          - hosts: [h100]
            devices: [8, 9]
            mig-enabled: false
        """
    errors, _ = errors_of(body, pool())
    assert errors == [
        "layouts.yaml:6: x: this entry selects no GPU on the host(s) it names (h1, h2): "
        "check its devices: and device-filter:"
    ]
    # With -l h1 only, h2 was not read: the entry may well select GPUs there.
    everyone = pool()
    assert errors_of(body, everyone[:1], everyone) == ([], [])


def test_an_entry_for_hosts_of_another_inventory_is_said_not_refused() -> None:
    # One layouts file may serve several inventories: the label still selects GPUs here.
    errors, warnings = errors_of(
        """\
        x:
          - devices: all
            mig-enabled: false
          - hosts: [gh200]
            devices: all
            mig-enabled: true
            mig-devices: {"1g.12gb": 7}
        """,
        pool(),
    )
    assert errors == []
    assert warnings == [
        "layouts.yaml:6: x: hosts: gh200 names no host or group of inv.yaml, so this entry "
        "selects no GPU"
    ]


def test_a_device_filter_for_cards_this_pool_lacks_is_no_error() -> None:
    # As in mig-parted's own config files: one entry per card type, wherever it is.
    errors, warnings = errors_of(
        """\
        x:
          - device-filter: "0x233010DE"
            devices: all
            mig-enabled: false
          - device-filter: "0x290110DE"
            devices: all
            mig-enabled: false
        """,
        pool(),
    )
    assert (errors, warnings) == ([], [])


def test_a_label_that_selects_nothing_on_the_hosts_read_is_refused() -> None:
    everyone = pool()
    errors, _ = errors_of(
        """\
        x:
          - device-filter: "0x233010DE"
            devices: all
            mig-enabled: false
        """,
        [everyone[2]],  # -l a1: no H100 there
        everyone,
    )
    assert errors == [
        "layouts.yaml: x selects no GPU on the hosts read (check its hosts:, devices: and "
        "device-filter:)"
    ]


def test_the_bundled_layouts_are_not_refused_on_the_pool_or_its_parts() -> None:
    layouts = load_spec(LAYOUTS)
    everyone = pool()
    everyone[3] = HostRead("m1", ["all", "mi300x"], everyone[3].facts)
    for label in layouts.labels:
        for read in (everyone, everyone[:1], everyone[2:3], everyone[3:4]):
            errors, warnings = label_errors(layouts, label, read, known(everyone))
            assert (errors, warnings) == ([], []), (label, [h.name for h in read])
        # Where the inventory has no mi300x group, its entries are only said.
        coverage = entry_problems(layouts, label, everyone[:3], known(everyone[:3]))
        assert coverage.errors == [] and coverage.unknown_hosts, label
