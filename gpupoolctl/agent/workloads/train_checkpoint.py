"""The `train` workload's checkpoint, shared by the simulated and the PyTorch paths.

Only the step reached is kept (the model is synthetic): a later try of the same run resumes
its step count from it, which is what the harness and the restart tests look at.
"""

from __future__ import annotations

from gpupoolctl.agent.workloads.checkpoint import CheckpointFile

CHECKPOINT_FILE = "train.json"


class Checkpoint(CheckpointFile):
    """`train.json`: {"workload": "train", "steps", "params", "step"}; a try resumes from
    `step` when the run asked for the same steps and model size."""

    name = CHECKPOINT_FILE

    def load(self, steps: int, params: float) -> tuple[int, str | None]:
        saved, note = self.read()
        if saved is None:
            return 0, note
        if not isinstance(saved, dict):
            return 0, f"{self.path} is not a train checkpoint; starting over"
        step = saved.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            return 0, f"{self.path} holds no step; starting over"
        if saved.get("steps") != steps or saved.get("params") != params:
            return 0, f"{self.path} is for another run (steps/params differ); starting over"
        return min(step, steps), None

    def save(self, steps: int, params: float, step: int) -> None:
        self.write({"workload": "train", "steps": steps, "params": params, "step": step})
