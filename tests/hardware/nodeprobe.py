"""How the real-GPU checks reach the node: the agent as the bootstrap starts it, the vendor
tools, NVML read directly, and jobs through the agent's own `launch` verb. Every subprocess has a
timeout; nothing here changes the GPU (queries only: no MIG mode, instances, resets, clocks or
power limits).

Standard library only at import; pynvml is imported by the one function that reads NVML
directly. Of gpupoolctl nothing from the workstation side (cli, remote) is imported: the agent
runs in a child `python3 -c "from gpupoolctl.agent.main import main; ..."` with this checkout
first on PYTHONPATH and one JSON request on stdin, which is what the bootstrap does once it has
unpacked the payload (gpupoolctl/remote/bootstrap.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gpupoolctl.agent

# The checkout (or installed tree) whose agent runs: the folder that holds `gpupoolctl/`.
AGENT_ROOT = str(Path(gpupoolctl.agent.__file__).resolve().parents[2])
# The bootstrap's last two lines, once the payload is on sys.path: main() reads stdin.
AGENT_MAIN = "from gpupoolctl.agent.main import main; raise SystemExit(main())"


@dataclass
class Command:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def first_line(self) -> str:
        for text in (self.stderr, self.stdout):
            for line in text.splitlines():
                if line.strip():
                    return line.strip()
        return f"exit status {self.rc}"


def run(
    argv: list[str],
    timeout: float,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
) -> Command:
    """Run without a shell; a time-out is rc 124 with a line saying so, never a hang."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=False,
        )
    except FileNotFoundError as exc:
        return Command(argv, 127, "", str(exc), time.monotonic() - start)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace")
        return Command(argv, 124, out, f"timed out after {timeout:g}s", time.monotonic() - start)
    return Command(
        argv,
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
        time.monotonic() - start,
    )


# -- the agent -----------------------------------------------------------------------------------


def _pythonpath(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != AGENT_ROOT]


# A stand-in that leaves `<name>.imported` beside itself, so a run can show it was this that
# the agent met, then fails as an absent module does.
_HIDDEN = (
    "import pathlib\n"
    'pathlib.Path(__file__).with_suffix(".imported").touch()\n'
    'raise ImportError("{name} hidden by tests/hardware to exercise the smi fallback")\n'
)


class Agent:
    """The agent run as the bootstrap runs it: `python3 -c AGENT_MAIN` with the agent's tree
    first on PYTHONPATH and a JSON request on stdin. Its state (job folders) lives under
    `work`, not in ~."""

    def __init__(
        self,
        work: Path,
        python: str = sys.executable,
        sim: dict[str, Any] | None = None,
        host: str = "hwcheck",
    ) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.python = python
        self.sim = sim
        self.host = host
        self.env = dict(os.environ)
        self.env.update(
            {
                "XDG_CACHE_HOME": str(work / "cache"),
                "XDG_STATE_HOME": str(work / "state"),
            }
        )
        self.env.pop("GPUPOOL_AGENT_EPHEMERAL", None)

    def hidden_dir(self, names: tuple[str, ...]) -> Path:
        """A folder whose modules shadow `names` with an ImportError (first on PYTHONPATH)."""
        folder = self.work / ("hidden-" + "-".join(names))
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / f"{name}.py").write_text(_HIDDEN.format(name=name))
            (folder / f"{name}.imported").unlink(missing_ok=True)
        return folder

    def hidden_was_met(self, names: tuple[str, ...]) -> bool:
        """Whether the last run with `hide=names` imported every stand-in."""
        folder = self.work / ("hidden-" + "-".join(names))
        return all((folder / f"{name}.imported").is_file() for name in names)

    def request(
        self,
        verb: str,
        args: dict[str, Any] | None = None,
        hide: tuple[str, ...] = (),
        timeout: float = 120,
    ) -> dict[str, Any]:
        """The agent's envelope, plus "elapsed_s"; a run that gave no envelope is an error
        envelope of type "NoEnvelope" naming the exit status and stderr."""
        request: dict[str, Any] = {"v": 1, "verb": verb, "args": args or {}, "host": self.host}
        if self.sim is not None:
            request["sim"] = self.sim
        env = dict(self.env)
        first = [str(self.hidden_dir(hide))] if hide else []
        env["PYTHONPATH"] = os.pathsep.join([*first, AGENT_ROOT, *_pythonpath(env)])
        done = run(
            [self.python, "-c", AGENT_MAIN],
            timeout,
            env=env,
            stdin=json.dumps(request).encode(),
            cwd=self.work,
        )
        try:
            envelope = json.loads(done.stdout)
            if not isinstance(envelope, dict):
                raise ValueError("not an object")
        except ValueError:
            envelope = {
                "v": 1,
                "ok": False,
                "data": None,
                "error": {
                    "type": "NoEnvelope",
                    "message": f"exit {done.rc}: {done.first_line()}",
                },
            }
        envelope["elapsed_s"] = round(done.elapsed_s, 3)
        return envelope

    def run_jobs(
        self, jobs: list[dict[str, Any]], timeout: float, poll_s: float = 1.0
    ) -> list[dict[str, Any]]:
        """Launch jobs ({"job_id", "argv", "devices", "env"}) through the agent's `launch` verb,
        wait for all (KILL what outlives `timeout`), and return each with its launch answer,
        final state, exit code, stdout and stderr."""
        results = []
        for job in jobs:
            args = {
                "job_id": job["job_id"],
                "argv": job["argv"],
                "env": job.get("env") or {},
                "devices": job["devices"],
            }
            answer = self.request("launch", args, timeout=60)
            results.append(
                {
                    "job_id": job["job_id"],
                    "launch": answer,
                    "state": None if answer.get("ok") else "not launched",
                    "exit_code": None,
                    "stdout": "",
                    "stderr": "",
                    "started": time.monotonic(),
                }
            )
        deadline = time.monotonic() + timeout
        waiting = [r for r in results if r["state"] is None]
        while waiting:
            answer = self.request("poll", {"job_ids": [r["job_id"] for r in waiting]}, timeout=60)
            states = ((answer.get("data") or {}).get("jobs")) or {}
            for result in list(waiting):
                state = states.get(result["job_id"]) or {}
                if state.get("state") in ("exited", "lost", "absent"):
                    result.update(state=state["state"], exit_code=state.get("exit_code"))
                    result["elapsed_s"] = round(time.monotonic() - result["started"], 3)
                    waiting.remove(result)
            if not waiting:
                break
            if time.monotonic() > deadline:
                for result in waiting:
                    self.request(
                        "signal",
                        {"job_id": result["job_id"], "signal": "KILL", "wait_s": 5},
                        timeout=30,
                    )
                    result.update(state="killed after timeout", exit_code=None)
                    result["elapsed_s"] = round(time.monotonic() - result["started"], 3)
                break
            time.sleep(poll_s)
        for result in results:
            if result["state"] == "not launched":
                continue
            for stream in ("stdout", "stderr"):
                answer = self.request(
                    "logs",
                    {"job_id": result["job_id"], "stream": stream, "offset": 0, "max_bytes": 65536},
                    timeout=30,
                )
                result[stream] = ((answer.get("data") or {}).get("text")) or ""
            result.pop("started", None)
        for result in results:
            result.pop("started", None)
        return results


def last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


# What a launched child reports about the devices it sees (run as `python3 -c PROBE`).
PROBE = r"""
import json, os, sys
out = {"env": {k: os.environ.get(k) for k in
       ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}}
try:
    import torch
except Exception as exc:
    out["error"] = "cannot import torch: %s" % (exc,)
    print(json.dumps(out))
    sys.exit(3)
try:
    out["torch"] = torch.__version__
    out["backend"] = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    out["device_count"] = torch.cuda.device_count()
    devices = []
    for i in range(out["device_count"]):
        p = torch.cuda.get_device_properties(i)
        d = {"name": p.name, "total_memory_mib": int(p.total_memory) // 2**20,
             "major": p.major, "minor": p.minor,
             "multi_processor_count": p.multi_processor_count}
        u = getattr(p, "uuid", None)
        d["uuid"] = str(u) if u is not None else None
        if all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            d["pci_bus_id"] = "%04x:%02x:%02x.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
        if hasattr(p, "gcnArchName"):
            d["gcn_arch"] = p.gcnArchName
        devices.append(d)
    out["devices"] = devices
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


# -- the vendor tools ----------------------------------------------------------------------------


def find_amd_smi() -> str | None:
    found = shutil.which("amd-smi")
    if found:
        return found
    candidate = os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "bin", "amd-smi")
    return candidate if os.access(candidate, os.X_OK) else None


def nvidia_absent() -> str | None:
    """None when nvidia-smi lists at least one GPU; else the one-line reason to skip."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return "no NVIDIA GPU here: nvidia-smi is not on PATH"
    listed = run([tool, "-L"], timeout=30)
    if not listed.ok:
        return f"no NVIDIA GPU here: nvidia-smi -L exited {listed.rc}: {listed.first_line()}"
    if not any(line.startswith("GPU ") for line in listed.stdout.splitlines()):
        return "no NVIDIA GPU here: nvidia-smi -L lists none"
    return None


def amd_absent() -> str | None:
    tool = find_amd_smi()
    if tool is None:
        return "no AMD GPU here: amd-smi is not on PATH nor in $ROCM_PATH/bin"
    listed = run([tool, "list", "--json"], timeout=60)
    if not listed.ok:
        return f"no AMD GPU here: amd-smi list exited {listed.rc}: {listed.first_line()}"
    if '"gpu"' not in listed.stdout:
        return "no AMD GPU here: amd-smi list shows none"
    return None


class Node:
    """The node this suite runs on: its agent, its vendor tool, its NVML."""

    def __init__(self, vendor: str, work: Path) -> None:
        self.vendor = vendor
        self.agent = Agent(work)
        self.python = sys.executable
        self.tool = shutil.which("nvidia-smi") if vendor == "nvidia" else find_amd_smi()

    def smi(self, *args: str, timeout: float = 60) -> Command:
        if self.tool is None:
            return Command([str(a) for a in args], 127, "", "vendor tool not found", 0.0)
        return run([self.tool, *args], timeout=timeout)

    def nvml(self) -> Any:
        import pynvml

        pynvml.nvmlInit()
        return pynvml


# -- NVML read directly --------------------------------------------------------------------------


def handle_by_uuid(nvml: Any, uuid: str) -> Any:
    """The NVML handle of `GPU-<uuid>`; bytes, which every nvidia-ml-py accepts (the older ones
    take no str)."""
    return nvml.nvmlDeviceGetHandleByUUID(uuid.encode())


def _nvml_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_profiles(nvml: Any, handle: Any) -> dict[str, Any]:
    """The GPU instance profiles NVML offers on this GPU, asked directly (not through the
    agent's driver): version 2 of the profile query (names; the driver says it needs MIG on),
    else version 1, and the possible placements of each. Every refusal is kept, by profile."""
    table, errors, versions = [], [], set()
    count = max(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)), 0x12)
    for index in range(count):
        info, version, refusals = None, None, []
        for version in (2, 1):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version)
                break
            except nvml.NVMLError as exc:
                refusals.append((version, exc))
        if info is None:  # NOT_SUPPORTED / INVALID_ARGUMENT: not a profile of this card
            errors.append(f"profile index {index}: " + "; ".join(f"v{v} {e}" for v, e in refusals))
            continue
        if refusals:
            errors.append(f"profile index {index}: v{refusals[0][0]} {refusals[0][1]}, v1 answered")
        versions.add(version)
        if not int(info.instanceCount):
            continue
        raw_name = getattr(info, "name", None) if version == 2 else None
        row: dict[str, Any] = {
            "index": index,
            "id": int(info.id),
            "name": _nvml_text(raw_name).removeprefix("MIG ").strip() if raw_name else None,
            "slices": int(info.sliceCount),
            "memory_mib": int(info.memorySizeMB),
            "sm_count": int(info.multiprocessorCount),
            "max_instances": int(info.instanceCount),
            "placements": None,
            "size": None,
            "query_version": version,
        }
        array = (nvml.c_nvmlGpuInstancePlacement_t * 32)()
        slots = ctypes.c_uint(32)
        try:
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                handle, int(info.id), array, ctypes.byref(slots)
            )
        except nvml.NVMLError as exc:
            row["placement_error"] = str(exc)
        else:
            placed = [array[i] for i in range(slots.value)]
            row["placements"] = [int(p.start) for p in placed]
            sizes = {int(p.size) for p in placed}
            row["size"] = sizes.pop() if len(sizes) == 1 else sorted(sizes) or None
        table.append(row)
    return {"table": table, "errors": errors, "versions": sorted(versions)}


def _read(fn: Any, nvml: Any, *args: Any) -> dict[str, Any]:
    """{"value": ...} or how it was refused: {"nvml_error", "code"} (NVML said no: readable as
    'unsupported'), {"missing"} (this pynvml has no such call), {"failed"} (anything else)."""
    if fn is None:
        return {"missing": "this pynvml has no such function"}
    try:
        return {"value": fn(*args)}
    except nvml.NVMLError as exc:
        return {"nvml_error": str(exc), "code": getattr(exc, "value", None)}
    except Exception as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}


def nvml_health(nvml: Any, handle: Any) -> dict[str, dict[str, Any]]:
    """The health fields the faults issue reads, as NVML answers them here."""
    get = lambda name: getattr(nvml, name, None)  # noqa: E731
    unc = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    cor = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    vol = getattr(nvml, "NVML_VOLATILE_ECC", 0)
    agg = getattr(nvml, "NVML_AGGREGATE_ECC", 1)
    out = {
        "ecc_mode": _read(get("nvmlDeviceGetEccMode"), nvml, handle),
        "ecc_volatile_uncorrected": _read(
            get("nvmlDeviceGetTotalEccErrors"), nvml, handle, unc, vol
        ),
        "ecc_volatile_corrected": _read(get("nvmlDeviceGetTotalEccErrors"), nvml, handle, cor, vol),
        "ecc_aggregate_uncorrected": _read(
            get("nvmlDeviceGetTotalEccErrors"), nvml, handle, unc, agg
        ),
        "ecc_aggregate_corrected": _read(
            get("nvmlDeviceGetTotalEccErrors"), nvml, handle, cor, agg
        ),
        "remapped_rows": _read(get("nvmlDeviceGetRemappedRows"), nvml, handle),
        "retired_pages_single_bit": _read(
            get("nvmlDeviceGetRetiredPages"),
            nvml,
            handle,
            getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
        ),
        "retired_pages_double_bit": _read(
            get("nvmlDeviceGetRetiredPages"),
            nvml,
            handle,
            getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
        ),
        "retired_pages_pending": _read(get("nvmlDeviceGetRetiredPagesPendingStatus"), nvml, handle),
        "clocks_event_reasons": _read(
            get("nvmlDeviceGetCurrentClocksEventReasons")
            or get("nvmlDeviceGetCurrentClocksThrottleReasons"),
            nvml,
            handle,
        ),
        "temperature_c": _read(
            get("nvmlDeviceGetTemperature"),
            nvml,
            handle,
            getattr(nvml, "NVML_TEMPERATURE_GPU", 0),
        ),
        "power_mw": _read(get("nvmlDeviceGetPowerUsage"), nvml, handle),
    }
    for name in ("retired_pages_single_bit", "retired_pages_double_bit"):
        if "value" in out[name]:
            out[name]["value"] = len(out[name]["value"])  # the count; addresses are noise here
    for name, entry in out.items():
        if "value" in entry and not isinstance(entry["value"], int | float | str | type(None)):
            entry["value"] = [int(v) for v in entry["value"]]
        out[name] = entry
    return out
