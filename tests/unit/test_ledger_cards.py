"""Physical cards from the ledger's slice map (ledger.cards): an AMD card in a partition mode
is one card however many logical GPUs it shows, and the pool's memory is its cards', the
same whatever the cards are cut into."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.ledger.cards import card_memory_mib, physical_cards, pool_memory_mib
from gpupoolctl.sched.cards import AmdHive, cards_of, predicted_slices
from tests.property.test_elastic_properties import base_cards, base_slices, layouts

MI300X = "AMD Instinct MI300X"
PER_CARD = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}  # logical GPUs an MI300X shows


def hive() -> AmdHive:
    (found,) = [c for c in base_cards().values() if isinstance(c, AmdHive)]
    return found


def test_an_mi300x_hive_is_eight_cards_in_every_mode() -> None:
    for layout in sorted(hive().product.allowed):
        slices = predicted_slices(hive(), layout)
        cards = physical_cards(slices)
        assert len(cards) == len(slices) and len(set(cards.values())) == 8, layout
        # Each card is a run of its logical GPUs, in the order the driver numbers them.
        per = PER_CARD[layout[0]]
        for gpu, card in cards.items():
            index = int(gpu.rsplit("gpu", 1)[1])
            assert card == f"dxb-mi300x-01/gpu{index - index % per}"


def logical_gpus(host: str, modes: list[str]) -> list[dict[str, Any]]:
    """The slices of a node whose AMD cards are in these compute modes (one per card),
    numbered as the driver numbers them: across the node, card by card."""
    out: list[dict[str, Any]] = []
    for mode in modes:
        for _ in range(PER_CARD[mode]):
            index = len(out)
            split = mode != "SPX"
            out.append(
                {
                    "id": f"{host}/gpu{index}" + (f"/{mode.lower()}-nps1" if split else ""),
                    "host": host,
                    "gpu": index,
                    "kind": "partition" if split else "gpu",
                    "profile": f"{mode}/NPS1" if split else None,
                    "memory_mib": 196608 // PER_CARD[mode],
                    "vendor": "amd",
                    "model": MI300X,
                }
            )
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(PER_CARD)), min_size=1, max_size=8))
def test_cards_in_different_modes_on_one_node_are_told_apart(modes: list[str]) -> None:
    slices = logical_gpus("amd1", modes)
    cards = physical_cards(slices)
    assert len(set(cards.values())) == len(modes)
    first = 0
    for mode in modes:  # each card's logical GPUs, and only they, share its key
        members = {f"amd1/gpu{first + k}" for k in range(PER_CARD[mode])}
        assert {g for g, c in cards.items() if c == f"amd1/gpu{first}"} == members
        first += PER_CARD[mode]
    # And each card's memory, summed over its logical GPUs, is the card's.
    assert pool_memory_mib(slices) == 196608 * len(modes)


def test_nvidia_cards_are_one_card_each_whatever_their_mig_layout() -> None:
    slices = [s for s in base_slices() if s["host"] in ("sg-dgx02", "sg-a100-01")]
    cards = physical_cards(slices)
    assert len(cards) == 12 and all(gpu == card for gpu, card in cards.items())


def test_a_cut_card_keeps_its_memory_a_whole_card_and_a_partition_are_their_slices() -> None:
    a100 = [s for s in base_slices() if s["id"].startswith("sg-a100-01/gpu3/")]
    assert sum(s["memory_mib"] for s in a100) < 40960  # its instances leave part unused
    assert card_memory_mib(a100) == 40960
    (whole,) = [s for s in base_slices() if s["id"] == "sg-dgx01/gpu0"]
    assert card_memory_mib([whole]) == whole["memory_mib"]
    partition = predicted_slices(hive(), ("CPX", "NPS4"))[0]
    assert card_memory_mib([partition]) == hive().memory_mib // 8


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_pools_memory_is_the_same_however_its_cards_are_cut(data: st.DataObject) -> None:
    base = [dict(s) for s in base_slices()]
    cards = cards_of(base)
    recut = data.draw(st.sets(st.sampled_from(sorted(cards)), max_size=6))
    gone = {sid for key in recut for sid in cards[key].slices}
    slices = [s for s in base if s["id"] not in gone]
    for key in sorted(recut):
        slices += predicted_slices(cards[key], data.draw(layouts(cards[key])))
    assert pool_memory_mib(slices) == pool_memory_mib(base)
    assert len(set(physical_cards(slices).values())) == 36  # the bundled pool's cards
