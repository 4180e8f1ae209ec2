"""Reading history: the live journal, and the archives when asked or when --since reaches
back before the last compaction."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.ledger import journal
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.ledger.snapshot import Snapshot, archive_path


@dataclass
class History:
    records: list[dict[str, Any]]
    archived: int  # records in archives that were not read
    warnings: list[str] = field(default_factory=list)


def matcher(
    since_seq: int | None, since_ts: str | None, ops: set[str] | None
) -> Callable[[dict[str, Any]], bool]:
    def keep(record: dict[str, Any]) -> bool:
        if since_seq is not None and record["seq"] < since_seq:
            return False
        if since_ts is not None and record["ts"] < since_ts:
            return False
        return ops is None or record["op"] in ops

    return keep


def archives_needed(
    snap: Snapshot | None, since_seq: int | None, since_ts: str | None, everything: bool
) -> list[dict[str, Any]]:
    if snap is None:
        return []
    if everything:
        return list(snap.archives)
    by_seq = since_seq is not None
    return [
        entry
        for entry in snap.archives
        if (by_seq and entry["last_seq"] >= since_seq)
        or (since_ts is not None and (entry.get("last_ts") or "") >= since_ts)
    ]


def read_archive(
    paths: LedgerPaths,
    entry: dict[str, Any],
    keep: Callable[[dict[str, Any]], bool],
    out: list[dict[str, Any]],
    warnings: list[str],
) -> journal.Scan | None:
    target = archive_path(paths, entry)
    try:
        with gzip.open(target, "rb") as stream:
            scan = journal.scan(
                journal.iter_lines(stream),
                last_seq=int(entry["first_seq"]) - 1,
                on_record=lambda record, _l, _o: out.append(record) if keep(record) else None,
            )
    except (OSError, EOFError) as exc:
        warnings.append(f"{target}: cannot read archive: {exc}")
        return None
    for bad in scan.bad:
        warnings.append(f"{target}:{bad.line}: skipped damaged record: {bad.reason}")
    return scan
