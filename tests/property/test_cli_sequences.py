"""Random sequences of the commands a new user types (alloc, release, submit, cancel,
partition reset, sim reset, schedule) on the bundled simulated pool, through the real
command line: after every step `ledger verify` is clean and no slice has two live holders.

The commands run in this process (the same entry point as the console script, exit codes
and all) so that a sequence costs a second or two, not an interpreter per step; the jobs
they launch are real processes on the simulated nodes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpupoolctl.cli.main import run

# A MIG node and a node of whole cards, and few shapes: sequences meet on the same slices.
HOSTS = ("sg-dgx02", "dxb-l40s-01")
PROFILES = ("3g.40gb", "gpu")
LONG = [sys.executable, "-c", "import time; time.sleep(60)"]
SHORT = [sys.executable, "-c", "pass"]
# What each command may exit with when nothing is wrong: 1 a refused or unknown id, 3 a node
# left alone (held slices), 5 nothing fits. A traceback, a 2 or a 4 is a bug.
ALLOWED = {0, 1, 3, 5}


def gpupoolctl(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gpupoolctl", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


class NewUser(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory(prefix="gpupool-seq-")
        root = Path(self.folder.name)
        self.saved = {k: os.environ.get(k) for k in ("HOME", "GPUPOOL_SIM_DIR", "XDG_STATE_HOME")}
        os.environ["HOME"] = str(root)
        os.environ["GPUPOOL_SIM_DIR"] = str(root / "sim")
        os.environ.pop("XDG_STATE_HOME", None)
        self.allocs: list[str] = []
        self.jobs: list[str] = []

    def ask(self, *args: str) -> tuple[int, str]:
        code, out, err = gpupoolctl("-q", *args)
        assert "Traceback" not in err, err
        assert code in ALLOWED, (args, code, err)
        return code, out

    @rule(profile=st.sampled_from(PROFILES), host=st.sampled_from(HOSTS))
    def alloc(self, profile: str, host: str) -> None:
        code, out = self.ask("alloc", "--profile", profile, "--host", host)
        if code == 0:
            self.allocs.append(out.strip())

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Any allocation that holds slices now: taken by hand, or a running job's."""
        shown = self.ask("pool", "--no-refresh", "-o", "json")[1]
        nodes = json.loads(shown)["nodes"] if shown else []
        holder = {s["slice"]: s["alloc"] for n in nodes for s in n["slices"] if s["alloc"]}
        ids = sorted(set(holder.values()))
        if not ids:
            return
        chosen = data.draw(st.sampled_from(ids))
        code, _ = self.ask("release", chosen)
        # A running job's allocation ends with the job, never by `release`.
        running = {holder.get(s) for j in self.live_jobs() for s in j["slice"].split(",")}
        assert code == (1 if chosen in running else 0), (chosen, code)

    @rule(
        profile=st.sampled_from(PROFILES),
        long=st.sampled_from([True, True, False]),
        host=st.sampled_from(HOSTS),
    )
    def submit(self, profile: str, long: bool, host: str) -> None:
        argv = LONG if long else SHORT
        _, out = self.ask("submit", "--profile", profile, "--host", host, "--", *argv)
        if out.strip():
            self.jobs.append(out.strip())

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if self.jobs:
            self.ask("cancel", data.draw(st.sampled_from(self.jobs)), "--grace", "0")

    @rule(host=st.sampled_from(HOSTS))
    def partition_reset(self, host: str) -> None:
        self.ask("partition", "reset", "--yes", "-l", host)

    @rule(host=st.sampled_from(HOSTS))
    def sim_reset(self, host: str) -> None:
        self.ask("sim", "reset", "-l", host)

    @rule()
    def schedule(self) -> None:
        self.ask("schedule")

    @invariant()
    def ledger_verifies(self) -> None:
        code, out, _ = gpupoolctl("-q", "ledger", "verify", "-o", "json")
        report = json.loads(out)
        assert code == 0 and report["ok"], report["problems"]

    def live_jobs(self) -> list[dict]:
        code, out, _ = gpupoolctl("-q", "jobs", "--no-refresh", "-o", "json")
        assert code == 0
        return [j for j in json.loads(out) if j["state"] in ("pending", "running")]

    @invariant()
    def no_slice_has_two_live_holders(self) -> None:
        live = self.live_jobs()
        used = [s for j in live for s in (j["slice"] or "").split(",") if s]
        assert len(used) == len(set(used)), live

    def teardown(self) -> None:
        for pid_file in Path(self.folder.name, "sim").glob("jobs/*/*/pid.json"):
            with contextlib.suppress(ProcessLookupError, ValueError, KeyError, OSError):
                os.killpg(json.loads(pid_file.read_text())["pgid"], signal.SIGKILL)
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.folder.cleanup()


NewUser.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cli_sequences_keep_the_ledger_verifiable = NewUser.TestCase
