"""Jobs: the one object the CLI and the stress backend drive. The steps live in modules of
their own, each above the core it shares (jobs.service); this class only puts them
together, so no step module needs to import another through the class."""

from __future__ import annotations

from typing import Any

from gpupoolctl.jobs import launching, submitting
from gpupoolctl.jobs.service import JobsCore, Outcome
from gpupoolctl.jobs.spec import JobSpec


class Jobs(JobsCore):
    def submit(self, spec: JobSpec) -> Outcome:
        """Queue the job, then run a scheduling pass (jobs.submitting)."""
        return submitting.submit(self, spec)

    def launch(self, job: dict[str, Any]) -> dict[str, Any]:
        """Start a pending job on its node(s) and record the outcome (jobs.launching)."""
        return launching.launch(self, job)
