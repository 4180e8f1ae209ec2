"""The last state of each ledger read whole in this process, kept for its next new handle.

A process with many handles on one ledger (a service, the stress pool backend, which gives
each submitting thread its own as separate processes would have) made each new one replay
the whole journal: 20-40 us of CPU a record, all of it under one GIL. A new handle now
starts from a copy of the state another handle read (unpickled: about a tenth of a replay)
and reads only the journal's bytes after it. A copy is one more way to read without the
lock, no more: the refresh under the lock checks it as it checks any such read (replay).
Only this process's memory holds copies; nothing is written to disk.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

_guard = threading.Lock()
# Journal path -> (the files' identity the state was read from, the pickled state), the
# ledger kept last at the end.
_kept: dict[str, tuple[tuple[Any, ...], bytes]] = {}
# Ledgers a process keeps copies of, at most (the ones it kept last): a process reads one
# ledger or a few; one that opens many (a test run) must not hold a copy of each forever.
MAX_LEDGERS = 8


def keep(journal: str, ident: tuple[Any, ...], loaded: Any) -> None:
    """Keep a copy of `loaded` (read from the files `ident` names) for the next new handle;
    it replaces the copy kept before. The caller must not change `loaded` meanwhile."""
    blob = pickle.dumps(loaded, protocol=pickle.HIGHEST_PROTOCOL)
    with _guard:
        _kept.pop(journal, None)
        _kept[journal] = (ident, blob)
        while len(_kept) > MAX_LEDGERS:
            del _kept[next(iter(_kept))]


def take(journal: str, ident: tuple[Any, ...]) -> Any | None:
    """A copy of the state kept for `journal`, if it was read from the files `ident` names
    (a compaction or repair since puts new files there: no copy); None otherwise."""
    with _guard:
        kept = _kept.get(journal)
    if kept is None or kept[0] != ident:
        return None
    return pickle.loads(kept[1])  # this process's own bytes, never a file


def forget() -> None:
    """Drop every copy (tests; a process that wants its memory back)."""
    with _guard:
        _kept.clear()
