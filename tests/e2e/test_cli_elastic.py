"""The elastic pool end to end on the bundled simulated pool: small work waits behind whole
cards, a scheduling pass re-cuts an idle H100 through the sim's NVML, the work runs on MIG
devices, the ledger shows the reshape; a re-cut that fails mid-way is rolled back."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.users import ALICE, named

PY = sys.executable
DGX = "sg-dgx01"  # eight whole H100 cards, MIG off (Hopper: MIG may be switched on idle)
PRINT_DEVICES = (
    "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(30)"
)


def write_policy(folder: Path, *, batch_window: str) -> Path:
    path = folder / "pool.yaml"
    path.write_text(
        "version: 1\n"
        "elastic:\n"
        "  min-idle: 0s\n"
        f"  batch-window: {batch_window}\n"
        "  max-cards-per-pass: 1\n"
        "  rules:\n"
        f"    - hosts: {DGX}\n"
        "      profiles: [1g.10gb, 3g.40gb]\n"
    )
    return path


def reshapes(cli) -> list[dict[str, Any]]:
    run = cli("-q", "ledger", "show", "--op", "reshape", "-o", "json")
    assert run.code == 0, run.stderr
    return [r["data"] for r in run.json()]


def job(cli, job_id: str, policy: Path) -> dict[str, Any]:
    run = cli("-q", "--pool-policy", str(policy), "jobs", "--all", "--no-refresh", "-o", "json")
    assert run.code == 0, run.stderr
    return {j["id"]: j for j in run.json()}[job_id]


def dgx_slices(cli) -> list[dict[str, Any]]:
    run = cli("-q", "pool", "--no-refresh", "-o", "json")
    assert run.code == 0, run.stderr
    return [s for n in run.json()["nodes"] if n["host"] == DGX for s in n["slices"]]


def test_small_work_waits_behind_whole_cards_then_schedule_recuts_an_idle_card(
    jobs_cli, tmp_path: Path
) -> None:
    waiting = write_policy(tmp_path, batch_window="1h")
    args = ["-l", DGX, "submit", "--mem", "10G", "--", PY, "-c", PRINT_DEVICES]
    run = jobs_cli("--pool-policy", str(waiting), *args)
    assert run.code == 0, run.stderr
    job_id = run.stdout.strip()
    queued = job(jobs_cli, job_id, waiting)
    # Not on a whole 80 GB card: elastic keeps them to be cut, and the batch window holds.
    assert queued["state"] == "queued", queued
    assert queued["reason"].startswith(f"waits for a re-cut: re-cut idle {DGX}/gpu"), queued
    assert "(batch window), next `schedule` pass" in queued["reason"], queued
    assert reshapes(jobs_cli) == []
    assert all(s["kind"] == "gpu" for s in dgx_slices(jobs_cli))

    ready = write_policy(tmp_path, batch_window="0s")
    dry = jobs_cli(
        "-q", "--pool-policy", str(ready), "-l", DGX, "submit", "--mem", "10G", "--dry-run",
        "--", "true",
    )  # fmt: skip
    assert dry.code == 0, dry.stderr
    assert dry.stdout.startswith(f"would re-cut idle {DGX}/gpu"), dry.stdout
    assert "(whole card" in dry.stdout and "into 7 x 1g.10gb and take one" in dry.stdout

    plan = jobs_cli("-q", "--pool-policy", str(ready), "-o", "json", "schedule", "--dry-run")
    assert plan.code == 0, plan.stderr
    decided = plan.json()
    assert [e["event"] for e in decided] == ["would-re-cut", "waiting"], decided
    would, waits = decided
    assert would["job"] == job_id and waits["job"] == job_id
    assert waits["reason"].startswith(f"waits for a re-cut: re-cut idle {would['gpu']} ")
    assert would["before"] == "whole card" and would["after"] == "7 x 1g.10gb"
    assert reshapes(jobs_cli) == []  # a dry run changes nothing

    run = jobs_cli("--pool-policy", str(ready), "-o", "json", "schedule")
    assert run.code == 0, run.stderr
    events = {e["event"]: e for e in run.json()}
    assert events["reshaped"]["gpu"] == would["gpu"]
    assert events["reshaped"]["before"] == "whole card", events
    assert events["reshaped"]["after"] == "7 x 1g.10gb"
    assert events["reshaped"]["jobs"] == [job_id]
    assert events["started"]["job"] == job_id

    records = reshapes(jobs_cli)
    assert [r["state"] for r in records] == ["reserved", "done"]
    gpu = records[0]["gpu"]
    assert gpu.startswith(f"{DGX}/gpu") and records[1]["gpu"] == gpu
    assert records[0]["jobs"] == [job_id] and records[0]["reason"]
    cut = [s for s in dgx_slices(jobs_cli) if s["slice"].startswith(gpu + "/")]
    assert sorted(s["profile"] for s in cut) == ["1g.10gb"] * 7
    running = job(jobs_cli, job_id, ready)
    assert running["state"] == "running" and running["slice"].startswith(gpu + "/mig-1g.10gb@")
    output = ""
    for _ in range(50):
        output = jobs_cli("-q", "logs", job_id).stdout
        if output:
            break
    assert output.startswith("MIG-"), output  # the job sees only its MIG device

    metrics = jobs_cli("-q", "export", "prometheus")
    assert metrics.code == 0, metrics.stderr
    assert 'gpupoolctl_reshapes_total{outcome="done"} 1' in metrics.stdout


def test_a_recut_failing_midway_is_rolled_back_and_the_work_stays_queued(
    jobs_cli, tmp_path: Path
) -> None:
    ready = write_policy(tmp_path, batch_window="0s")
    assert jobs_cli("-q", "sim", "reset").code == 0
    state_file = Path(jobs_cli.sim_dir) / f"{DGX}.json"
    state = json.loads(state_file.read_text())
    # The third GPU instance of the new layout cannot be created (on any GPU of the node).
    state["nvidia"]["faults"] = [
        {"op": "create_gpu_instance", "nth": 3, "times": 1, "error": "InsufficientResources"}
    ]
    state_file.write_text(json.dumps(state))

    run = jobs_cli(
        "--pool-policy", str(ready), "-l", DGX, "submit", "--mem", "10G", "--", PY, "-c",
        PRINT_DEVICES,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    job_id = run.stdout.strip()
    records = reshapes(jobs_cli)
    assert [r["state"] for r in records] == ["reserved", "failed"], records
    assert "rolled back" in records[1]["error"]
    gpu = records[0]["gpu"]
    # Rolled back: the card is whole again, exactly as before, and the job still waits.
    assert [s["kind"] for s in dgx_slices(jobs_cli) if s["slice"] == gpu] == ["gpu"]
    assert job(jobs_cli, job_id, ready)["state"] == "queued"

    # The next pass leaves the failed card alone (back-off) and cuts another one.
    run = jobs_cli("--pool-policy", str(ready), "-o", "json", "schedule")
    assert run.code == 0, run.stderr
    done = [r for r in reshapes(jobs_cli) if r["state"] == "done"]
    assert len(done) == 1 and done[0]["gpu"] != gpu
    assert job(jobs_cli, job_id, ready)["state"] == "running"
    metrics = jobs_cli("-q", "export", "prometheus").stdout
    assert 'gpupoolctl_reshapes_total{outcome="failed"} 1' in metrics


def test_schedule_watch_runs_bounded_passes_and_a_bad_policy_is_one_line(
    jobs_cli, tmp_path: Path
) -> None:
    watch = jobs_cli("-o", "json", "schedule", "--watch", "0.1s", "--passes", "2")
    assert watch.code == 0, watch.stderr
    passes = [json.loads(line) for line in watch.stdout.splitlines()]
    assert len(passes) == 2 and all(p["events"] == [] and p["at"] for p in passes)
    assert jobs_cli("schedule", "--passes", "2").code == 2  # --passes needs --watch

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nelastic:\n  min-idle: soon\n")
    run = jobs_cli("-q", "--pool-policy", str(bad), "schedule")
    assert run.code == 1
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{bad}:3" in lines[0], run.stderr


def test_a_pass_killed_mid_recut_leaves_a_reservation_the_next_pass_closes(
    jobs_cli, tmp_path: Path
) -> None:
    ready = write_policy(tmp_path, batch_window="0s")
    crashed = jobs_cli(
        "--pool-policy", str(ready), "-l", DGX, "submit", "--mem", "10G", "--", PY, "-c",
        PRINT_DEVICES, extra_env={"GPUPOOL_TEST_CRASH_AFTER": "reshape-applied"},
    )  # fmt: skip
    assert crashed.code == -9, crashed.stderr  # killed after the node re-cut the card
    (reserved,) = reshapes(jobs_cli)
    assert reserved["state"] == "reserved"
    gpu = reserved["gpu"]
    # While reserved, nothing may be placed on the card: its old slice is not free.
    held = [s for s in dgx_slices(jobs_cli) if s["slice"] == gpu]
    assert [s["state"] for s in held] == ["re-cutting"], held

    run = jobs_cli("--pool-policy", str(ready), "-o", "json", "schedule")
    assert run.code == 0, run.stderr
    closed = reshapes(jobs_cli)[-1]
    assert closed["id"] == reserved["id"] and closed["state"] == "failed"
    assert "interrupted" in closed["error"]
    # The node had finished the re-cut: the slices read again are the new layout's, and the
    # waiting job runs on one of them.
    cut = [s for s in dgx_slices(jobs_cli) if s["slice"].startswith(gpu + "/mig-")]
    assert len(cut) == 7
    queued = [j for j in jobs_cli("-q", "jobs", "--all", "-o", "json").json()]
    assert [j["state"] for j in queued] == ["running"] and queued[0]["slice"].startswith(gpu)


def test_an_amd_hive_is_cut_for_small_work_and_made_whole_again_for_a_whole_card_job(
    jobs_cli, tmp_path: Path
) -> None:
    # The modes the hive may take, whole (SPX) among them: a mode not listed is never made.
    policy = tmp_path / "amd.yaml"
    policy.write_text(
        "version: 1\nelastic:\n  min-idle: 0s\n  batch-window: 0s\n  rules:\n"
        "    - vendor: amd\n      amd-modes: [spx/nps1, cpx/nps4, dpx/nps2]\n"
    )
    mi300x = "dxb-mi300x-01"
    small = jobs_cli(
        "--pool-policy", str(policy), "submit", "--vendor", "amd", "--mem", "20G", "--",
        PY, "-c", "import time; time.sleep(30)",
    )  # fmt: skip
    assert small.code == 0, small.stderr
    small_id = small.stdout.strip()
    [reserved, done] = reshapes(jobs_cli)
    assert reserved["state"] == "reserved"
    assert done["state"] == "done" and done["gpu"] == f"{mi300x}/amd-island0"
    assert done["before"] == "8 cards x SPX/NPS1"
    assert done["after"] == "8 cards x CPX/NPS4 (64 x 24 GiB)"
    running = job(jobs_cli, small_id, policy)
    assert running["state"] == "running" and running["slice"].endswith("/cpx-nps4")
    pool = jobs_cli("-q", "pool", "--no-refresh", "-o", "json").json()
    (node,) = [n for n in pool["nodes"] if n["host"] == mi300x]
    assert node["total"] == 64

    assert jobs_cli("-q", "cancel", small_id, "--grace", "1").code == 0
    whole = jobs_cli(
        "--pool-policy", str(policy), "submit", "--vendor", "amd", "--profile", "gpu",
        "--gpus", "2", "--same-node", "--", PY, "-c", "import time; time.sleep(30)",
    )  # fmt: skip
    assert whole.code == 0, whole.stderr
    merged = reshapes(jobs_cli)[-1]
    assert merged["state"] == "done" and merged["after"] == "8 cards x SPX/NPS1", merged
    started = job(jobs_cli, whole.stdout.strip(), policy)
    assert started["state"] == "running" and started["slice"].count(",") == 1
    assert all("/" not in s.split(f"{mi300x}/")[1] for s in started["slice"].split(","))


def test_a_team_job_no_partition_holds_today_waits_for_a_recut_of_its_teams_cards(
    shared_cli,
) -> None:
    # The team may use AMD cards only, and the MI300X hive is cut into 24 GB partitions:
    # no slice the team may use holds 40 GB today, but a re-cut of its hive would. Such a
    # job is queued and gets the re-cut, not refused as never fitting (exit 5).
    mi300x = "dxb-mi300x-01"
    policy = shared_cli.tmp / "teams.yaml"
    policy.write_text(
        named(
            "version: 1\nelastic:\n  min-idle: 0s\n  batch-window: 0s\n  rules:\n"
            "    - vendor: amd\n      amd-modes: [spx/nps1, cpx/nps4, dpx/nps2]\n"
            "teams:\n  serve:\n    members: [alice]\n"
            "    quota: [{vendor: amd, nominal: {gpu-memory: 1536GiB}}]\n"
        )
    )
    small = shared_cli(
        "--pool-policy", str(policy), "submit", "--vendor", "amd", "--mem", "20G", "--",
        PY, "-c", "import time; time.sleep(30)", user=ALICE,
    )  # fmt: skip
    assert small.code == 0, small.stderr
    # Long enough that it is still running when cancelled, however slow the machine.
    assert reshapes(shared_cli)[-1]["after"] == "8 cards x CPX/NPS4 (64 x 24 GiB)"
    assert shared_cli("-q", "cancel", small.stdout.strip(), "--grace", "0").code == 0

    big = shared_cli(
        "--pool-policy", str(policy), "submit", "--vendor", "amd", "--mem", "40G", "--",
        PY, "-c", "import time; time.sleep(30)", user=ALICE,
    )  # fmt: skip
    assert big.code == 0, big.stderr
    merged = reshapes(shared_cli)[-1]
    assert merged["state"] == "done" and merged["gpu"] == f"{mi300x}/amd-island0", merged
    assert merged["before"] == "8 cards x CPX/NPS4 (64 x 24 GiB)"
    started = job(shared_cli, big.stdout.strip(), policy)
    assert started["state"] == "running" and started["slice"].startswith(f"{mi300x}/")


def test_same_island_work_no_island_could_hold_even_re_cut_is_refused_at_submit(
    jobs_cli, tmp_path: Path
) -> None:
    """The DGX's island is 8 H100s; cut into 1g.10gb each gives 7: 56 slices in all. A
    same-island job of 57 could never run, however the island is cut: refused at once
    (exit 5, one line) instead of waiting for ever. 56 is queued for the re-cut."""
    policy = write_policy(tmp_path, batch_window="1h")
    base = ["-q", "--pool-policy", str(policy), "submit", "--same-island", "-l", DGX]
    run = jobs_cli(*base, "--gpus", "57", "--mem", "10G", "--", "true")
    assert run.code == 5, run.stderr
    assert "never" in run.stderr and "same island" in run.stderr, run.stderr
    # The most a re-cut could give, not only the 8 whole cards there are now.
    assert f"nor re-cut (the most on one island: 56 on {DGX}/island0)" in run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    run = jobs_cli(*base, "--gpus", "56", "--mem", "10G", "--", "true")
    assert run.code == 0, run.stderr
    assert job(jobs_cli, run.stdout.strip(), policy)["state"] == "queued"


def test_same_node_work_no_node_could_hold_even_re_cut_is_refused_at_submit(
    jobs_cli, tmp_path: Path
) -> None:
    """An elastic pool keeps work that a re-cut could serve waiting; a same-node job larger
    than any node, re-cut or not, is refused at once (exit 5, one line), not queued."""
    policy = write_policy(tmp_path, batch_window="1h")
    base = ["-q", "--pool-policy", str(policy), "submit", "--same-node"]
    run = jobs_cli(*base, "--gpus", "64", "--mem", "10G", "--", "true")
    assert run.code == 5, run.stderr
    assert "never" in run.stderr and run.stderr.count("\n") == 1, run.stderr
    # The control: one that a re-cut of the DGX node's cards could hold is queued.
    run = jobs_cli(*base, "--gpus", "14", "--mem", "10G", "-l", DGX, "--", "true")
    assert run.code == 0, run.stderr
    assert job(jobs_cli, run.stdout.strip(), policy)["state"] == "queued"


POOL_POLICY = Path(__file__).resolve().parents[2] / "playbooks" / "pool.yaml"
T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
WHEN_DUE = "next `schedule` pass or `submit`/`jobs` acts then"


def at(seconds: float) -> dict[str, str]:
    """The ledger's clock, `seconds` after T0: time passes in the test without a sleep."""
    return {"GPUPOOL_NOW": (T0 + timedelta(seconds=seconds)).isoformat()}


def test_the_dry_run_and_the_waiting_job_say_when_the_batch_window_lets_the_re_cut_happen(
    jobs_cli,
) -> None:
    """playbooks/pool.yaml: batch-window 30s. `submit --dry-run` says what the real submit
    then does (wait, for which re-cut, for how long and why), in the same words; `jobs`
    counts down; the pass at the end of the window makes that re-cut and starts the job."""
    policy = ["--pool-policy", str(POOL_POLICY), "-l", DGX]
    waits = (
        f"waits for a re-cut: re-cut idle {DGX}/gpu0 (whole card) into 7 x 1g.10gb "
        f"in 30s (batch window), {WHEN_DUE}"
    )
    dry = jobs_cli("-q", *policy, "submit", "--mem", "10G", "--dry-run", "--", "true",
                   extra_env=at(0))  # fmt: skip
    assert dry.code == 0, dry.stderr
    assert dry.stdout.strip() == f"would wait in the queue: {waits}"
    doc = jobs_cli("-q", *policy, "-o", "json", "submit", "--mem", "10G", "--dry-run", "--",
                   "true", extra_env=at(0)).json()  # fmt: skip
    assert doc["reason"] == waits
    assert doc["recut"]["in_s"] == 30 and doc["recut"]["held_by"] == "batch window"
    assert reshapes(jobs_cli) == []  # a dry run changes nothing

    run = jobs_cli(*policy, "submit", "--mem", "10G", "--", PY, "-c", PRINT_DEVICES,
                   extra_env=at(0))  # fmt: skip
    assert run.code == 0, run.stderr
    job_id = run.stdout.strip()
    assert f"{job_id}: queued: {waits}" in run.stderr  # word for word what the dry run said

    listed = jobs_cli("-q", *policy, "jobs", "-o", "json", extra_env=at(5)).json()
    assert [j["reason"] for j in listed] == [waits.replace("in 30s", "in 25s")]
    early = jobs_cli("-q", *policy, "-o", "json", "schedule", extra_env=at(29.5))
    assert [e["event"] for e in early.json()] == ["waiting"] and reshapes(jobs_cli) == []
    assert "in 1s (batch window)" in early.json()[0]["reason"]

    due = jobs_cli("-q", *policy, "-o", "json", "schedule", extra_env=at(30))
    assert due.code == 0, due.stderr
    events = {e["event"]: e for e in due.json()}
    assert events["reshaped"]["gpu"] == f"{DGX}/gpu0" and events["reshaped"]["jobs"] == [job_id]
    assert events["started"]["job"] == job_id


def test_a_card_given_back_a_minute_ago_is_re_cut_when_its_min_idle_has_passed(
    jobs_cli,
) -> None:
    """playbooks/pool.yaml: min-idle 5m. Every card of the node was given back a minute ago:
    the reason says the re-cut waits 4 more minutes for min-idle, not the batch window."""
    policy = ["--pool-policy", str(POOL_POLICY), "-l", DGX]
    run = jobs_cli("-q", *policy, "submit", "--gpus", "8", "--", "sleep", "600", extra_env=at(0))
    assert run.code == 0, run.stderr
    assert jobs_cli("-q", "cancel", run.stdout.strip(), extra_env=at(60)).code == 0

    waits = (
        f"waits for a re-cut: re-cut idle {DGX}/gpu0 (whole card, idle 60 s) into "
        f"7 x 1g.10gb in 4m (min-idle), {WHEN_DUE}"
    )
    dry = jobs_cli("-q", *policy, "submit", "--mem", "10G", "--dry-run", "--", "true",
                   extra_env=at(120))  # fmt: skip
    assert dry.stdout.strip() == f"would wait in the queue: {waits}", dry.stderr
    small = jobs_cli(*policy, "submit", "--mem", "10G", "--", PY, "-c", PRINT_DEVICES,
                     extra_env=at(120))  # fmt: skip
    assert small.code == 0, small.stderr
    assert f"queued: {waits}" in small.stderr

    # The batch window (30s) has long passed; min-idle has not, until 10:06.
    early = jobs_cli("-q", *policy, "-o", "json", "schedule", extra_env=at(359))
    assert "in 1s (min-idle)" in early.json()[-1]["reason"] and reshapes(jobs_cli) == []
    due = jobs_cli("-q", *policy, "-o", "json", "schedule", extra_env=at(360))
    events = {e["event"]: e for e in due.json()}
    assert events["started"]["job"] == small.stdout.strip(), due.json()


def test_submit_wait_says_once_what_it_waits_for_while_the_countdown_runs(
    jobs_cli, tmp_path: Path
) -> None:
    """`submit --wait` runs a pass every second while the job waits: the re-cut it waits for
    is told once, not again at every tick of its countdown; then the job runs."""
    policy = write_policy(tmp_path, batch_window="3s")  # real seconds: --wait's own passes
    run = jobs_cli("--pool-policy", str(policy), "-l", DGX, "submit", "--wait", "--mem", "10G",
                   "--", PY, "-c", "print('ran')")  # fmt: skip
    assert run.code == 0, run.stderr
    assert run.stdout == "ran\n"
    told = [line for line in run.stderr.splitlines() if ": queued: " in line]
    assert len(told) == 1, run.stderr
    assert "waits for a re-cut: re-cut idle" in told[0] and "(batch window)" in told[0]
