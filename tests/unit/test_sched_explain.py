"""The --dry-run reasons say what actually decided the pick."""

from __future__ import annotations

from gpupoolctl.sched import explain


def test_packing_tie_break_is_named_only_when_it_decided():
    packed = explain.single("h/gpu3/mig-2g.10gb@2", 9800, 300, 3, 0, "best-fit")
    assert "already partly used (keeps whole GPUs/hosts free)" in packed
    fresh = explain.single("h/gpu3/mig-2g.10gb@0", 9800, 300, 4, 3, "best-fit")
    assert "none on a GPU or host already partly used, so lowest id" in fresh
    assert "keeps whole" not in fresh
    alone = explain.single("h/gpu0", 81920, 0, 1, 3, "best-fit")
    assert alone.endswith("1 free candidate(s) of this size")
