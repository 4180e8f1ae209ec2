"""`gpupoolctl top` in a real terminal (tmux, Debian's package): keys sent, the screen read
back as a person sees it. While it runs, other commands change the pool (a queued job, a
re-cut by `schedule`, a drain) and the view shows each; `/` filters; `q` gives the terminal
back as it was."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
DGX = "sg-dgx01"
WAIT_S = 20.0  # bound on each wait for the screen; they end as soon as it shows


class Terminal:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            [str(TMUX), "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def wait_for(self, test: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + WAIT_S
        while True:
            screen = self.screen()
            if test(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed {what}:\n{screen}")
            time.sleep(0.1)


def write_policy(folder: Path, batch_window: str) -> Path:
    path = folder / f"pool-{batch_window}.yaml"
    path.write_text(
        "version: 1\nelastic:\n  min-idle: 0s\n"
        f"  batch-window: {batch_window}\n  max-cards-per-pass: 1\n"
        f"  rules:\n    - hosts: {DGX}\n      profiles: [1g.10gb, 3g.40gb]\n"
    )
    return path


@pytest.fixture
def terminal(jobs_cli, tmp_path: Path) -> Iterator[Terminal]:
    socket = f"gpupoolctl-test-{os.getpid()}-{tmp_path.name}"
    term = Terminal(socket)
    yield term
    term.tmux("kill-server")


def test_top_follows_the_pool_filters_and_quits_cleanly(jobs_cli, terminal, tmp_path) -> None:
    cli = jobs_cli
    waiting = write_policy(tmp_path, "1h")
    ready = write_policy(tmp_path, "0s")
    assert cli("-q", "pool").code == 0
    small = cli("-q", "--pool-policy", str(waiting), "submit", "--host", DGX, "--mem", "10G",
                "--", sys.executable, "-c", "import time; time.sleep(60)")  # fmt: skip
    assert small.code == 0, small.stderr
    job_id = small.stdout.strip()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.pop("NO_COLOR", None)
    for sized in ("COLUMNS", "LINES"):  # the terminal's own size, not the test runner's
        env.pop(sized, None)  # (and unset in the script: tmux hands its server's to panes)
    env.update({"HOME": str(tmp_path / "home"), "GPUPOOL_SIM_DIR": str(tmp_path / "sim")})
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.isidentifier())
    top = [sys.executable, "-m", "gpupoolctl.cli.main", "-q", "--pool-policy", str(waiting),
           "top", "--interval", "0.2s"]  # fmt: skip
    script = tmp_path / "run-top.sh"
    script.write_text(
        f"{exports}cd {shlex.quote(str(tmp_path))}\n"
        "unset COLUMNS LINES\nbefore=$(stty -g)\necho BEFORE-TOP\n"
        f"{shlex.join(top)} 2>top.err\necho TOP-EXIT=$?\n"
        '[ "$(stty -g)" = "$before" ] && echo TERMINAL-AS-BEFORE\nsleep 120\n'
    )
    terminal.tmux("new-session", "-d", "-s", "top", "-x", "200", "-y", "60", f"sh {script}")

    screen = terminal.wait_for(lambda s: "q quit" in s and DGX in s, "the first frame")
    assert "queue" in screen and job_id in screen
    # The queue pane (tab, tab) and its entry's details (enter): why it waits, in full, in
    # the scheduler's own words.
    terminal.keys("Tab")
    terminal.keys("Tab")
    terminal.keys("Enter")
    screen = terminal.wait_for(lambda s: f"job {job_id}" in s, "the job's details")
    assert "why it waits:" in screen and "waits for a re-cut" in screen, screen
    terminal.keys("Escape")
    terminal.wait_for(lambda s: "q quit" in s, "the panes again")

    terminal.keys("/")
    terminal.keys("-l", f"host={DGX}")
    terminal.keys("Enter")
    screen = terminal.wait_for(lambda s: "node(s) hidden" in s, "the filter applied")
    assert "dxb-" not in screen.split("filter:")[1]  # only the DGX in the nodes pane

    # Another process re-cuts an idle card for the waiting job: the view shows the new slices.
    run = cli("-q", "--pool-policy", str(ready), "schedule")
    assert run.code == 0, run.stderr
    # Waited for until the job shows on one of the new slices: the view may draw the new
    # slices a refresh before the job placed on them (the job id is in the queue pane then).
    screen = terminal.wait_for(lambda s: f"1g.10gb {job_id} " in s, "the job on a new slice")
    assert f"re-cutting {DGX}/gpu" in screen  # the event

    assert cli("-q", "drain", f"{DGX}/gpu7", "--reason", "fan noise").code == 0
    terminal.wait_for(lambda s: "drained" in s and "fan noise" in s, "the drain")

    terminal.keys("q")
    screen = terminal.wait_for(lambda s: "TOP-EXIT=" in s, "top ending")
    assert "TOP-EXIT=0" in screen and "TERMINAL-AS-BEFORE" in screen
    assert "BEFORE-TOP" in screen and "q quit" not in screen  # the alternate screen is gone
    assert (tmp_path / "top.err").read_text() == ""
