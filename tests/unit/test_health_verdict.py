"""The XID catalogue, the verdict rules (hw.health) and what `health --drain` decides."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl import health as pool_health
from gpupoolctl.hw import health as rules
from gpupoolctl.hw import xid

NOW = 1_800_000_000.0


def nvidia(**signals: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "unknown": [],
        "lost": False,
        "ecc_uncorrected_volatile": 0,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failed": False},
        "retired_pages_pending": None,
        "xids": [],
        "throttle_reasons": [],
        "temperature_c": 40,
        "notes": [],
    }
    base.update(signals)
    return base


def test_catalogue_classifies_the_xids_the_issue_names() -> None:
    for number in (48, 64, 74, 79, 95):
        assert xid.lookup(number).severity == "failed", number
    assert xid.lookup(79).action == "RESTART_BM"
    assert xid.lookup(48).action == "RESET_GPU"
    for number in (13, 31, 43, 45, 68):  # NVIDIA's device plugin skips exactly these
        assert xid.lookup(number).severity == "application", number
    assert {13, 31, 43, 45, 68} == xid.APPLICATION_XIDS
    assert xid.lookup(63).severity == "degraded" and xid.lookup(94).severity == "degraded"
    assert all(entry.action in xid.ACTIONS for entry in xid.CATALOG.values())
    unknown = xid.lookup(4242)
    assert unknown.severity == "failed" and unknown.action == "CONTACT_SUPPORT"


def test_each_rule() -> None:
    def verdict(health: dict[str, Any], vendor: str = "nvidia") -> tuple[str, str]:
        judged = rules.judge(health, vendor, NOW)
        return judged["verdict"], judged["action"]

    assert verdict(nvidia()) == ("ok", "NONE")
    assert verdict(nvidia(lost=True)) == ("failed", "RESTART_BM")
    assert verdict(nvidia(ecc_uncorrected_volatile=1))[0] == "failed"
    rows = {"correctable": 0, "uncorrectable": 1, "pending": True, "failed": False}
    assert verdict(nvidia(remapped_rows=rows)) == ("degraded", "RESET_GPU")
    assert verdict(nvidia(remapped_rows={**rows, "failed": True})) == ("failed", "CONTACT_SUPPORT")
    assert verdict(nvidia(remapped_rows=None, retired_pages_pending=True))[0] == "degraded"
    assert verdict(nvidia(xids=[{"xid": 79, "at": NOW - 60}])) == ("failed", "RESTART_BM")
    assert verdict(nvidia(xids=[{"xid": 79, "at": NOW - rules.XID_WINDOW_S - 1}]))[0] == "ok"
    judged = rules.judge(nvidia(xids=[{"xid": 13, "at": NOW}]), "nvidia", NOW)
    assert judged["verdict"] == "ok" and "application" in judged["notes"][0]
    assert verdict(nvidia(throttle_reasons=["hw_thermal_slowdown"]))[0] == "degraded"
    assert verdict(nvidia(throttle_reasons=["gpu_idle", "sw_power_cap"]))[0] == "ok"
    assert verdict(nvidia(temperature_c=rules.TEMPERATURE_DEGRADED_C["nvidia"]))[0] == "degraded"
    amd = {"unknown": [], "ecc_uncorrectable": 0, "ecc_deferred": 0, "bad_pages": 0,
           "bad_pages_pending": 0, "events": [], "temperature_c": 50}  # fmt: skip
    assert verdict(amd, "amd")[0] == "ok"
    assert verdict({**amd, "ecc_uncorrectable": 2}, "amd")[0] == "failed"
    assert verdict({**amd, "events": ["RING_HANG"]}, "amd")[0] == "failed"
    assert verdict({**amd, "events": ["GPU_PRE_RESET"]}, "amd")[0] == "failed"
    assert verdict({**amd, "ecc_deferred": 1}, "amd")[0] == "degraded"
    assert verdict({**amd, "bad_pages": 3}, "amd")[0] == "degraded"
    # Failed dominates degraded, and the action is the failed reason's.
    both = rules.judge(nvidia(lost=True, temperature_c=99), "nvidia", NOW)
    assert both["verdict"] == "failed" and both["action"] == "RESTART_BM"
    assert both["reasons"][0].startswith("the driver reports the GPU lost")


def test_nothing_read_is_unknown_never_ok() -> None:
    assert rules.judge(None, "nvidia")["verdict"] == "unknown"
    every = list(rules.SIGNALS["nvidia"])
    judged = rules.judge({"unknown": every, "lost": None}, "nvidia", NOW)
    assert judged["verdict"] == "unknown" and judged["action"] == "CHECK_BY_HAND"
    # A value listed as unknown is not believed.
    assert (
        rules.judge({"unknown": every, "lost": False, "temperature_c": 40}, "nvidia")["verdict"]
        == "unknown"
    )


_FAILED = st.sampled_from(
    [{"lost": True}, {"ecc_uncorrected_volatile": 3}, {"xids": [{"xid": 79, "at": NOW}]}]
)
_DEGRADED = st.sampled_from(
    [
        {"temperature_c": 95},
        {"throttle_reasons": ["hw_slowdown"]},
        {"xids": [{"xid": 63, "at": NOW}]},
        {
            "remapped_rows": {
                "correctable": 0,
                "uncorrectable": 0,
                "pending": True,
                "failed": False,
            }
        },
    ]
)


@given(
    failed=st.lists(_FAILED, max_size=2),
    degraded=st.lists(_DEGRADED, max_size=3),
    unknown=st.lists(st.sampled_from(rules.SIGNALS["nvidia"]), unique=True),
)
def test_failed_dominates_degraded_dominates_ok(
    failed: list[dict[str, Any]], degraded: list[dict[str, Any]], unknown: list[str]
) -> None:
    health = nvidia()
    for change in degraded + failed:
        for key, value in change.items():
            if key == "xids":
                health["xids"] = health["xids"] + value
            else:
                health[key] = value
    health["unknown"] = unknown
    # Signals named unknown are not used, whatever value they carry.
    readable = [c for c in failed if not set(c) & set(unknown)]
    readable_degraded = [c for c in degraded if not set(c) & set(unknown)]
    judged = rules.judge(health, "nvidia", NOW)
    if readable:
        assert judged["verdict"] == "failed"
    elif readable_degraded:
        assert judged["verdict"] == "degraded"
    elif not [s for s in rules.SIGNALS["nvidia"] if health.get(s) is not None and s not in unknown]:
        assert judged["verdict"] == "unknown"  # nothing read (retired pages: not on this card)
    else:
        assert judged["verdict"] == "ok"
    assert (judged["verdict"] == "ok") == (judged["action"] == "NONE")


@given(st.dictionaries(st.sampled_from(rules.SIGNALS["amd"]), st.integers(0, 5)))
def test_all_unknown_is_unknown_whatever_the_values(values: dict[str, int]) -> None:
    health: dict[str, Any] = {"unknown": list(rules.SIGNALS["amd"]), **values}
    assert rules.judge(health, "amd", NOW)["verdict"] == "unknown"


def row(card: str, verdict: str, reason: str = "XID 79 (GPU has fallen off the bus)") -> dict:
    return {"card": card, "verdict": verdict, "reasons": [reason] if verdict != "ok" else []}


def test_drain_plan_drains_failed_lifts_only_health_drains() -> None:
    drains = {
        "h/gpu1": {"health": {"source": "health", "reason": "health: old"}},
        "h/gpu2": {"admin": {"source": "admin", "reason": "fans"}},
        "h/gpu3": {
            "health": {"source": "health", "reason": "health: XID 79 (GPU has fallen off the bus)"}
        },
        "h/gpu4": {"health": {"source": "health", "reason": "health: hot"}},
    }
    plan = pool_health.plan(
        [
            row("h/gpu0", "failed"),  # new: drained
            row("h/gpu1", "ok"),  # health drain, ok again: lifted
            row("h/gpu2", "ok"),  # admin drain: never lifted
            row("h/gpu3", "failed"),  # already drained for this reason: nothing
            row("h/gpu4", "degraded", "hot"),  # degraded: neither drained nor lifted
            row("h/gpu5", "degraded", "hot"),
            row("h/gpu6", "unknown", "?"),
        ],
        drains,
    )
    assert plan.drain == [("h/gpu0", "health: XID 79 (GPU has fallen off the bus)")]
    assert plan.lift == ["h/gpu1"]
    # A card an admin drained that fails gets the health check's drain beside the admin's.
    failed_admin = pool_health.plan([row("h/gpu2", "failed")], drains)
    assert failed_admin.drain == [("h/gpu2", "health: XID 79 (GPU has fallen off the bus)")]
    assert failed_admin.lift == []
