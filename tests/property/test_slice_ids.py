"""Every place that names a card or a slice names it the same way (hw.slice formats them): the
slices the ledger records from facts, the card keys placement, health, reservations and the
exports use, and the slices elastic re-cuts predict for a layout."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl import health
from gpupoolctl.hw import catalog
from gpupoolctl.hw.slice import card_key, gpu_id, hive_key
from gpupoolctl.ledger import slices_from_facts
from gpupoolctl.sched import PoolView
from gpupoolctl.sched.cards import AmdHive, cards_of, gpu_keys, predicted_slices

H100 = "NVIDIA H100 80GB HBM3"
MI300X = "AMD Instinct MI300X"
L40S = "NVIDIA L40S"
AMD_MODES = [("SPX", "NPS1"), ("DPX", "NPS2"), ("CPX", "NPS4")]
PER_CARD = {"SPX": 1, "DPX": 2, "CPX": 8}

hosts = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5})?", fullmatch=True)


def _profile_memory(profile: str) -> int:
    model = catalog.find_nvidia_model(name=H100)
    assert model is not None and model.mig is not None
    found = model.mig.by_name(profile)
    assert found is not None
    return found.memory_mib


@st.composite
def nvidia_cards(draw: st.DrawFn) -> dict[str, Any]:
    """An H100, whole or cut into 1g.10gb instances at some of its placements."""
    starts = draw(st.one_of(st.just([]), st.lists(st.integers(0, 6), min_size=1, unique=True)))
    instances = [
        {
            "gi_id": k,
            "profile": "1g.10gb",
            "placement_start": start,
            "memory_mib": _profile_memory("1g.10gb"),
            "compute_instances": [{"ci_id": 0, "profile": "1g.10gb", "uuid": f"MIG-{k}"}],
        }
        for k, start in enumerate(sorted(starts))
    ]
    return {
        "vendor": "nvidia",
        "model": H100,
        "memory_total_mib": 81559,
        "mig": {"mode": "enabled" if instances else "disabled", "instances": instances},
    }


def _facts(nvidia: list[dict[str, Any]], amd: tuple[int, str, str], vfs: int) -> dict[str, Any]:
    """One node: the NVIDIA cards, then an xGMI hive of AMD cards in one mode (each card's
    logical GPUs numbered in turn), then an L40S with SR-IOV functions when `vfs`."""
    gpus: list[dict[str, Any]] = list(nvidia)
    cards, compute, memory = amd
    per_card = PER_CARD[compute]
    for _ in range(cards * per_card):
        gpus.append(
            {
                "vendor": "amd",
                "model": MI300X,
                "memory_total_mib": 196608 // per_card,
                "partition": {"compute": compute, "memory": memory, "memory_caps": []},
            }
        )
    if vfs:
        gpus.append({"vendor": "nvidia", "model": L40S, "memory_total_mib": 46068})
        gpus[-1]["sriov"] = {"total_vfs": 16, "num_vfs": vfs}
    for index, gpu in enumerate(gpus):
        gpu.update(index=index, uuid=f"GPU-{index}", processes=[])
    # NVLink among the NVIDIA cards, xGMI among the AMD ones: one island each.
    matrix = [
        [
            "X"
            if a == b
            else ("XGMI" if ga["vendor"] == "amd" else "NV18")
            if ga["vendor"] == gb["vendor"] and ga["model"] != L40S and gb["model"] != L40S
            else "SYS"
            for b, gb in enumerate(gpus)
        ]
        for a, ga in enumerate(gpus)
    ]
    return {"gpus": gpus, "topology": {"gpus": [g["uuid"] for g in gpus], "matrix": matrix}}


nodes = st.builds(
    _facts,
    st.lists(nvidia_cards(), max_size=3),
    st.tuples(st.integers(0, 2), st.sampled_from(AMD_MODES)).map(lambda t: (t[0], *t[1])),
    st.integers(0, 4),
)


@settings(max_examples=80, deadline=None)
@given(hosts, nodes)
def test_every_site_names_a_card_and_its_slices_alike(host: str, facts: dict[str, Any]) -> None:
    slices = slices_from_facts(host, facts)
    view = PoolView(slices)
    for entry in slices:
        key = card_key(entry)
        assert key is not None
        # the ledger's card key, placement's GPU key, health's and the formatter's
        assert key == gpu_id(host, entry["gpu"]) == health.card(host, entry["gpu"])
        assert view.slot(entry["id"]).gpu == key
        assert entry["id"] == key or entry["id"].startswith(key + "/")
    cards = cards_of(slices)
    nvidia_whole_or_mig = {
        card_key(s) for s in slices if s["model"] == H100 and s["kind"] in ("gpu", "mig")
    }
    hives = {hive_key(s) for s in slices if s["vendor"] == "amd"}
    assert set(cards) == nvidia_whole_or_mig | hives  # every re-cuttable card is seen
    for card in cards.values():
        mine = [s for s in slices if s["id"] in card.slices]
        # re-cutting predicts the ids the ledger records for the layout the card has now
        predicted = predicted_slices(card, card.layout)
        assert sorted(p["id"] for p in predicted) == sorted(card.slices)
        assert {card_key(p) for p in predicted} == {card_key(s) for s in mine}
        assert sorted(gpu_keys(card)) == sorted({str(card_key(s)) for s in mine})
        if not isinstance(card, AmdHive):
            assert card.key == gpu_id(host, card.index)
