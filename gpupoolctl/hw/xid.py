"""NVIDIA XID events: what each means for the card and what the vendor says to do.

From NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors/, the "Resolution Bucket"
columns) and its memory-error guides for A100/H100, in our own words. Stdlib only: it ships in
the agent.

Severity is what the event says about the card, not about the job that saw it:
- "application": the workload's own fault (an illegal address, a killed channel); the card is
  fine. NVIDIA's Kubernetes device plugin skips exactly 13, 31, 43, 45 and 68 when it marks a
  device unhealthy on critical XIDs (internal/rm/health.go); those and the others whose
  immediate action the catalogue gives as RESTART_APP are here.
- "degraded": the card works but needs attention at the next chance (a reset to activate a row
  remap, a rising rate of corrected errors).
- "failed": the card must take no work until the action is done.

An XID this table does not know counts as failed with CONTACT_SUPPORT, as the device plugin
treats any critical XID outside its skip list as unhealthy.

Actions are NVIDIA's resolution buckets: RESTART_APP (the job, not the card), RESET_GPU,
RESTART_BM (reboot the node), CHECK_MECHANICALS (cables, seating, cooling), CONTACT_SUPPORT
(the RMA path), IGNORE.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Severity = Literal["application", "degraded", "failed"]

ACTIONS: dict[str, str] = {
    "NONE": "nothing to do",
    "IGNORE": "nothing to do for the card",
    "RESTART_APP": "restart the job; the card is fine",
    "RESET_GPU": "drain, then reset the GPU (nvidia-smi -r) when it is idle",
    "RESTART_BM": "drain, then reboot the node",
    "CHECK_MECHANICALS": "check cooling, cables and seating",
    "CONTACT_SUPPORT": "drain and contact the vendor (RMA if it recurs)",
    "CHECK_BY_HAND": "nothing could be read: look at the card by hand (nvidia-smi -q, amd-smi)",
}


class Xid(NamedTuple):
    id: int
    name: str
    severity: Severity
    action: str


_TABLE: tuple[Xid, ...] = (
    Xid(8, "GPU stopped processing (idle timeout)", "application", "RESTART_APP"),
    Xid(13, "graphics engine exception", "application", "RESTART_APP"),
    Xid(31, "GPU memory page fault", "application", "RESTART_APP"),
    Xid(32, "invalid or corrupted push buffer stream", "application", "RESTART_APP"),
    Xid(38, "driver firmware error", "failed", "RESET_GPU"),
    Xid(43, "GPU stopped processing", "application", "RESTART_APP"),
    Xid(45, "preemptive cleanup after a channel error", "application", "IGNORE"),
    Xid(48, "double-bit ECC error", "failed", "RESET_GPU"),
    Xid(54, "auxiliary power not connected", "failed", "CHECK_MECHANICALS"),
    Xid(57, "error programming video memory interface", "failed", "RESET_GPU"),
    Xid(58, "unstable video memory interface", "failed", "RESET_GPU"),
    Xid(61, "internal micro-controller breakpoint", "failed", "RESET_GPU"),
    Xid(62, "internal micro-controller halt", "failed", "RESET_GPU"),
    Xid(63, "row remap or page retirement recorded (reset to activate)", "degraded", "RESET_GPU"),
    Xid(64, "row remap or page retirement failed", "failed", "CONTACT_SUPPORT"),
    Xid(68, "video decoder exception", "application", "RESTART_APP"),
    Xid(69, "graphics engine class error", "application", "RESTART_APP"),
    Xid(74, "NVLink error", "failed", "RESET_GPU"),
    Xid(79, "GPU has fallen off the bus", "failed", "RESTART_BM"),
    Xid(92, "high single-bit ECC error rate", "degraded", "CONTACT_SUPPORT"),
    # Contained: the job that met it was stopped and the page taken offline; other work runs
    # on (NVIDIA's A100 memory-error guide), the row remap waits for the next reset.
    Xid(94, "contained uncorrectable ECC error", "degraded", "RESET_GPU"),
    Xid(95, "uncontained uncorrectable ECC error", "failed", "RESET_GPU"),
    Xid(109, "context switch timeout", "application", "RESTART_APP"),
    Xid(119, "GSP RPC timeout", "failed", "RESET_GPU"),
    Xid(120, "GSP error", "failed", "RESET_GPU"),
    Xid(121, "C2C link error", "failed", "RESET_GPU"),
    Xid(140, "unrecovered ECC error", "failed", "RESET_GPU"),
    Xid(143, "GPU initialization failure", "failed", "RESTART_BM"),
    Xid(144, "NVLink error (SAW)", "failed", "RESET_GPU"),
    Xid(145, "NVLink error (RLW)", "failed", "RESET_GPU"),
    Xid(149, "NVLink error (NETIR)", "failed", "RESET_GPU"),
    Xid(
        154,
        "GPU recovery action changed (driver asks for a reset or reboot)",
        "failed",
        "RESET_GPU",
    ),
)

CATALOG: dict[int, Xid] = {entry.id: entry for entry in _TABLE}

# NVIDIA's device plugin never marks a device unhealthy for these: the application's fault.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})


def lookup(xid: int) -> Xid:
    """The catalogue entry for an XID; an unknown one is failed, CONTACT_SUPPORT."""
    found = CATALOG.get(int(xid))
    if found is not None:
        return found
    return Xid(int(xid), "XID not in this catalogue", "failed", "CONTACT_SUPPORT")
