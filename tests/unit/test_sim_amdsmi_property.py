"""Random sequences of partition moves against the simulated amdsmi.

Whatever the sequence, every card stays in an allowed compute/memory pair, the handle count
matches the modes, and a refused move changes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.hw import amd_modes
from gpupoolctl.sim import amd_templates
from gpupoolctl.sim import amdsmi as fake
from gpupoolctl.sim.state import STATE_VERSION, SimState

PRODUCT = amd_modes.product("mi300x")
REFUSALS = {fake.AMDSMI_STATUS_SETTING_UNAVAILABLE, fake.AMDSMI_STATUS_BUSY}

moves = st.lists(
    st.one_of(
        st.tuples(
            st.just("compute"),
            st.integers(0, 2),
            st.sampled_from(list(fake.AmdSmiComputePartitionType)[:5]),
        ),
        st.tuples(
            st.just("memory"),
            st.integers(0, 2),
            st.sampled_from(list(fake.AmdSmiMemoryPartitionType)[:4]),
        ),
        st.tuples(st.just("busy"), st.integers(0, 2), st.booleans()),
    ),
    max_size=25,
)


def snapshot() -> list[tuple[str, str]]:
    return [(g["compute_partition"], g["memory_partition"]) for g in fake._gpus()]


def card_handle(card: int) -> fake.ProcessorHandle:
    return next(h for h in fake.amdsmi_get_processor_handles() if h.gpu == card)


def expected_compute_outcome(before: list[tuple[str, str]], card: int, mode: str) -> bool:
    compute, memory = before[card]
    busy = bool(fake._gpus()[card]["processes"])
    if mode == compute:
        return True
    return PRODUCT.is_allowed(mode, memory) and not busy


def expected_memory_outcome(before: list[tuple[str, str]], mode: str) -> bool:
    # One hive: the change applies to all eight cards, or to none.
    if all(memory == mode for _, memory in before):
        return True
    if mode not in PRODUCT.memory_modes:
        return False
    if any(PRODUCT.compute_for_memory(compute, mode) is None for compute, _ in before):
        return False
    return not any(g["processes"] for g in fake._gpus())


@settings(max_examples=60, deadline=None)
@given(moves)
def test_random_partition_sequences_keep_every_card_in_an_allowed_pair(sequence: list) -> None:
    with tempfile.TemporaryDirectory() as folder:
        data = {"version": STATE_VERSION, "host": "p", "template": "mi300x-8"}
        data.update(amd_templates.mi300x_8("p"))
        state = SimState(Path(folder) / "p.json", data)
        state._write()
        fake.bind(state)
        fake.amdsmi_init()
        try:
            for kind, card, value in sequence:
                before = snapshot()
                if kind == "busy":
                    if value:
                        fake.sim_add_process(card, pid=1000 + card)
                    else:
                        fake.sim_clear_processes(card)
                    continue
                should_pass = (
                    expected_compute_outcome(before, card, value.name)
                    if kind == "compute"
                    else expected_memory_outcome(before, value.name)
                )
                try:
                    if kind == "compute":
                        fake.amdsmi_set_gpu_compute_partition(card_handle(card), value)
                    else:
                        fake.amdsmi_set_gpu_memory_partition(card_handle(card), value)
                except fake.AmdSmiLibraryException as exc:
                    assert exc.err_code in REFUSALS
                    assert snapshot() == before, "a refused move changed the state"
                    assert should_pass is not True, f"{kind} {value.name} wrongly refused"
                else:
                    assert should_pass is not False, f"{kind} {value.name} wrongly allowed"
                    if kind == "memory":
                        assert all(m == value.name for _, m in snapshot())  # the whole hive
                for compute, memory in snapshot():
                    assert PRODUCT.is_allowed(compute, memory), (compute, memory)
                expected_handles = sum(PRODUCT.partitions(c) for c, _ in snapshot())
                assert len(fake.amdsmi_get_processor_handles()) == expected_handles
        finally:
            fake.bind(None)
