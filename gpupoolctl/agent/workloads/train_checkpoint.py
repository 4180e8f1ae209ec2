"""The `train` workload's checkpoint, shared by the simulated and the PyTorch paths.

Only the step reached is kept (the model is synthetic): a later try of the same run resumes
its step count from it, which is what the harness and the restart tests look at.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from gpupoolctl.agent.jobs.paths import write_json

CHECKPOINT_FILE = "train.json"


class Checkpoint:
    """`<$GPUPOOL_CHECKPOINT_DIR>/train.json`: {"workload": "train", "steps", "params",
    "step"}, written atomically (temp file, fsync, rename), as the sim workload's is; a try
    resumes from `step` when the run asked for the same steps and model size."""

    def __init__(self, folder: str) -> None:
        self.path = Path(folder) / CHECKPOINT_FILE

    @classmethod
    def for_job(cls, env: Mapping[str, str]) -> Checkpoint | None:
        folder = env.get("GPUPOOL_CHECKPOINT_DIR")
        return cls(folder) if folder else None

    def load(self, steps: int, params: float) -> tuple[int, str | None]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                saved = json.load(handle)
        except FileNotFoundError:
            return 0, None
        except (OSError, ValueError) as exc:
            return 0, f"cannot read the checkpoint {self.path}: {exc}; starting over"
        if not isinstance(saved, dict):
            return 0, f"{self.path} is not a train checkpoint; starting over"
        step = saved.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            return 0, f"{self.path} holds no step; starting over"
        if saved.get("steps") != steps or saved.get("params") != params:
            return 0, f"{self.path} is for another run (steps/params differ); starting over"
        return min(step, steps), None

    def save(self, steps: int, params: float, step: int) -> None:
        os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
        write_json(self.path, {"workload": "train", "steps": steps, "params": params, "step": step})
