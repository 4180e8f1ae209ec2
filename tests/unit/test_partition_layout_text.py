"""One spelling of a MIG layout for people (gpupoolctl.partition.layout.mig_layout_text)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.cli.facts_view import partition_text
from gpupoolctl.partition.layout import current_summary, mig_layout_text

H100 = ["7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb", "1g.10gb+me"]


def test_largest_profile_first_joined_with_plus() -> None:
    assert mig_layout_text({"2g.10gb": 2, "3g.20gb": 1}) == "MIG 1x3g.20gb + 2x2g.10gb"
    assert mig_layout_text({"1g.10gb": 7}) == "MIG 7x1g.10gb"
    # Memory breaks a tie of compute slices; a CI profile counts as its GPU instance's.
    assert mig_layout_text({"1g.10gb": 1, "1g.20gb": 1}) == "MIG 1x1g.20gb + 1x1g.10gb"
    assert mig_layout_text({"1g.10gb": 1, "1c.3g.40gb": 3}) == "MIG 3x1c.3g.40gb + 1x1g.10gb"
    assert mig_layout_text({"2c.3g.40gb": 1, "1c.3g.40gb": 1, "3g.40gb": 1}) == (
        "MIG 1x3g.40gb + 1x2c.3g.40gb + 1x1c.3g.40gb"
    )


def test_no_instances_and_zero_counts() -> None:
    assert mig_layout_text({}) == "MIG on (no instances)"
    assert mig_layout_text({"1g.10gb": 0}) == "MIG on (no instances)"
    assert mig_layout_text({"1g.10gb": 0, "7g.80gb": 1}) == "MIG 1x7g.80gb"


@given(st.dictionaries(st.sampled_from(H100), st.integers(1, 7), min_size=1), st.randoms())
def test_the_order_a_layout_is_counted_in_never_shows(counts, random) -> None:
    items = list(counts.items())
    random.shuffle(items)
    text = mig_layout_text(dict(items))
    assert text == mig_layout_text(counts)
    shown = [part.split("x", 1)[1] for part in text.removeprefix("MIG ").split(" + ")]
    assert shown == [name for name in H100 if name in counts]  # H100 is largest first


def _gpu(**changes):
    gpu = {
        "index": 3,
        "vendor": "nvidia",
        "model": "NVIDIA A100-PCIE-40GB",
        "pci_device_id": "0x20F110DE",
        "mig": {"capable": True, "mode": "enabled", "pending": "enabled", "instances": []},
        "partition": None,
        "sriov": None,
    }
    gpu.update(changes)
    return gpu


def _gi(gi_id: int, profile: str, start: int, size: int) -> dict:
    return {
        "gi_id": gi_id,
        "profile": profile,
        "placement_start": start,
        "placement_size": size,
        "compute_instances": [{"ci_id": 0, "profile": profile}],
    }


def test_inventory_and_partition_views_use_the_one_function() -> None:
    instances = [_gi(1, "2g.10gb", 0, 2), _gi(2, "2g.10gb", 2, 2), _gi(3, "3g.20gb", 4, 4)]
    mig = {"capable": True, "mode": "enabled", "pending": "enabled", "instances": instances}
    gpu = _gpu(mig=mig)
    assert partition_text(gpu) == current_summary(gpu) == "MIG 1x3g.20gb + 2x2g.10gb"
    empty = _gpu()
    assert partition_text(empty) == "MIG on (no instances)"
    l40s = _gpu(model="NVIDIA L40S", mig={"capable": False, "mode": "n/a", "instances": []})
    assert partition_text(l40s) == "whole card"
    assert partition_text(_gpu(mig=None)) == "whole card"
    pending = _gpu(mig={"capable": True, "mode": "disabled", "pending": "enabled"})
    assert partition_text(pending) == "MIG off (MIG enable pending a reset)"
    amd = _gpu(
        vendor="amd",
        mig=None,
        partition={"compute": "CPX", "memory": "NPS4"},
        sriov={"total_vfs": 8, "num_vfs": 8},
    )
    assert partition_text(amd) == "CPX/NPS4, 8 VFs"
