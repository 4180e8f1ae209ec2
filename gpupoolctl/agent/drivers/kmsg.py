"""XID events from the kernel log, read without blocking and in bounded time.

NVML delivers XID events only to an event set registered before they happen, so an agent
that runs for a second sees almost none of them. The kernel log keeps the driver's
"NVRM: Xid (PCI:0000:18:00): 79, ..." lines until the ring buffer wraps or the node reboots.
/dev/kmsg gives them to any process the kernel lets read it (root, or any user where
kernel.dmesg_restrict is 0), one record per read(2), and with O_NONBLOCK read fails with
EAGAIN at the end instead of waiting. `journalctl -k` would work for more users but starts a
process and can take seconds on a long journal; dmesg(1) reads the same buffer as this.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Iterable
from typing import Any

DEVICE = "/dev/kmsg"
MAX_RECORDS = 50_000  # the whole ring buffer of a busy node, with room to spare
BUDGET_S = 0.5  # never more than this for the whole read
_RECORD = 8192  # a /dev/kmsg record is at most this long (kernel: CONSOLE_EXT_LOG_MAX)

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?"
    r"(?: [^)]*)?\): (?P<xid>\d+)\b"
)

# amdgpu's dev_err lines: "amdgpu 0000:0c:00.0: amdgpu: GPU reset begin!", "... ring gfx_0.0.0
# timeout, signaled seq=..." (drivers/gpu/drm/amd/amdgpu: amdgpu_device.c, amdgpu_job.c).
_AMDGPU = re.compile(r"amdgpu (?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d):")
_AMD_EVENTS = (
    (re.compile(r"\bring \S+ timeout"), "RING_HANG"),
    (re.compile(r"GPU reset begin"), "GPU_PRE_RESET"),
)

Record = tuple[float | None, str]  # (seconds since the epoch, or None; the message)


def read_kernel_log(device: str = DEVICE, budget_s: float = BUDGET_S) -> list[Record] | None:
    """The NVRM (NVIDIA) and amdgpu lines of the kernel log; None when the log cannot be
    read (no permission, no such device). Stops at the end of the buffer, at MAX_RECORDS or
    after budget_s."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    deadline = time.monotonic() + budget_s
    boot = _boot_epoch()
    out: list[Record] = []
    try:
        for _ in range(MAX_RECORDS):
            if time.monotonic() > deadline:
                break
            try:
                raw = os.read(fd, _RECORD)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the record we were at was overwritten: go on from the next
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break  # the end of the buffer
                return out or None  # a read error mid-way: what was read, if anything
            if not raw:
                break
            record = _parse_record(raw.decode("utf-8", "replace"), boot)
            if record is not None and ("NVRM" in record[1] or "amdgpu" in record[1]):
                out.append(record)
    finally:
        os.close(fd)
    return out


def _boot_epoch() -> float | None:
    try:
        return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return None


def _parse_record(text: str, boot: float | None) -> Record | None:
    """ "<prio>,<seq>,<usec since boot>,<flags>[,...];<message>" (Documentation/ABI/testing/
    dev-kmsg); continuation lines start with a space and are dropped."""
    header, sep, message = text.partition(";")
    if not sep:
        return None
    fields = header.split(",")
    at = None
    if len(fields) >= 3 and boot is not None:
        try:
            at = boot + int(fields[2]) / 1e6
        except ValueError:
            at = None
    return at, message.split("\n", 1)[0]


def xid_events(records: Iterable[Record], bus_ids: list[str | None]) -> dict[int, list[Any]]:
    """{GPU position in bus_ids: [{"xid", "at", "source"}]} from kernel log records. The
    driver names a device by domain:bus:device, without the function."""
    by_prefix: dict[str, int] = {}
    for position, bus in enumerate(bus_ids):
        if bus:
            by_prefix[_short(bus)] = position
    out: dict[int, list[Any]] = {}
    for at, text in records:
        match = _XID.search(text)
        if match is None:
            continue
        position = by_prefix.get(_short(match.group("bus")))
        if position is None:
            continue
        out.setdefault(position, []).append(
            {"xid": int(match.group("xid")), "at": at, "source": "kernel-log"}
        )
    return out


def _short(bus: str) -> str:
    """ "0000:18:00.0" and "00000000:18:00" -> "0000:18:00"."""
    head = bus.lower().rsplit(".", 1)[0] if bus.count(":") == 2 and "." in bus else bus.lower()
    domain, rest = head.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def amd_events(records: Iterable[Record], bus_ids: list[str | None]) -> dict[int, list[str]]:
    """{GPU position: ["RING_HANG", "GPU_PRE_RESET", ...]} from amdgpu's kernel log lines.
    Logical GPUs (partitions) of one card share its physical function's lines."""
    by_card: dict[str, list[int]] = {}
    for position, bus in enumerate(bus_ids):
        if bus:
            by_card.setdefault(_short(bus), []).append(position)
    out: dict[int, list[str]] = {}
    for _, text in records:
        match = _AMDGPU.search(text)
        if match is None:
            continue
        for pattern, event in _AMD_EVENTS:
            if pattern.search(text):
                for position in by_card.get(_short(match.group("bus")), []):
                    out.setdefault(position, []).append(event)
    return out
