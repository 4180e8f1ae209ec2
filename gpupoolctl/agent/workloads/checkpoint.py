"""Where a workload keeps its checkpoint: one JSON object in $GPUPOOL_CHECKPOINT_DIR.

Written atomically (temp file, fsync, rename), so a try killed at any moment leaves the last
whole one; every try of the job looks in the same folder (jobs.restarts sets it). What the
object holds, and when a saved one applies to this run, is each workload's own business.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from gpupoolctl.agent.jobs.paths import write_json


class CheckpointFile:
    name = ""  # the file's name in the checkpoint folder, set by each workload

    def __init__(self, folder: str) -> None:
        self.path = Path(folder) / self.name

    @classmethod
    def for_job(cls, env: Mapping[str, str]) -> Self | None:
        folder = env.get("GPUPOOL_CHECKPOINT_DIR")
        return cls(folder) if folder else None

    def read(self) -> tuple[Any, str | None]:
        """(what was saved, None); (None, None) when nothing was saved yet; (None, why the
        run starts over) when the file cannot be read."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                return json.load(handle), None
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return None, f"cannot read the checkpoint {self.path}: {exc}; starting over"

    def write(self, body: dict[str, Any]) -> None:
        os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
        write_json(self.path, body)
