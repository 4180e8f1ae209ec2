"""Running Slurm's client commands: found once, bounded in time, errors in one line.

Every call is one client process (one RPC to slurmctld for the read commands), with a
time-out, stdin closed and the caller's environment (SLURM_CONF included, so a test cluster
or a second cluster is one variable away). A command that is not installed is a UsageError
naming the package; a non-zero exit is a SlurmError naming the command and Slurm's own
message; a job that can never run is a SlurmCapacityError (exit 5).

Reading jobs: `squeue --json` where the client supports it, else a fixed `--format`. Only
squeue's own words that the option or its JSON plugin is missing switch to the format (for
good); any other failure (a slurmctld time-out under load) is a SlurmError for that call
alone. squeue also shows jobs that ended less than MinJobAge ago; for older ones
`finished_job` asks sacct when accounting is on, else `scontrol show job`, and returns None
when neither knows the job any more.

Output is read as UTF-8 with undecodable bytes replaced: Slurm passes job names (and other
user text) through as raw bytes, and one such name must not break every listing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupoolctl.errors import ExitCode, GpupoolError, UsageError
from gpupoolctl.slurm.parse import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    SlurmJob,
    gres_types,
    parse_sacct,
    parse_sbatch_parsable,
    parse_show_jobs,
    parse_show_line,
    parse_squeue_format,
    parse_squeue_json,
)

PACKAGE = "slurm-client"
SEARCH_FOLDERS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")
DEFAULT_TIMEOUT_S = 30.0
MAX_MESSAGE = 300
# squeue's words when it cannot print JSON at all: an older client (getopt), or a build
# without the JSON serializer / data_parser plugins (`fatal: JSON plugin load failure`).
JSON_UNSUPPORTED = (
    "unrecognized option",
    "invalid option",
    "unknown option",
    "plugin load failure",
    "data_init() failed",
    "data_parser",
)
# sbatch's words for a request that no node could ever satisfy (not "busy now").
CAPACITY_MESSAGES = (
    "Requested node configuration is not available",
    "Invalid generic resource (gres) specification",
    "Node count specification invalid",
    "More processors requested than permitted",
    "Invalid node name specified",
)


class SlurmError(GpupoolError):
    """A Slurm command failed; the message names it and carries Slurm's own words."""


class SlurmCapacityError(SlurmError):
    """Slurm says no node can ever run this request (exit 5, as for the pool)."""

    exit_code = ExitCode.NO_CAPACITY


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # sbatch prints its real complaint last ("sbatch: error: Batch job submission failed: ...")
    message = lines[-1] if lines else ""
    return message[:MAX_MESSAGE]


def json_unsupported(stderr: str) -> bool:
    """Whether squeue's complaint says it cannot print JSON (not that slurmctld failed)."""
    text = stderr.lower()
    return any(words.lower() in text for words in JSON_UNSUPPORTED)


@dataclass
class SlurmClient:
    """Slurm's commands for one cluster (the one SLURM_CONF in `env` points at)."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout_s: float = DEFAULT_TIMEOUT_S
    search: tuple[str, ...] = SEARCH_FOLDERS  # where to look when PATH lacks a command
    _paths: dict[str, str] = field(default_factory=dict, repr=False)
    _json: bool | None = field(default=None, repr=False)  # squeue --json works here
    _accounting: bool | None = field(default=None, repr=False)

    # -- plumbing ----------------------------------------------------------------------------

    def command(self, name: str) -> str:
        """The path of a client command; UsageError naming the package when missing."""
        if name not in self._paths:
            found = shutil.which(name, path=self.env.get("PATH") or os.defpath) or next(
                (
                    f"{folder}/{name}"
                    for folder in self.search
                    if os.access(f"{folder}/{name}", os.X_OK)
                ),
                None,
            )
            if found is None:
                raise UsageError(
                    f"{name} not found: the Slurm backend needs Slurm's client commands "
                    f"(install the {PACKAGE} package, or put them on PATH)"
                )
            self._paths[name] = found
        return self._paths[name]

    def run(
        self, name: str, args: Sequence[str], *, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """One client command; SlurmError when it fails (with check) or does not answer."""
        argv = [self.command(name), *args]
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                capture_output=True,
                # Job names are the submitter's raw bytes: never let one break a listing.
                encoding="utf-8",
                errors="replace",
                env=dict(self.env),
                timeout=self.timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{name} did not answer within {self.timeout_s:g}s") from None
        except OSError as exc:
            raise SlurmError(f"{name} could not be run: {exc}") from None
        if check and done.returncode != 0:
            message = _last_line(done.stderr) or _last_line(done.stdout) or "no message"
            kind = (
                SlurmCapacityError
                if any(words in message for words in CAPACITY_MESSAGES)
                else SlurmError
            )
            raise kind(f"{name} failed (exit {done.returncode}): {message}")
        return done

    # -- writing -----------------------------------------------------------------------------

    def sbatch(self, args: Sequence[str], script: str) -> str:
        """Submit a batch script (given on stdin, so no temp file); the job id."""
        done = self.run("sbatch", ["--parsable", *args], stdin=script)
        return parse_sbatch_parsable(done.stdout)

    def test_only(self, args: Sequence[str], script: str) -> str:
        """`sbatch --test-only`: where and when Slurm would start it (nothing is submitted)."""
        done = self.run("sbatch", ["--test-only", *args], stdin=script)
        return _last_line(done.stderr) or _last_line(done.stdout)

    def scancel(self, job_ids: Iterable[str]) -> None:
        ids = list(job_ids)
        if ids:
            self.run("scancel", ids)

    # -- reading -----------------------------------------------------------------------------

    def queue(self, user: str | None = None) -> list[SlurmJob]:
        """Every job squeue knows (running, pending, and ended within MinJobAge): one RPC."""
        if self._json is not False:
            done = self.run("squeue", ["--json"], check=False)
            if done.returncode == 0:
                jobs = parse_squeue_json(done.stdout)
                self._json = True
                return [j for j in jobs if user is None or j.user == user]
            if self._json or not json_unsupported(done.stderr):
                message = _last_line(done.stderr) or _last_line(done.stdout) or "no message"
                raise SlurmError(f"squeue failed (exit {done.returncode}): {message}")
            self._json = False  # this squeue cannot print JSON: the fixed format from now on
        args = ["--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"]
        if user is not None:
            args.append(f"--user={user}")
        return parse_squeue_format(self.run("squeue", args).stdout)

    def accounting(self) -> bool:
        """Whether sacct can answer (AccountingStorageType is not accounting_storage/none)."""
        if self._accounting is None:
            done = self.run("scontrol", ["show", "config"], check=False)
            storage = ""
            for line in done.stdout.splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "AccountingStorageType":
                    storage = value.strip()
            off = ("", "accounting_storage/none")
            self._accounting = done.returncode == 0 and storage not in off
        return self._accounting

    def show_job(self, job_id: str) -> SlurmJob | None:
        """`scontrol show job -o ID`; None when slurmctld no longer knows it."""
        done = self.run("scontrol", ["show", "job", "-o", job_id], check=False)
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise SlurmError(f"scontrol show job {job_id} failed: {_last_line(done.stderr)}")
        jobs = parse_show_jobs(done.stdout)
        return jobs[0] if jobs else None

    def finished_job(self, job_id: str) -> SlurmJob | None:
        """A job squeue no longer lists: sacct with accounting, else scontrol (MinJobAge).
        None when neither knows it."""
        if self.accounting():
            done = self.run(
                "sacct",
                ["--parsable2", "--noheader", f"--format={','.join(SACCT_FIELDS)}", "-j", job_id],
            )
            jobs = [j for j in parse_sacct(done.stdout) if j.job_id == job_id]
            if jobs:
                return jobs[0]
        return self.show_job(job_id)

    def node_gres(self) -> dict[str, dict[str, int]]:
        """Each node's typed GPU GRES: {"node1": {"h100": 8, "h100_1g.10gb": 7}}."""
        done = self.run("scontrol", ["show", "node", "-o"])
        nodes: dict[str, dict[str, int]] = {}
        for line in done.stdout.splitlines():
            if line.strip():
                record = parse_show_line(line)
                nodes[record.get("NodeName", "?")] = gres_types(record.get("Gres", ""))
        return nodes
