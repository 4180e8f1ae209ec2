"""`gpupoolctl health` and `sim fault` end to end on the bundled simulated pool: a fault
injected on a card shows through the real drivers, `--drain` drains what failed with source
health and lifts it once the card is healthy again, never an admin's drain; a node that is
down is unreachable (exit 3); bad fault specs are one-line usage errors."""

from __future__ import annotations

DGX = "sg-dgx01"


def gpus_of(run) -> dict[str, dict]:
    return {g["card"]: g for g in run.json()["gpus"]}


def test_fault_health_drain_and_lift(cli) -> None:
    healthy = cli("-q", "health", "-l", DGX, "-o", "json")
    assert healthy.code == 0, healthy.stderr
    assert {g["verdict"] for g in healthy.json()["gpus"]} == {"ok"}

    assert cli("-q", "sim", "fault", f"{DGX}/gpu2", "xid=79").code == 0
    sick = cli("-q", "health", "-l", DGX, "-o", "json")
    assert sick.code == 4, sick.stderr
    gpu2 = gpus_of(sick)[f"{DGX}/gpu2"]
    assert gpu2["verdict"] == "failed" and gpu2["action"] == "RESTART_BM"
    assert gpu2["reasons"] == ["XID 79 (GPU has fallen off the bus)"]
    assert gpu2["uuid"].startswith("GPU-") and gpu2["model"] and gpu2["unknown"] == []
    assert all(g["verdict"] == "ok" for c, g in gpus_of(sick).items() if c != f"{DGX}/gpu2")
    table = cli("-q", "health", "-l", DGX)
    assert table.code == 4 and "XID 79" in table.stdout and "RESTART_BM" in table.stdout

    assert cli("-q", "drain", f"{DGX}/gpu5", "--reason", "fan noise").code == 0
    drained = cli("-q", "health", "-l", DGX, "--drain", "-o", "json")
    assert drained.code == 4, drained.stderr
    assert drained.json()["drains"]["drained"] == [
        {"target": f"{DGX}/gpu2", "reason": "health: XID 79 (GPU has fallen off the bus)"}
    ]
    listed = {d["target"]: d for d in cli("-q", "drain", "-o", "json").json()}
    assert listed[f"{DGX}/gpu2"]["source"] == "health"
    assert listed[f"{DGX}/gpu5"]["source"] == "admin"

    assert cli("-q", "sim", "fault", f"{DGX}/gpu2", "--clear").code == 0
    lifted = cli("-q", "health", "-l", DGX, "--drain", "-o", "json")
    assert lifted.code == 0, lifted.stderr
    assert lifted.json()["drains"]["undrained"] == [f"{DGX}/gpu2"]
    listed = {d["target"]: d for d in cli("-q", "drain", "-o", "json").json()}
    assert list(listed) == [f"{DGX}/gpu5"]  # the admin's drain stays, the card being ok


def test_node_down_is_unreachable_and_clear_brings_it_back(cli) -> None:
    assert cli("-q", "sim", "fault", DGX, "node-down").code == 0
    down = cli("-q", "health", "-l", f"{DGX},sg-dgx02", "-o", "json")
    assert down.code == 3, down.stderr
    assert down.json()["hosts"][0]["host"] == DGX
    assert down.json()["hosts"][0]["outcome"] == "unreachable"
    assert {g["host"] for g in down.json()["gpus"]} == {"sg-dgx02"}
    inventory = cli("-q", "inventory", "-l", DGX)
    assert inventory.code == 3 and "unreachable" in inventory.stderr
    # A failed GPU elsewhere wins over the unreachable host: 4 before 3.
    assert cli("-q", "sim", "fault", "sg-dgx02/gpu0", "lost").code == 0
    assert cli("-q", "health", "-l", f"{DGX},sg-dgx02").code == 4
    assert cli("-q", "sim", "fault", DGX, "--clear").code == 0
    back = cli("-q", "health", "-l", DGX)
    assert back.code == 0, back.stderr


def test_bad_fault_specs_are_usage_errors(cli) -> None:
    for args in (
        (f"{DGX}/gpu2", "xid=abc"),
        (f"{DGX}/gpu2", "bogus"),
        (f"{DGX}/gpu99", "xid=79"),  # the node says it has no such GPU
        (f"{DGX}/card2", "xid=79"),
        (f"{DGX}/gpu2", "ecc-deferred=1"),  # an AMD fault on an NVIDIA card
        (DGX, "xid=79"),  # a GPU's fault on a host
        ("no-such-host", "xid=79"),
        (f"{DGX}/gpu2",),
    ):
        run = cli("-q", "sim", "fault", *args)
        assert run.code == 2, (args, run.stdout, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "Traceback" not in run.stderr


def test_a_node_lost_is_told_by_when_it_last_answered_not_by_the_first_failed_poll(
    jobs_cli, tmp_path
) -> None:
    """Each pass is its own process (cron's `schedule`): the ledger keeps when the node last
    answered, and a node lost says that time, as the drain, the pass and `top` show it."""
    policy = tmp_path / "health.yaml"
    policy.write_text("version: 1\nhealth:\n  node-dead-after: 90s\n")

    def at(clock: str) -> dict[str, str]:
        return {"GPUPOOL_NOW": f"2026-12-07T10:{clock}Z"}

    loop = ["-q", "--pool-policy", str(policy)]
    run = jobs_cli(*loop, "-l", DGX, "submit", "--", "sleep", "600", extra_env=at("00:00"))
    assert run.code == 0, run.stderr
    job_id = run.stdout.strip()
    assert jobs_cli(*loop, "schedule", extra_env=at("00:30")).code == 0  # it answers
    assert jobs_cli("-q", "sim", "fault", DGX, "node-down").code == 0
    silent = jobs_cli(*loop, "schedule", extra_env=at("01:00"))  # the first failed poll
    assert silent.code == 3 and DGX in silent.stderr, silent.stderr
    lost = jobs_cli(*loop, "-o", "json", "schedule", extra_env=at("02:30"))
    (event,) = [e for e in lost.json() if e["event"] == "node-lost"]
    assert event["answered"] == "2026-12-07T10:00:30.000Z", event
    assert event["since"] == "2026-12-07T10:01:00.000Z"  # what node-dead-after counted from

    drains = {d["target"]: d for d in jobs_cli("-q", "drain", "-o", "json").json()}
    reason = drains[DGX]["reason"]
    assert reason.startswith("node lost: no answer since 2026-12-07T10:00:30.000Z"), reason
    ended = {j["id"]: j for j in jobs_cli("-q", "jobs", "--all", "--no-refresh", "-o",
                                          "json").json()}  # fmt: skip
    assert ended[job_id]["state"] == "failed"
    assert f"{DGX} did not answer for 2m" in ended[job_id]["reason"], ended[job_id]
    top = jobs_cli("-q", "top", "--once", extra_env=at("02:40"))
    assert "lost: no answer since 2026-12-07T10:00:30.000Z" in top.stdout, top.stdout
