"""Other Unix users for tests that act as them (ownership, teams, pool admins), and a folder
they share, set up as README.md's "Sharing one pool" says: each user has a group of its
own and is a member of one shared group; the folder is that group's, setgid, 2770.

Made once per machine with groupadd/useradd (system accounts, no home, no login shell) and
reused after. Needs root, as CI is; a test that needs them is skipped otherwise, with the
reason. A command runs as one of them with `subprocess.run([*users.run_as(name), *argv])`:
its uid, its own group and the shared group, as a login gives them, and one capability,
CAP_KILL. The simulated nodes run each operator's agent as that operator, where real nodes
run the one node account every operator's agent logs in as (README: "Sharing one pool"),
which may stop every job: one operator's pass stops another's jobs (preemption, a team's
reclaim, an admin's cancel) there, and here with CAP_KILL. Nothing else is allowed them:
every file they read or write is checked as for any user.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GROUP = "gpupool-test"  # the operators' shared group
ALICE = "gpupool-alice"
BOB = "gpupool-bob"
EVE = "gpupool-eve"
NAMES = (ALICE, BOB, EVE)


def named(text: str) -> str:
    """`text` (a pool policy) with the words alice, bob and eve as the test users' names."""
    names = {"alice": ALICE, "bob": BOB, "eve": EVE}
    return re.sub(r"\b(alice|bob|eve)\b", lambda m: names[m[1]], text)


@dataclass(frozen=True)
class Users:
    """The test users' shared group, by id."""

    gid: int

    def run_as(self, name: str) -> list[str]:
        """The start of a command line that runs the rest as `name` (see above)."""
        entry = pwd.getpwnam(name)
        return [
            "setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
            "--inh-caps=+kill", "--ambient-caps=+kill", "--",
        ]  # fmt: skip

    def shared_folder(self) -> Path:
        """A new folder the group shares (root-owned, the group's, setgid 2770), with a
        private home in it for each user (and one for root): the caller removes it."""
        base = Path(tempfile.mkdtemp(prefix="gpupool-shared-"))
        os.chown(base, 0, self.gid)
        base.chmod(0o2770)
        for name in (*NAMES, "root"):
            home = base / "home" / name
            home.mkdir(parents=True)
            entry = pwd.getpwnam(name)
            os.chown(home, entry.pw_uid, entry.pw_gid)
            home.chmod(0o700)
        (base / "home").chmod(0o2755)
        return base


def unavailable() -> str | None:
    """Why the test users cannot be made here, or None."""
    if os.geteuid() != 0:
        return "acting as other users needs root (useradd, and running commands as them)"
    for tool in ("useradd", "groupadd", "usermod", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """One maker at a time on this machine: pytest-xdist workers start together."""
    path = Path(tempfile.gettempdir()) / "gpupool-test-users.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


def ensure() -> Users:
    """Make the shared group and the users where they are missing (idempotent)."""
    with _machine_lock():
        _run("groupadd", "--force", "--system", GROUP)
        for name in NAMES:
            try:
                pwd.getpwnam(name)
            except KeyError:
                _run(
                    "useradd", "--system", "--user-group", "--no-create-home",
                    "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                    "--comment", "gpupoolctl tests", "--groups", GROUP, name,
                )  # fmt: skip
            if name not in grp.getgrnam(GROUP).gr_mem:
                _run("usermod", "--append", "--groups", GROUP, name)
    return Users(gid=grp.getgrnam(GROUP).gr_gid)


def unreachable(users: Users, env: dict[str, str]) -> str | None:
    """Why a test user cannot run gpupoolctl with this interpreter in a shared folder, or
    None: the interpreter or the checkout may sit below a private folder (such as /root)."""
    # As the CLI does: import it, start the interpreter again (an agent, a job), write here.
    probe = (
        "import gpupoolctl.cli.main, os, subprocess, sys; "
        "subprocess.run([sys.executable, '-c', ''], check=True); "
        "sys.exit(not os.access('.', os.W_OK))"
    )
    folder = users.shared_folder()
    try:
        done = subprocess.run(
            [*users.run_as(ALICE), sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            cwd=folder,
            env={**env, "HOME": str(folder / "home" / ALICE)},
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{ALICE} cannot run {sys.executable}: {exc}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return (
            f"{ALICE} cannot run {sys.executable} with gpupoolctl importable and write a "
            f"shared folder (is a folder above the interpreter or the checkout private?): {why[0]}"
        )
    return None
