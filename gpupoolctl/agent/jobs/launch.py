"""The `launch` verb: start a job detached from the agent, in a folder of its own."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpupoolctl.agent.jobs import paths
from gpupoolctl.agent.jobs.devices import NO_SUCH_DEVICE, check_nvidia
from gpupoolctl.agent.protocol import AgentError
from gpupoolctl.hw import sharing
from gpupoolctl.hw.proc import proc_start

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VISIBILITY = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)


def _bad(message: str) -> AgentError:
    return AgentError(f"launch: {message}", "BadRequest")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or "\0" in value:
        raise _bad(f"{what} must be a string without NUL bytes")
    return value


def parse(args: dict[str, Any]) -> dict[str, Any]:
    job_id = paths.check_job_id(args.get("job_id"))
    argv = args.get("argv")
    if not isinstance(argv, list) or not argv:
        raise _bad("argv must be a non-empty list of strings")
    argv = [_text(a, "every argv item") for a in argv]
    env = args.get("env") or {}
    if not isinstance(env, dict):
        raise _bad("env must be an object of strings")
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise _bad(f"bad environment variable name {key!r}")
        _text(value, f"env {key}")
    workdir = args.get("workdir")
    if workdir is not None:
        workdir = os.path.expanduser(_text(workdir, "workdir"))
        if not os.path.isdir(workdir):
            raise AgentError(f"launch: workdir {workdir!r} is not a folder here", "BadWorkdir")
    devices = args.get("devices") or {}
    if not isinstance(devices, dict):
        raise _bad("devices must be an object")
    vendor = devices.get("vendor")
    uuids = devices.get("uuids") or []
    if vendor not in (None, "nvidia", "amd"):
        raise _bad(f"unknown vendor {vendor!r}")
    if not isinstance(uuids, list) or not all(isinstance(u, str) and u for u in uuids):
        raise _bad("devices.uuids must be a list of strings")
    return {
        "job_id": job_id,
        "argv": argv,
        "env": dict(env),
        "workdir": workdir,
        "devices": {"vendor": vendor, "uuids": list(uuids)},
        **_limits(args),
    }


MAX_LIMIT_S = 366 * 86400.0


def _seconds(args: dict[str, Any], key: str, most: float) -> float | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most:
        raise _bad(f"{key} must be a number of seconds from 0 to {most:g}")
    return float(value)


def _limits(args: dict[str, Any]) -> dict[str, Any]:
    """The time limit the wrapper enforces, the signal it sends signal_s before it, and the
    grace between SIGTERM and SIGKILL: {"time_limit_s", "signal", "signal_s", "grace_s"}."""
    from gpupoolctl.agent.jobs.control import CATCHABLE

    limit = _seconds(args, "time_limit_s", MAX_LIMIT_S)
    grace = _seconds(args, "grace_s", 3600.0)
    warn = args.get("signal")
    before = _seconds(args, "signal_s", MAX_LIMIT_S)
    if warn is not None:
        warn = str(warn).upper().removeprefix("SIG")
        if warn not in CATCHABLE:
            raise _bad(f"signal {warn!r} is not one of {', '.join(CATCHABLE)}")
    if limit is not None and limit <= 0:
        raise _bad("time_limit_s must be more than 0")
    return {
        "time_limit_s": limit,
        "signal": warn,
        "signal_s": before if warn is not None else None,
        "grace_s": 30.0 if grace is None else grace,
    }


def visibility(vendor: str | None, uuids: list[str], *, allow_cli: bool = True) -> dict[str, str]:
    """The variables that confine the job to its slice; NoSuchDevice for a device this node
    does not have (`allow_cli`: nvidia-smi may say which it has; never on a simulated node)."""
    if vendor == "nvidia":
        names = []
        for uuid in uuids:
            # A comma would smuggle in another device; "/gi1" names a GI without a CI.
            if not uuid.startswith(("GPU-", "MIG-")) or any(c in uuid for c in ",/ "):
                raise AgentError(
                    f"launch: {uuid!r} is not a GPU or MIG device uuid (a MIG instance without "
                    "a compute instance cannot run work)",
                    "BadDevices",
                )
            names.append(uuid)
        check_nvidia(names, allow_cli=allow_cli)
        # CUDA takes uuids directly; with MIG, CUDA uses the first MIG device listed.
        return {"CUDA_VISIBLE_DEVICES": ",".join(names)}
    if vendor == "amd":
        order = _amd_positions(uuids)
        # ROCr narrows the node to these logical GPUs; HIP then numbers what it sees from 0.
        return {
            "ROCR_VISIBLE_DEVICES": ",".join(str(p) for p in order),
            "HIP_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(order))),
        }
    return {}


def _amd_positions(uuids: list[str]) -> list[int]:
    """Logical GPU numbers (amdsmi's handle order, which ROCm follows) of the given uuids."""
    from gpupoolctl.agent.drivers.amdsmi import DriverUnavailable, _import_amdsmi

    try:
        lib = _import_amdsmi()
    except DriverUnavailable as exc:
        raise AgentError(f"launch: cannot map AMD devices: {exc}", "BadDevices") from None
    lib.amdsmi_init(lib.AmdSmiInitFlags.INIT_AMD_GPUS)
    try:
        found = {
            str(lib.amdsmi_get_gpu_device_uuid(h)).lower(): index
            for index, h in enumerate(lib.amdsmi_get_processor_handles())
        }
    finally:
        lib.amdsmi_shut_down()
    out = []
    for uuid in uuids:
        if uuid.lower() not in found:
            raise AgentError(f"launch: no AMD GPU {uuid} on this node", NO_SUCH_DEVICE)
        out.append(found[uuid.lower()])
    return out


def launch(
    args: dict[str, Any], root: Path, host: str, sim: dict[str, Any] | None
) -> dict[str, Any]:
    from gpupoolctl.agent.drivers.amdsmi import _stdout_to_stderr

    request = parse(args)
    with _stdout_to_stderr():  # vendor libraries must not write into our JSON answer
        devices = request["devices"]
        visible = visibility(devices["vendor"], devices["uuids"], allow_cli=sim is None)
    _refuse_builtin_if_ephemeral(request["argv"])
    paths.ensure_root(root)
    folder = root / request["job_id"]
    try:
        sharing.make_dir(folder)  # the claim: one launch per job id, ever, on this node
    except FileExistsError:
        # The same request again (a retry after its answer was lost) gets the one job's
        # launch answer; anything else under a taken id stays refused.
        return _relaunch(request, visible, folder)
    created = time.time()
    # Not fsynced: it matters while the job can run; a node crash ends the job anyway.
    paths.write_json(
        folder / "meta.json",
        {**request, "visible": visible, "created": created},
        durable=False,
    )
    env = dict(os.environ)
    env.update(request["env"])
    for name in _VISIBILITY:  # the slice wins over anything the request or login set
        env.pop(name, None)
    env.update(visible)
    # The pool's job id (the same on every try of a job) when the request names it; else
    # this folder's name.
    env["GPUPOOL_JOB_ID"] = request["env"].get("GPUPOOL_JOB_ID") or request["job_id"]
    env["GPUPOOL_JOB_DIR"] = str(folder)
    env.pop("GPUPOOL_SIM_STATE", None)
    env.pop(EPHEMERAL_AGENT, None)
    if sim is not None:  # so a workload can read its simulated card
        from gpupoolctl.sim.state import SimState

        state = SimState.path_for(host, sim.get("state_dir"))
        env["GPUPOOL_SIM_STATE"] = str(state.absolute())
    argv = _builtin_workload(request["argv"], env)
    limits = {k: request[k] for k in ("time_limit_s", "signal", "signal_s", "grace_s")}
    report = _spawn(argv, env, request["workdir"] or os.path.expanduser("~"), folder, limits)
    if "error" in report:
        raise AgentError(f"launch: {report['error']}", "LaunchFailed")
    if sim is not None:
        # The simulated GPUs list the job (as nvidia-smi would on a real node) once the
        # answer is out: a rewrite of the node's state file the answer need not wait for.
        from gpupoolctl.agent.jobs import after_answer

        pid = int(report["pid"])
        after_answer(lambda: _show_on_sim_gpus(host, sim, request, pid))
    return {
        "pid": report["pid"],
        "pgid": report["pid"],
        "job_dir": str(folder),
        "started": report["started"],
        "visible": visible,
    }


# How long a retried launch waits for the first one's job to start (its agent may still be
# between the claim and the wrapper's pid.json); the wrapper reports in milliseconds.
RELAUNCH_WAIT_S = 5.0


def _relaunch(request: dict[str, Any], visible: dict[str, str], folder: Path) -> dict[str, Any]:
    """A launch whose job id is taken: the existing job's answer when the folder was claimed
    by this very request (same parsed args: argv, env, workdir, devices, limits), never by a
    fence; else JobExists, as before."""
    job_id = request["job_id"]
    taken = AgentError(
        f"job {job_id} already exists on this node (launched, or fenced by a recovery pass)",
        "JobExists",
    )
    deadline = time.monotonic() + RELAUNCH_WAIT_S
    while True:
        if (folder / "fenced").exists():
            raise taken
        meta = paths.read_json(folder / "meta.json")
        started = paths.read_json(folder / "pid.json")
        ended = paths.read_json(folder / "exit.json")
        if meta is not None and any(meta.get(k) != v for k, v in request.items()):
            raise taken
        if meta is not None and started is not None:
            return {
                "pid": started.get("pid"),
                "pgid": started.get("pgid", started.get("pid")),
                "job_dir": str(folder),
                "started": started.get("started"),
                "visible": meta.get("visible", visible),
                "existing": True,
            }
        if meta is not None and ended is not None:  # it could not start: the same answer
            raise AgentError(f"launch: {ended.get('error') or 'did not start'}", "LaunchFailed")
        if time.monotonic() >= deadline:
            raise AgentError(
                f"job {job_id} already exists on this node, but its launch never started "
                f"(no pid after {RELAUNCH_WAIT_S:g}s): an interrupted launch",
                "JobExists",
            )
        time.sleep(0.02)


EPHEMERAL_AGENT = "GPUPOOL_AGENT_EPHEMERAL"  # set by the bootstrap when it had no cache folder


def _refuse_builtin_if_ephemeral(argv: list[str]) -> None:
    """Before the job id is claimed: an agent running from a temp folder that it removes on
    exit cannot start a built-in workload (the job would lose its own code while starting)."""
    from gpupoolctl.agent.workloads import WORKLOAD_COMMAND

    if argv[0] == WORKLOAD_COMMAND and os.environ.get(EPHEMERAL_AGENT):
        raise AgentError(
            "built-in workloads need the agent's cache folder on this node (~/.cache and "
            "the temp folder were not writable, so the agent ran from a folder it removes)",
            "LaunchFailed",
        )


def _builtin_workload(argv: list[str], env: dict[str, str]) -> list[str]:
    """`gpupoolctl-workload ...` runs a workload that ships with the agent (meta.json keeps
    the argv as requested): the node's python, with this payload first on PYTHONPATH."""
    from gpupoolctl.agent.workloads import WORKLOAD_COMMAND, workload_argv

    if argv[0] != WORKLOAD_COMMAND:
        return argv
    import gpupoolctl

    root = os.path.dirname(os.path.dirname(os.path.abspath(gpupoolctl.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return workload_argv(argv, sys.executable or "python3")


def _show_on_sim_gpus(host: str, sim: dict[str, Any], request: dict[str, Any], pid: int) -> None:
    """On a simulated node the job also appears as a process on its simulated GPUs."""
    from gpupoolctl.sim import SimState, procs

    path = SimState.path_for(host, sim.get("state_dir"))
    # register_job reloads the file under its lock: no need to read it here first (this
    # request's activate made it).
    if path.exists():
        state = SimState(path, {})
    else:
        state = SimState.open(host, str(sim.get("template")), sim.get("state_dir"))
    procs.register_job(
        state,
        request["devices"]["vendor"],
        request["devices"]["uuids"],
        pid,
        request["job_id"],
        os.path.basename(request["argv"][0]),
    )


def _spawn(
    argv: list[str],
    env: dict[str, str],
    workdir: str,
    folder: Path,
    limits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Double fork: the wrapper ends up in a session of its own, re-parented to init."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # intermediate: new session, fork the wrapper, leave at once
        try:
            os.close(read_end)
            os.setsid()
            if os.fork() == 0:
                _wrapper(argv, env, workdir, folder, write_end, limits or {})
        finally:
            os._exit(0)  # never back into the agent (no atexit, no second answer)
    os.close(write_end)
    os.waitpid(child, 0)
    chunks = []
    with os.fdopen(read_end, "rb") as reader:
        chunks.append(reader.read())
    raw = b"".join(chunks)
    try:
        report = json.loads(raw.decode("utf-8"))
    except ValueError:
        return {"error": "the job wrapper died before it reported"}
    return report if isinstance(report, dict) else {"error": "bad wrapper report"}


def _detach_fds(keep: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # the agent's pipes (the SSH channel) must close when it exits
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, 1024))
    for fd in open_fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _wrapper(
    argv: list[str],
    env: dict[str, str],
    workdir: str,
    folder: Path,
    report: int,
    limits: dict[str, Any],
) -> None:
    """Run the job, report its pid through `report`, wait (enforcing its time limit), write
    exit.json. Never returns."""
    try:
        _detach_fds(report)
        out = sharing.open_file(folder / "stdout", os.O_WRONLY | os.O_APPEND)
        err = sharing.open_file(folder / "stderr", os.O_WRONLY | os.O_APPEND)
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=env,
                start_new_session=True,  # its own process group: `signal` reaches all of it
                close_fds=True,
            )
        except OSError as exc:
            message = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            paths.write_json(
                folder / "exit.json",
                {"exit_code": code, "signal": None, "ended": time.time(), "error": message},
            )
            os.write(report, json.dumps({"error": message}).encode())
            return
        os.close(out)
        os.close(err)
        started = time.time()
        paths.write_json(
            folder / "pid.json",
            {
                "pid": process.pid,
                "pgid": process.pid,
                "wrapper_pid": os.getpid(),
                "wrapper_start": proc_start(os.getpid()),
                "proc_start": proc_start(process.pid),
                "started": started,
            },
            durable=False,  # describes live processes only (exit.json is durable)
        )
        try:  # the agent may be gone (its SSH session cut): the job runs on regardless
            os.write(report, json.dumps({"pid": process.pid, "started": started}).encode())
            os.close(report)
        except OSError:
            pass
        returncode, reason = _wait(process, started, limits)
        signal_name = None
        if returncode < 0:
            import signal

            try:
                signal_name = signal.Signals(-returncode).name
            except ValueError:
                signal_name = str(-returncode)
            returncode = 128 - returncode  # as a shell reports a death by signal
        paths.write_json(
            folder / "exit.json",
            {
                "exit_code": returncode,
                "signal": signal_name,
                "ended": time.time(),
                "error": None,
                "reason": reason,
            },
        )
    except BaseException:  # nothing may escape into the agent's code path
        pass
    finally:
        os._exit(0)


def _wait(
    process: subprocess.Popen[bytes], started: float, limits: dict[str, Any]
) -> tuple[int, str | None]:
    """Wait for the job; with a time limit (wall-clock seconds from its start), send its
    warning signal `signal_s` before it, SIGTERM at it and SIGKILL `grace_s` after: the
    process group each time. (exit status, "time-limit" when the limit was reached)."""
    import signal

    limit = limits.get("time_limit_s")
    if not limit:
        return process.wait(), None
    warn = limits.get("signal")
    steps: list[tuple[float, int]] = []
    if warn:
        before = min(float(limits.get("signal_s") or 0), limit)
        steps.append((started + limit - before, getattr(signal, f"SIG{warn}")))
    steps.append((started + limit, signal.SIGTERM))
    steps.append((started + limit + float(limits.get("grace_s") or 0), signal.SIGKILL))
    reason = None
    for at, signum in steps:
        try:
            return process.wait(timeout=max(0.0, at - time.time())), reason
        except subprocess.TimeoutExpired:
            pass
        if signum == signal.SIGTERM:
            reason = "time-limit"
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signum)
    return process.wait(), reason
