"""A GPU's health verdict from the raw signals its driver read (hw.model.GpuHealth).

    ok        every signal that could be read is fine (some may be unknown: listed)
    degraded  the card works but wants attention: a reset to activate a row remap, heat
    failed    the card must take no work: lost, uncorrected memory errors, a fatal XID
    unknown   nothing could be read: never taken for ok

failed dominates degraded, which dominates ok. Each reason is one short sentence; the action
is the vendor's recommendation for the worst reason (hw.xid.ACTIONS). Stdlib only: the agent
could judge too; the workstation does (`gpupoolctl health`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from gpupoolctl.hw import xid as xid_catalog

Verdict = Literal["ok", "degraded", "failed", "unknown"]
VERDICTS: tuple[Verdict, ...] = ("ok", "degraded", "failed", "unknown")

# Thresholds, named so a site can see what the verdict rests on.
ECC_UNCORRECTED_FAILED = 1  # NVIDIA volatile uncorrected ECC errors that fail a card
AMD_ECC_UNCORRECTABLE_FAILED = 1  # AMD uncorrectable ECC errors that fail a card
AMD_ECC_DEFERRED_DEGRADED = 1  # AMD deferred errors that degrade a card
AMD_BAD_PAGES_DEGRADED = 1  # AMD retired pages that degrade a card (worth watching)
# Degraded at or above (NVIDIA: GPU core; AMD: hotspot/junction, which runs hotter).
TEMPERATURE_DEGRADED_C = {"nvidia": 90, "amd": 105}
# XIDs older than this (by the node's clock) no longer count: the kernel log keeps them
# until a reboot, and a card that was reset since should not stay failed for days.
XID_WINDOW_S = 24 * 3600
# Clock slowdowns that mean heat or power trouble (idle, app clocks, power cap do not).
DEGRADING_THROTTLE = frozenset(
    {"hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"}
)
# AMD driver events: a reset or a hung ring means the card lost work; a thermal throttle,
# heat; a VM fault is the application's.
AMD_FAILED_EVENTS = frozenset({"GPU_PRE_RESET", "GPU_POST_RESET", "RING_HANG"})
AMD_DEGRADED_EVENTS = frozenset({"THERMAL_THROTTLE"})

# The signals each vendor's drivers read; the verdict is unknown when none was read.
SIGNALS: dict[str, tuple[str, ...]] = {
    "nvidia": (
        "lost",
        "ecc_uncorrected_volatile",
        "remapped_rows",
        "retired_pages_pending",
        "xids",
        "throttle_reasons",
        "temperature_c",
    ),
    "amd": (
        "ecc_uncorrectable",
        "ecc_deferred",
        "bad_pages",
        "bad_pages_pending",
        "events",
        "temperature_c",
    ),
}

_RANK = {"failed": 0, "degraded": 1}


class Judgement(TypedDict):
    verdict: Verdict
    reasons: list[str]
    action: str
    unknown: list[str]
    notes: list[str]


def signals_for(vendor: str | None) -> tuple[str, ...]:
    if vendor in SIGNALS:
        return SIGNALS[str(vendor)]
    return tuple(dict.fromkeys(SIGNALS["nvidia"] + SIGNALS["amd"]))


def judge(
    health: Mapping[str, Any] | None, vendor: str | None = None, now: float | None = None
) -> Judgement:
    """The verdict on one GPU's signals (`now`: the time XIDs are aged against)."""
    if not health:
        return {
            "verdict": "unknown",
            "reasons": ["the driver read no health signals for this GPU"],
            "action": "CHECK_BY_HAND",
            "unknown": list(signals_for(vendor)),
            "notes": [],
        }
    now = time.time() if now is None else now
    unknown = [str(name) for name in health.get("unknown") or []]
    findings: list[tuple[str, str, str]] = []  # (severity, reason, action)
    notes = [str(note) for note in health.get("notes") or []]

    def known(name: str) -> Any:
        value = health.get(name)
        return None if name in unknown else value

    if known("lost") is True:
        findings.append(("failed", "the driver reports the GPU lost (GPU_IS_LOST)", "RESTART_BM"))
    ecc = _count(known("ecc_uncorrected_volatile"))
    if ecc is not None and ecc >= ECC_UNCORRECTED_FAILED:
        findings.append(
            ("failed", f"{ecc} uncorrected ECC error(s) since the driver loaded", "RESET_GPU")
        )
    rows = known("remapped_rows")
    if isinstance(rows, Mapping):
        if rows.get("failed"):
            findings.append(
                ("failed", "row remapping failed: no spare memory rows left", "CONTACT_SUPPORT")
            )
        if rows.get("pending"):
            findings.append(("degraded", "a row remap is pending: reset needed", "RESET_GPU"))
    if known("retired_pages_pending") is True:
        findings.append(("degraded", "a page retirement is pending: reset needed", "RESET_GPU"))
    findings.extend(_xid_findings(known("xids"), now, notes))
    throttled = sorted(DEGRADING_THROTTLE.intersection(known("throttle_reasons") or []))
    if throttled:
        findings.append(
            ("degraded", f"clocks slowed down: {', '.join(throttled)}", "CHECK_MECHANICALS")
        )
    temperature = _count(known("temperature_c"))
    limit = TEMPERATURE_DEGRADED_C.get(str(vendor), TEMPERATURE_DEGRADED_C["nvidia"])
    if temperature is not None and temperature >= limit:
        findings.append(
            ("degraded", f"{temperature} C, at or above {limit} C", "CHECK_MECHANICALS")
        )
    findings.extend(_amd_findings(known, notes))

    findings.sort(key=lambda f: _RANK[f[0]])  # stable: the order above within a severity
    reasons = [reason for _, reason, _ in findings]
    if findings:
        verdict: Verdict = "failed" if findings[0][0] == "failed" else "degraded"
        action = findings[0][2]
    elif not any(known(name) is not None for name in signals_for(vendor)):
        verdict, action = "unknown", "CHECK_BY_HAND"
        reasons = ["no health signal could be read"]
    else:
        verdict, action = "ok", "NONE"
    return {
        "verdict": verdict,
        "reasons": reasons,
        "action": action,
        "unknown": unknown,
        "notes": notes,
    }


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _xid_findings(events: Any, now: float, notes: list[str]) -> list[tuple[str, str, str]]:
    if not isinstance(events, list):
        return []
    seen: set[int] = set()
    for event in events:
        if not isinstance(event, Mapping) or _count(event.get("xid")) is None:
            continue
        at = event.get("at")
        at = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None
        if at is not None and now - at > XID_WINDOW_S:
            continue
        seen.add(int(event["xid"]))
    out = []
    for number in sorted(seen):
        entry = xid_catalog.lookup(number)
        label = f"XID {number} ({entry.name})"
        if entry.severity == "application":
            notes.append(f"{label}: the application's fault, not the card's")
        else:
            out.append((entry.severity, label, entry.action))
    return out


def _amd_findings(known: Any, notes: list[str]) -> list[tuple[str, str, str]]:
    out = []
    uncorrectable = _count(known("ecc_uncorrectable"))
    if uncorrectable is not None and uncorrectable >= AMD_ECC_UNCORRECTABLE_FAILED:
        out.append(("failed", f"{uncorrectable} uncorrectable ECC error(s)", "RESET_GPU"))
    for event in sorted(set(known("events") or [])):
        if event in AMD_FAILED_EVENTS:
            what = "a ring hang" if event == "RING_HANG" else "a GPU reset"
            out.append(("failed", f"the driver reported {what} ({event})", "RESET_GPU"))
        elif event in AMD_DEGRADED_EVENTS:
            out.append(("degraded", f"the driver reported {event}", "CHECK_MECHANICALS"))
        else:
            notes.append(f"driver event {event}")
    deferred = _count(known("ecc_deferred"))
    if deferred is not None and deferred >= AMD_ECC_DEFERRED_DEGRADED:
        out.append(("degraded", f"{deferred} deferred ECC error(s)", "RESET_GPU"))
    pending = _count(known("bad_pages_pending"))
    if pending:
        out.append(("degraded", f"{pending} bad page(s) pending retirement: reset needed",
                    "RESET_GPU"))  # fmt: skip
    bad = _count(known("bad_pages"))
    if bad is not None and bad >= AMD_BAD_PAGES_DEGRADED:
        out.append(("degraded", f"{bad} retired bad page(s)", "CONTACT_SUPPORT"))
    return out
