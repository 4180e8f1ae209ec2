"""A queue entry as the scheduler sees it: who waits, for what, since when."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpupoolctl.sched.request import JobRequest
from gpupoolctl.timestamps import parse_ts


@dataclass(frozen=True)
class QueueEntry:
    id: str
    priority: int
    seq: int  # arrival order (the ledger seq of the enqueue record)
    enqueued: datetime
    request: JobRequest = field(default_factory=JobRequest)
    job: str | None = None
    owner: str = ""
    policy: str | None = None  # the job's placement policy; None: the pass's
    not_before: datetime | None = None  # a restart's back-off: not placed before this

    @classmethod
    def from_record(cls, record: Mapping[str, Any], policy: str | None = None) -> QueueEntry:
        """From a ledger State.queue value ({id, owner, priority, request, job, seq, ts,
        not_before})."""
        not_before = record.get("not_before")
        return cls(
            not_before=parse_ts(str(not_before)) if not_before else None,
            policy=policy,
            id=str(record["id"]),
            priority=int(record.get("priority", 0)),
            seq=int(record["seq"]),
            enqueued=parse_ts(str(record["ts"])),
            request=JobRequest.from_dict(dict(record.get("request") or {})),
            job=record.get("job"),
            owner=str(record.get("owner", "")),
        )
