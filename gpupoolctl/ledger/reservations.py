"""Cards reserved for a change (`reshape` records): who made a reservation, and whether that
maker is gone, so that the card's layout is unsure until its node is read again.

Two kinds of run reserve a card before touching it: an elastic re-cut (a scheduling pass)
and `partition apply` / `reset`. Either may end before it closes what it reserved (Ctrl-C,
SIGKILL, a lost connection); the next command that reads the node closes it
(gpupoolctl.jobs.reshape.recover), and `ledger verify` says so meanwhile.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from gpupoolctl.hw.proc import alive, proc_start
from gpupoolctl.ledger.units import parse_ts

# A reservation whose process cannot be checked (made on another workstation) is taken as
# abandoned after this long: a re-cut takes seconds, an AMD memory change minutes, a
# partition apply at most 15.
ABANDONED_AFTER_S = 3600.0


def this_process() -> dict[str, Any]:
    """Who reserves: this workstation, this process (pid and start, against pid reuse) and
    thread (the stress ramp runs passes in many threads)."""
    import threading

    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": proc_start(pid),
        "thread": threading.get_ident(),
    }


def made_here(record: Mapping[str, Any]) -> bool:
    """Whether this workstation made the reservation (its process can be checked)."""
    return (record.get("by") or {}).get("host") == socket.gethostname()


def maker_gone(record: Mapping[str, Any], now: float) -> bool:
    """Whether the run that reserved the card has ended without closing it: on this
    workstation, its process is gone; elsewhere, it is older than ABANDONED_AFTER_S."""
    if made_here(record):
        who = record.get("by") or {}
        return not alive(int(who.get("pid") or 0), who.get("start"))
    return now - parse_ts(str(record["ts"])).timestamp() > ABANDONED_AFTER_S


def describe_maker(record: Mapping[str, Any]) -> str:
    """ "partition apply -c night by pid 4242 on ws1", or the re-cut's reason."""
    who = record.get("by") or {}
    what = str(record.get("reason") or "a re-cut")
    if record.get("source") != "apply":
        what = f"a re-cut ({what})" if record.get("reason") else what
    where = f" by pid {who.get('pid')} on {who.get('host')}" if who.get("pid") else ""
    return f"{what}{where}"
