"""`top --once`, `top -o json`, `pool --html` end to end on the bundled simulated pool:
the content a person or a script reads (hosts, slices, states, jobs, events), checked
against what `pool` and `jobs` say, not against a saved copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

PY = sys.executable
SLEEP = ["--", PY, "-c", "import time; time.sleep(60)"]
DRAINED = "dxb-l40s-01"


@pytest.fixture
def busy_pool(jobs_cli):
    """The bundled pool with one small job running, one whole-node job queued behind a
    drained node, and that drain."""
    assert jobs_cli("-q", "pool").code == 0
    small = jobs_cli("-q", "submit", "--mem", "10G", *SLEEP)
    assert small.code == 0, small.stderr
    assert jobs_cli("-q", "drain", DRAINED, "--reason", "PSU swap").code == 0
    big = jobs_cli("-q", "submit", "--host", DRAINED, "--gpus", "4", *SLEEP)
    assert big.code == 0, big.stderr
    return jobs_cli, small.stdout.strip(), big.stdout.strip()


def pool_json(cli) -> dict:
    run = cli("-q", "pool", "--no-refresh", "-o", "json")
    assert run.code == 0, run.stderr
    return run.json()


def test_top_once_text_json_and_the_pool_page_agree_with_pool_and_jobs(busy_pool, tmp_path):
    # One busy pool for the three views (each pool costs a few CLI calls to set up).
    check_text(*busy_pool)
    check_json(*busy_pool)
    check_page(*busy_pool, tmp_path)


def check_text(cli, small: str, big: str) -> None:
    run = cli("-q", "top", "--once")
    assert run.code == 0, run.stderr
    text = run.stdout
    pool = pool_json(cli)
    for node in pool["nodes"]:
        assert f"  {node['host']}  " in text, node["host"]
    held = [s for n in pool["nodes"] for s in n["slices"] if s["state"] == "held"]
    assert len(held) == 1 and f"{held[0]['host']}" in text
    assert f"{DRAINED}  drained: PSU swap" in text
    assert "GPUs (4 drained)," in text  # the L40S node's four: drained, not failed
    running = text.split("RUNNING (1)")[1].split("QUEUE")[0]
    assert small in running and held[0]["slice"] in running
    queue = text.split("QUEUE (1, head)")[1].split("EVENTS")[0]
    assert big in queue and "4 x gpu" in queue
    jobs = {j["id"]: j for j in cli("-q", "jobs", "--no-refresh", "-o", "json").json()}
    assert jobs[big]["reason"] and jobs[big]["reason"] in queue  # the scheduler's own words
    events = text.split("EVENTS (newest last)")[1]
    assert f"drained {DRAINED}: PSU swap" in events and f"{small} (" in events
    # Not a terminal and no --once: the same one frame, never a live screen.
    piped = cli("-q", "top")
    assert piped.code == 0 and "\x1b[" not in piped.stdout and "RUNNING (1)" in piped.stdout


def check_json(cli, small: str, big: str) -> None:
    run = cli("-q", "top", "--once", "-o", "json")
    assert run.code == 0, run.stderr
    frame = run.json()
    drawn = {
        s["id"]: s["state"]
        for site in frame["sites"]
        for node in site["nodes"]
        for gpu in node["gpus"]
        for s in gpu["slices"]
    }
    pool = pool_json(cli)
    assert drawn == {s["slice"]: s["state"] for n in pool["nodes"] for s in n["slices"]}
    assert [j["id"] for j in frame["jobs"]] == [small]
    assert [q["id"] for q in frame["queue"]] == [big]
    assert frame["totals"]["queued"] == 1 and frame["totals"]["down"] == 4
    assert (frame["totals"]["failed"], frame["totals"]["drained"]) == (0, 4)
    assert {s["site"] for s in frame["sites"]} == {"dubai", "singapore"}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.gpus: dict[str, str] = {}
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("data-gpu"):
            self.gpus[str(values["data-gpu"])] = str(values.get("data-state"))
        self.external += [str(values[k]) for k in ("src", "href") if values.get(k)]
        if tag in ("script", "link", "img"):
            self.external.append(tag)


def check_page(cli, small: str, _big: str, tmp_path) -> None:
    out = tmp_path / "status" / "pool.html"
    out.parent.mkdir()
    run = cli("-q", "pool", "--no-refresh", "--html", str(out))
    assert run.code == 0, run.stderr
    assert out.stat().st_mode & 0o777 == 0o644
    page = Page()
    page.feed(out.read_text())
    pool = pool_json(cli)
    cards = {s["slice"].split("/mig-")[0] for n in pool["nodes"] for s in n["slices"]}
    assert set(page.gpus) == cards
    assert {k for k, v in page.gpus.items() if v == "drained"} == {
        c for c in cards if c.startswith(DRAINED)
    }
    assert page.external == []
    assert small in out.read_text()
    assert "GPUs (4 drained)," in out.read_text()
    # A folder that is not there: one line naming it, exit 1, nothing half-written.
    bad = cli("-q", "pool", "--no-refresh", "--html", str(tmp_path / "nope" / "p.html"))
    assert bad.code == 1 and bad.stderr.count("\n") == 1 and "nope" in bad.stderr


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium (Debian's chromium) is not installed")
def test_the_pool_page_renders_in_a_headless_browser(busy_pool, tmp_path) -> None:
    from PIL import Image

    cli, _, _ = busy_pool
    out = tmp_path / "pool.html"
    assert cli("-q", "pool", "--no-refresh", "--html", str(out)).code == 0
    shot = tmp_path / "shot.png"
    subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600",
         f"--screenshot={shot}", out.as_uri()],
        capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert shot.exists(), "Chromium wrote no screenshot"
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colours = {rgb for _, rgb in image.resize((120, 160)).getcolors(maxcolors=1 << 16) or []}
    # The slices' fills (held orange, free green, drained grey) and text: a drawn page,
    # not a blank or an error page.
    near = lambda rgb, target: sum(abs(a - b) for a, b in zip(rgb, target, strict=True)) < 40  # noqa: E731
    assert any(near(c, (0xC9, 0xE7, 0xC1)) for c in colours), "no free (green) slice drawn"
    assert any(near(c, (0xF4, 0xB1, 0x83)) for c in colours), "no held (orange) slice drawn"
    assert len(colours) > 20


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--interval", "0s"], "--interval"),
        (["--interval", "soon"], "--interval"),
        (["--facts", "0.2s"], "--facts"),
        (["--filter", "colour=red"], "host=, owner= or team="),
        (["-o", "csv"], "no CSV form"),
    ],
)
def test_bad_top_options_are_one_line_and_exit_2(cli, args, words) -> None:
    run = cli("-q", "top", "--once", *args)
    assert run.code == 2, run.stderr
    assert words in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert "Traceback" not in run.stderr


def test_top_facts_adds_what_the_nodes_say_and_exit_3_for_a_silent_node(jobs_cli) -> None:
    assert jobs_cli("-q", "pool").code == 0
    run = jobs_cli("-q", "top", "--once", "--facts", "1m")
    assert run.code == 0, run.stderr
    gpu_lines = [line for line in run.stdout.splitlines() if line.startswith("    gpu")]
    assert gpu_lines and all("used " in line and "GiB" in line for line in gpu_lines)
    assert all(line.rstrip().endswith("C") for line in gpu_lines)  # the temperature
    assert "facts " in run.stdout.splitlines()[0]  # how old they are
    assert jobs_cli("-q", "sim", "fault", DRAINED, "node-down").code == 0
    down = jobs_cli("-q", "top", "--once", "--facts", "1m")
    assert down.code == 3, down.stderr
    assert f"{DRAINED}:" in down.stderr and "facts are not shown" in down.stderr
    assert f"  {DRAINED}  ok" in down.stdout  # still drawn, from the ledger
    others = [line for line in down.stdout.splitlines() if line.startswith("    gpu")]
    assert sum("used " in line for line in others) == len(others) - 4  # its 4 GPUs: no facts


LAYOUTS = str(Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml")


def test_top_counts_physical_cards_and_one_total_memory_with_or_without_facts(cli) -> None:
    """The bundled pool is 36 cards whatever they are cut into (an MI300X in DPX or CPX is
    one card, not two or eight), and its memory is the cards' as the nodes report it, the
    same total whether `top` read the nodes' facts or not."""
    assert cli("-q", "pool").code == 0
    facts = cli("-q", "inventory", "-o", "json")
    assert facts.code == 0, facts.stderr
    cards_mib = sum(g["memory_total_mib"] for h in facts.json()["hosts"]
                    for g in h["facts"]["gpus"])  # fmt: skip
    for config in ("mixed", "inference"):  # the MI300X hive in DPX, then CPX (64 GPUs)
        applied = cli("-q", "partition", "apply", "-f", LAYOUTS, "-c", config, "--yes")
        assert applied.code == 0, applied.stderr
        plain = cli("-q", "top", "--once", "-o", "json").json()["totals"]
        read = cli("-q", "top", "--once", "--facts", "1m", "-o", "json").json()["totals"]
        assert plain["gpus"] == read["gpus"] == 36, (config, plain, read)
        assert plain["memory_mib"] == read["memory_mib"] == cards_mib, (config, plain, read)
        head = cli("-q", "top", "--once").stdout.splitlines()[1]
        assert head.startswith("6 nodes, 36 GPUs, "), head
        assert f"of {cards_mib * 10 // 1024 / 10:.1f} GiB held" in head, head
