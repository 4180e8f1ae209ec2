"""The Ledger API on a real file: alloc/release/expiry, atomic batches, modes, messages."""

from __future__ import annotations

import copy
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupoolctl.errors import ExitCode
from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerError, NothingFits, slices_from_facts
from gpupoolctl.sched import JobRequest

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def make_slices(host: str = "n1") -> list[dict]:
    shapes = [("gpu0", "gpu", None, 81920), ("gpu1/mig-1g.10gb@0", "mig", "1g.10gb", 9984)]
    shapes += [
        ("gpu1/mig-1g.10gb@1", "mig", "1g.10gb", 9984),
        ("gpu1/mig-3g.40gb@4", "mig", "3g.40gb", 40448),
    ]
    return [
        {
            "id": f"{host}/{name}",
            "host": host,
            "kind": kind,
            "profile": profile,
            "memory_mib": mem,
            "uuid": f"U-{host}-{name}",
        }
        for name, kind, profile, mem in shapes
    ]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(tmp_path: Path, clock: Clock) -> Ledger:
    led = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="tester@box", clock=clock)
    led.refresh_slices(["n1"], make_slices())
    return led


def lines(led: Ledger) -> list[dict]:
    return [json.loads(x) for x in led.path.read_text().splitlines()]


def test_best_fit_takes_the_smallest_slice_and_is_deterministic(ledger):
    first = hold(ledger, JobRequest(memory_mib=9000), owner="alice").value
    assert first.slices == ["n1/gpu1/mig-1g.10gb@0"] and first.id == "a-2"
    second = hold(ledger, JobRequest(memory_mib=9000), owner="bob").value
    assert second.slices == ["n1/gpu1/mig-1g.10gb@1"]
    third = hold(ledger, JobRequest(memory_mib=9000), owner="carol").value
    assert third.slices == ["n1/gpu1/mig-3g.40gb@4"]
    assert hold(ledger, JobRequest(profile="gpu"), owner="dan").value.slices == ["n1/gpu0"]
    with pytest.raises(NothingFits) as caught:
        hold(ledger, JobRequest(), owner="eve")
    assert caught.value.exit_code == ExitCode.NO_CAPACITY


def test_multi_slice_alloc_is_one_record_all_or_nothing(ledger):
    with pytest.raises(NothingFits):
        hold(ledger, JobRequest(profile="1g.10gb", gpus=3), owner="alice")
    assert len(lines(ledger)) == 1  # nothing written
    held = hold(ledger, JobRequest(profile="1g.10gb", gpus=2), owner="alice").value
    assert len(held.slices) == 2
    assert [r["op"] for r in lines(ledger)] == ["slices", "alloc"]


def test_release_errors_say_why(ledger, clock):
    alloc = hold(ledger, JobRequest(profile="gpu"), owner="alice").value
    ledger.release(alloc.id)
    with pytest.raises(LedgerError, match="already released"):
        ledger.release(alloc.id)
    with pytest.raises(LedgerError, match="unknown allocation"):
        ledger.release("a-999")
    short = hold(ledger, JobRequest(profile="gpu"), owner="bob", ttl=timedelta(minutes=5)).value
    clock.now += timedelta(minutes=6)
    with pytest.raises(LedgerError, match="expired"):
        ledger.release(short.id)


def test_expired_holds_are_free_at_read_time_and_recorded_by_next_writer(ledger, clock):
    alloc = hold(ledger, JobRequest(profile="gpu"), owner="alice", ttl=timedelta(hours=8)).value
    assert alloc.expires == "2025-06-01T20:00:00.000Z"
    clock.now += timedelta(hours=8, seconds=1)
    view = ledger.read()
    assert view.state.holder("n1/gpu0", view.now) is None  # free, nothing written yet
    assert lines(ledger)[-1]["op"] == "alloc"
    again = hold(ledger, JobRequest(profile="gpu"), owner="bob").value
    assert again.slices == ["n1/gpu0"]
    tail = lines(ledger)[-2:]
    assert [r["op"] for r in tail] == ["expire", "alloc"]
    assert tail[0]["data"]["ids"] == [alloc.id]
    assert [r["batch"] for r in tail] == [[1, 2], [2, 2]]  # one all-or-nothing batch
    assert again.id == f"a-{tail[1]['seq']}"
    assert Ledger(ledger.path, durable=False).verify().ok


def test_failed_transaction_writes_nothing_and_state_stays_right(ledger):
    before = ledger.path.read_bytes()
    with pytest.raises(RuntimeError), ledger.transaction() as tx:
        tx.append("enqueue", {"id": "q-1", "owner": "alice", "request": {}})
        raise RuntimeError("changed my mind")
    assert ledger.path.read_bytes() == before
    assert ledger.read().state.queue == {}


def test_jobs_and_queue_records(ledger):
    with ledger.transaction() as tx:
        tx.append("enqueue", {"id": "q-2", "owner": "bob", "priority": 1, "request": {}})
        tx.append("enqueue", {"id": "q-3", "owner": "amy", "priority": 5, "request": {}})
    state = ledger.read().state
    assert [e["id"] for e in state.queue_order()] == ["q-3", "q-2"]
    with ledger.transaction() as tx:
        tx.append("dequeue", {"id": "q-3", "reason": "started"})
        tx.append("job", {"id": "j-1", "state": "running", "owner": "amy"})
    state = Ledger(ledger.path, durable=False).read().state
    assert list(state.queue) == ["q-2"] and state.jobs["j-1"]["state"] == "running"
    with ledger.transaction() as tx:
        tx.append("job", {"id": "j-1", "state": "done", "exit_code": 0})
    assert ledger.read().state.jobs == {}


def test_secrets_are_refused(ledger):
    with pytest.raises(LedgerError, match="secrets"), ledger.transaction() as tx:
        tx.append("job", {"id": "j-1", "state": "pending", "env": {"API_TOKEN": "x"}})


def test_files_are_private(ledger):
    hold(ledger, JobRequest(), owner="alice")
    ledger.compact()
    hold(ledger, JobRequest(), owner="alice")
    paths = ledger.paths
    for path in (paths.journal, paths.lock, paths.snapshot, *paths.archive_dir.iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_too_open_mode_is_tightened_with_a_warning(ledger):
    ledger.path.chmod(0o644)
    done = hold(ledger, JobRequest(), owner="alice")
    assert any("mode 644" in w for w in done.warnings)
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600


def test_default_location_is_xdg_state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    led = Ledger(durable=False)
    assert led.path == tmp_path / "state" / "gpupoolctl" / "ledger.jsonl"
    led.refresh_slices(["n1"], make_slices())
    assert stat.S_IMODE(led.path.parent.stat().st_mode) == 0o700


def test_named_folder_must_exist(tmp_path):
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger(tmp_path / "nope" / "l.jsonl").refresh_slices(["n1"], make_slices())


def test_refresh_writes_only_changes_and_orphans_show_in_verify(ledger):
    assert ledger.refresh_slices(["n1"], make_slices()).value is False
    alloc = hold(ledger, JobRequest(profile="3g.40gb"), owner="alice").value
    repartitioned = [s for s in make_slices() if "3g" not in s["id"]]
    assert ledger.refresh_slices(["n1"], repartitioned).value is True
    report = ledger.verify()
    assert not report.ok
    assert [(p.kind, p.where) for p in report.problems] == [("orphan", alloc.id)]
    ledger.release(alloc.id)
    assert ledger.verify().ok


def test_recreated_instance_with_new_uuid_is_an_orphan(ledger):
    alloc = hold(ledger, JobRequest(profile="3g.40gb"), owner="alice").value
    changed = [dict(s, uuid="U-new") if "3g" in s["id"] else s for s in make_slices()]
    ledger.refresh_slices(["n1"], changed)
    assert [p.where for p in ledger.verify().problems] == [alloc.id]


def test_two_handles_see_each_others_writes(tmp_path):
    one = Ledger(tmp_path / "l.jsonl", durable=False)
    two = Ledger(tmp_path / "l.jsonl", durable=False)
    one.refresh_slices(["n1"], make_slices())
    a = hold(two, JobRequest(profile="gpu"), owner="x").value
    with pytest.raises(NothingFits):
        hold(one, JobRequest(profile="gpu"), owner="y")
    two.compact()  # replaces the journal: `one` must notice and reload
    one.release(a.id)
    assert two.read().state.allocations == {}
    assert one.read().state == Ledger(tmp_path / "l.jsonl").read().state


def test_slices_from_facts_covers_every_kind():
    gpu = {"uuid": "GPU-a", "vendor": "nvidia", "model": "H100", "memory_total_mib": 81559}
    facts = {
        "gpus": [
            {**gpu, "index": 0, "mig": {"mode": "disabled", "instances": []}},
            {
                **gpu,
                "index": 1,
                "uuid": "GPU-b",
                "mig": {
                    "mode": "enabled",
                    "instances": [
                        {
                            "gi_id": 2,
                            "profile": "3g.40gb",
                            "placement_start": 4,
                            "memory_mib": 40448,
                            "compute_instances": [{"uuid": "MIG-x"}],
                        },
                        {
                            "gi_id": 1,
                            "profile": "1g.10gb",
                            "placement_start": 0,
                            "memory_mib": 9984,
                            "compute_instances": [],
                        },
                    ],
                },
            },
            {
                **gpu,
                "index": 2,
                "uuid": "GPU-c",
                "vendor": "amd",
                "partition": {"compute": "CPX", "memory": "NPS4"},
                "memory_total_mib": 24576,
            },
            {
                **gpu,
                "index": 3,
                "uuid": "GPU-d",
                "vendor": "amd",
                "partition": {"compute": "SPX", "memory": "NPS1"},
                "sriov": {"total_vfs": 8, "num_vfs": 2},
                "memory_total_mib": 196592,
            },
        ]
    }
    found = {s["id"]: s for s in slices_from_facts("h", facts)}
    assert list(found) == [
        "h/gpu0",
        "h/gpu1/mig-1g.10gb@0",
        "h/gpu1/mig-3g.40gb@4",
        "h/gpu2/cpx-nps4",
        "h/gpu3/vf0",
        "h/gpu3/vf1",
    ]
    assert found["h/gpu0"]["kind"] == "gpu" and found["h/gpu0"]["uuid"] == "GPU-a"
    assert found["h/gpu1/mig-3g.40gb@4"]["uuid"] == "MIG-x"
    assert found["h/gpu1/mig-1g.10gb@0"]["uuid"] == "GPU-b/gi1"
    cpx = found["h/gpu2/cpx-nps4"]
    assert cpx["kind"] == "partition" and cpx["profile"] == "CPX/NPS4"
    assert found["h/gpu3/vf1"]["memory_mib"] == 98296


def test_a_hold_on_a_whole_amd_card_ends_when_the_card_is_cut_into_partitions(ledger):
    whole = {"index": 0, "uuid": "GPU-m", "vendor": "amd", "memory_total_mib": 196592,
             "partition": {"compute": "SPX", "memory": "NPS1"}}  # fmt: skip
    ledger.refresh_from_facts([_Facts("m", {"gpus": [whole]})])
    held = hold(ledger, JobRequest(host="m"), owner="amy").value
    assert held.slices == ["m/gpu0"]
    # `partition apply --force` cut it to CPX: logical GPU 0 is now its first partition,
    # with the same index (and, on the simulator, the same uuid) as the whole card had.
    cut = [dict(whole, index=k, partition={"compute": "CPX", "memory": "NPS4"},
                memory_total_mib=24576) for k in range(8)]  # fmt: skip
    ledger.refresh_from_facts([_Facts("m", {"gpus": cut})])
    report = ledger.verify()
    assert not report.ok
    assert [(p.kind, p.where) for p in report.problems] == [("orphan", held.id)]
    assert "m/gpu0/cpx-nps4" in ledger.read().state.slices


class _Facts:
    def __init__(self, name: str, data: dict) -> None:
        self.name, self.data, self.ok = name, data, True


def test_alloc_records_the_slices_its_chooser_names_and_alloc_s_request_form(ledger) -> None:
    # The ledger records; the choice is the caller's (sched.alloc for `alloc`).
    held = ledger.alloc(lambda state, now: ["n1/gpu0"], owner="ann", request={"count": 1})
    assert held.value.slices == ["n1/gpu0"]
    done = hold(ledger, JobRequest(gpus=2, profile="1g.10gb", host="n*"), owner="bo")
    assert lines(ledger)[-1]["data"]["request"] == {
        "profile": "1g.10gb",
        "count": 2,
        "host": "n*",
    }
    assert done.value.slices == ["n1/gpu1/mig-1g.10gb@0", "n1/gpu1/mig-1g.10gb@1"]
    with pytest.raises(NothingFits, match=r"^nothing fits profile=1g.10gb, host=n\* x3: 0 "):
        hold(ledger, JobRequest(gpus=3, profile="1g.10gb", host="n*"), owner="cy")


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([], "no slice chosen"),
        (["n1/nope"], "unknown slice 'n1/nope'"),
        (["n1/gpu0"], "n1/gpu0 is held by a-"),
        (["n1/gpu1/mig-3g.40gb@4", "n1/gpu1/mig-3g.40gb@4"], "chosen twice"),
    ],
)
def test_alloc_refuses_a_choice_that_is_not_free(ledger, ids, message) -> None:
    ledger.alloc(lambda state, now: ["n1/gpu0"], owner="ann")
    before = lines(ledger)
    with pytest.raises(LedgerError, match=message):
        ledger.alloc(lambda state, now: ids, owner="bo")
    assert lines(ledger) == before  # nothing written


def test_verify_reports_a_recut_reservation_held_for_over_an_hour(ledger) -> None:
    """T0 is long past: a reservation made then (its pass died elsewhere) is named."""

    def reserve(tx) -> None:
        tx.append(
            "reshape",
            {"id": "r-9", "state": "reserved", "gpu": "n1/gpu0", "host": "n1", "index": 0},
        )

    ledger.write(reserve)
    problems = ledger.verify().problems
    assert [(p.kind, p.where) for p in problems] == [("reshape", "r-9")]
    assert "n1/gpu0" in problems[0].message and "since 2025-06-01T12:00" in problems[0].message

    def close(tx) -> None:
        tx.append("reshape", {"id": "r-9", "state": "failed", "gpu": "n1/gpu0", "host": "n1"})

    ledger.write(close)
    assert ledger.verify().problems == []


def test_text_that_is_not_utf8_is_a_usage_error_naming_the_field_and_changes_nothing(
    tmp_path,
) -> None:
    from gpupoolctl.errors import UsageError
    from gpupoolctl.ledger import Ledger

    led = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="ann@ws")
    led.write(lambda tx: tx.append("enqueue", {"id": "q-1", "owner": "ann", "request": {}}))
    before = copy.deepcopy(led.read().state)
    with pytest.raises(UsageError) as caught:
        led.write(
            lambda tx: tx.append(
                "enqueue", {"id": "q-2", "owner": "ann", "request": {"argv": ["x", "\udcff"]}}
            )
        )
    assert str(caught.value).startswith("cannot record enqueue.request.argv[1]: it is not valid")
    assert led.read().state == before  # the cached state forgot the record it had applied
    led.write(lambda tx: tx.append("enqueue", {"id": "q-3", "owner": "ann", "request": {}}))
    assert set(Ledger(tmp_path / "ledger.jsonl").read().state.queue) == {"q-1", "q-3"}
    assert Ledger(tmp_path / "ledger.jsonl").verify().ok
