"""The agent's job verbs: `launch`, `poll`, `signal`, `logs`. Stdlib only: this ships to nodes.

Every job has a folder on its node, `<root>/<job_id>/` (0700; files 0600):
    meta.json   {"job_id", "argv", "env" (only the variables the request set), "workdir",
                 "devices", "visible" (the visibility variables set), "created"}
    pid.json    {"pid", "pgid", "wrapper_pid", "started", "proc_start"}  (once it runs)
    exit.json   {"exit_code", "signal", "ended", "error", "reason"}  (written by the wrapper at
                 the end; reason "time-limit" when its time limit ended it)
    stdout, stderr
    fenced      (a recovery pass claimed this job id: it can never be launched here)
Root: `$XDG_STATE_HOME/gpupoolctl/jobs` (else ~/.local/state/gpupoolctl/jobs); on a simulated
node `<sim state dir>/jobs/<host>`, so simulated nodes sharing one machine keep their jobs apart.

launch  args {"job_id", "argv": [str, ...], "env": {str: str}, "workdir": str | null,
              "devices": {"vendor": "nvidia" | "amd", "uuids": [str, ...]},
              "time_limit_s": float | null, "signal": str | null, "signal_s": float | null,
              "grace_s": float}
        With a time limit the wrapper sends `signal` to the job's process group signal_s
        seconds before it, SIGTERM at it and SIGKILL grace_s after (wall-clock, on the node).
        data {"pid", "pgid", "job_dir", "started", "visible": {VAR: value}}
        Idempotent: the same request again under a job id it already launched answers that
        job's data with "existing": true (a retry after a lost answer starts nothing); a
        different request under a taken id, or a fenced id, is JobExists.
        The command is run without a shell (argv is data). The job is started detached: the
        agent forks, the child calls setsid and forks the wrapper, which runs the command in a
        process group of its own (stdin /dev/null, stdout/stderr to the folder), waits for it
        and writes exit.json. Neither holds the agent's pipes, so it outlives the SSH session.
poll    args {"job_ids": [str, ...], "fence": bool}
        data {"jobs": {job_id: {"state": "running" | "exited" | "lost" | "starting" | "absent",
                                "exit_code", "signal", "pid", "started", "ended", "error",
                                "fenced"}}}
        absent: no folder (never launched here); with "fence" the id is claimed, so a launch
        still in flight from a crashed workstation can no longer start it.
signal  args {"job_id", "signal": "TERM" | "KILL" | "INT" | "HUP" | "USR1" | ..., "wait_s"}
        data {"sent": bool, ...poll fields}: to the job's process group, then waits up to
        wait_s for it to end.
logs    args {"job_id", "stream": "stdout" | "stderr", "offset": int, "max_bytes": int}
        data {"text", "offset", "next_offset", "size", "state"}; a negative offset counts
        from the end (the last N bytes). Chunks never split a UTF-8 character.
        Or args {"job_id", "streams": {"stdout": offset, "stderr": offset}, "max_bytes"}:
        data {"streams": {name: {"text", "offset", "next_offset", "size"}}, "state"}.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from gpupoolctl.agent.protocol import AgentError

VERBS = ("launch", "poll", "signal", "logs")

# Bookkeeping a request leaves for after its answer is sent (the agent's main runs it
# before it reads the next request): what the answer does not depend on.
_after_answer: list[Callable[[], None]] = []


def after_answer(work: Callable[[], None]) -> None:
    _after_answer.append(work)


def run_after_answer() -> None:
    """Run what requests left for after their answers; a failure costs only itself."""
    while _after_answer:
        work = _after_answer.pop(0)
        with contextlib.suppress(Exception):  # nobody is left to tell: the answer is out
            work()


def handle(verb: str, args: Any, host: str, sim: dict[str, Any] | None) -> dict[str, Any]:
    from gpupoolctl.agent.jobs import control, launch, paths

    if not isinstance(args, dict):
        raise AgentError(f"{verb}: args must be an object", "BadRequest")
    root = paths.jobs_root(host, sim)
    if verb == "launch":
        return launch.launch(args, root, host, sim)
    if verb == "poll":
        return control.poll(args, root)
    if verb == "signal":
        return control.signal_job(args, root)
    if verb == "logs":
        return control.logs(args, root)
    raise AgentError(f"unknown verb {verb!r}", "BadRequest")
