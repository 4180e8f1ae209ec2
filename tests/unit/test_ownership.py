"""Ownership: only an allocation's or a job's owner, or a pool admin, may release, cancel or
drain --now it; an admin's act on another user's work is recorded as such."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpupoolctl.jobs import Jobs, Nodes, cancelling, submitting
from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.jobs.draining import drain_now
from gpupoolctl.ledger import Ledger
from gpupoolctl.policy.actor import is_pool_admin, unix_groups
from gpupoolctl.policy.model import Admins
from gpupoolctl.policy.ownership import NotOwner, as_admin, refusal, refusal_of_many
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest
from tests.unit.test_jobs_service import SLICES, FakeNode, spec, state_of

# -- the pure check ------------------------------------------------------------------------


def test_owner_and_admin_may_others_may_not() -> None:
    assert refusal("cancel", "job", "j-42", "alice", user="alice", admin=False) is None
    assert refusal("cancel", "job", "j-42", "alice", user="bob", admin=True) is None
    message = refusal("cancel", "job", "j-42", "alice", user="bob", admin=False)
    assert message == (
        "cancel j-42: it is alice's job; only alice or a pool admin may cancel it "
        "(pool admins: the admins: section of the pool policy file)"
    )
    assert "\n" not in message


def test_work_without_an_owner_is_for_admins_only() -> None:
    message = refusal("release", "allocation", "a-3", None, user="bob", admin=False)
    assert message is not None and "no recorded owner" in message and "a-3" in message
    assert refusal("release", "allocation", "a-3", None, user="root", admin=True) is None


def test_as_admin_only_when_the_work_is_someone_elses() -> None:
    assert as_admin("alice", user="bob", admin=True)
    assert not as_admin("bob", user="bob", admin=True)  # an admin's own work: plain
    assert not as_admin("alice", user="alice", admin=False)


def test_a_refusal_over_many_names_the_first_few_others() -> None:
    works = [("j-1", "bob"), ("j-2", "alice"), ("j-3", "carol"), ("j-4", "dan"), ("j-5", "eve")]
    assert refusal_of_many("drain --now n1", "stop", "job", works, user="x", admin=True) is None
    assert (
        refusal_of_many("drain --now n1", "stop", "job", works[:1], user="bob", admin=False) is None
    )
    message = refusal_of_many("drain --now n1", "stop", "job", works, user="bob", admin=False)
    assert message is not None and "\n" not in message
    assert message.startswith(
        "drain --now n1: it would stop other users' jobs: j-2 (alice's), j-3 (carol's), "
        "j-4 (dan's) and 1 more; only their owners or a pool admin may stop them"
    )
    assert "j-1" not in message and "j-5" not in message


# -- who is acting: groups and admins ------------------------------------------------------


def _passwd(users: dict[str, int]):
    def getpwnam(name: str) -> Any:
        if name not in users:
            raise KeyError(name)
        return SimpleNamespace(pw_gid=users[name])

    return getpwnam


def _groups(names: dict[int, str]):
    def getgrgid(gid: int) -> Any:
        if gid not in names:
            raise KeyError(gid)
        return SimpleNamespace(gr_name=names[gid])

    return getgrgid


def test_unix_groups_are_the_primary_and_supplementary_ones_by_name() -> None:
    asked: list[tuple[str, int]] = []

    def getgrouplist(user: str, gid: int) -> list[int]:
        asked.append((user, gid))
        return [100, 27, 999]  # 999 has no name: left out

    found = unix_groups(
        "alice",
        getpwnam=_passwd({"alice": 100}),
        getgrouplist=getgrouplist,
        getgrgid=_groups({100: "users", 27: "gpu-admins"}),
    )
    assert found == frozenset({"users", "gpu-admins"})
    assert asked == [("alice", 100)]


def test_unix_groups_of_a_user_without_a_passwd_entry_is_empty() -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("not asked")

    found = unix_groups("1234", getpwnam=_passwd({}), getgrouplist=never, getgrgid=never)
    assert found == frozenset()


def test_unix_groups_of_root_on_this_machine() -> None:
    assert "root" in unix_groups("root")  # the real pwd/grp/getgrouplist path


def test_pool_admin_by_name_by_group_and_root() -> None:
    admins = Admins(users=("carol",), groups=("gpu-admins",))
    member = {"bob": frozenset({"gpu-admins"})}

    def groups(user: str) -> frozenset[str]:
        return member.get(user, frozenset())

    assert is_pool_admin(admins, "carol", groups)
    assert is_pool_admin(admins, "bob", groups)
    assert not is_pool_admin(admins, "alice", groups)
    assert is_pool_admin(Admins(), "root", groups)
    assert not is_pool_admin(Admins(), "bob", groups)  # no section: nobody but root


# -- the ledger: release -------------------------------------------------------------------


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger(tmp_path / "ledger.jsonl", durable=False)
    led.refresh_slices(["n1"], SLICES)
    return led


def test_ledger_release_of_anothers_allocation_is_refused_and_nothing_appended(ledger) -> None:
    held = hold(ledger, JobRequest(), owner="alice").value
    seq = ledger.read().state.seq
    with pytest.raises(NotOwner, match=r"^release a-\d+: it is alice's allocation; only alice"):
        ledger.release(held.id, user="bob", admin=False)
    assert ledger.read().state.seq == seq
    assert held.id in ledger.read().state.allocations


def test_ledger_release_by_its_owner_records_no_admin(ledger) -> None:
    held = hold(ledger, JobRequest(), owner="alice").value
    ledger.release(held.id, user="alice", admin=False)
    (record,) = ledger.history(ops={"release"}).records
    assert record["data"] == {"id": held.id}


def test_ledger_release_by_an_admin_records_as_admin(ledger) -> None:
    held = hold(ledger, JobRequest(), owner="alice").value
    ledger.release(held.id, user="bob", admin=True)
    (record,) = ledger.history(ops={"release"}).records
    assert record["data"] == {"id": held.id, "as_admin": True}
    assert held.id not in ledger.read().state.allocations


def test_ledger_release_without_a_user_checks_nothing(ledger) -> None:
    held = hold(ledger, JobRequest(), owner="alice").value
    ledger.release(held.id)  # a library caller ending what it holds
    assert held.id not in ledger.read().state.allocations


# -- jobs: cancel, forget, drain --now -----------------------------------------------------


@pytest.fixture
def pool(ledger):
    """Jobs as alice, bob and bob-the-admin on one ledger and one node."""
    node = FakeNode()
    nodes = Nodes([target_from_vars("n1", {"transport": "local"})], node)

    def as_user(user: str, admin: bool = False) -> Jobs:
        return Jobs(ledger, nodes, owner=user, admin=admin)

    return as_user, node


def _running_and_queued(alice: Jobs) -> tuple[str, str]:
    """Alice's job running on n1/gpu0 and gpu1, and one of hers queued behind it."""
    running = str(submitting.submit(alice, spec(gpus=2)).job_id)
    queued = str(submitting.submit(alice, spec()).job_id)
    assert state_of(alice, running)["state"] == "running"
    assert state_of(alice, queued)["state"] == "queued"
    return running, queued


def test_cancel_of_anothers_queued_and_running_job_is_refused_untouched(pool) -> None:
    as_user, node = pool
    running, queued = _running_and_queued(as_user("alice"))
    bob = as_user("bob")
    seq = bob.ledger.read().state.seq
    for job_id in (running, queued):
        with pytest.raises(NotOwner, match=rf"^cancel {job_id}: it is alice's job"):
            cancelling.cancel(bob, job_id, grace_s=0)
        with pytest.raises(NotOwner, match=rf"^cancel {job_id}: it is alice's job"):
            cancelling.forget(bob, job_id, who="bob")
    state = bob.ledger.read().state
    assert state.seq == seq  # nothing recorded
    assert state.jobs[running]["state"] == "running" and not state.jobs[running].get("cancel")
    assert state.jobs[queued]["state"] == "queued"
    assert "signal" not in node.calls


def test_cancel_by_an_admin_ends_anothers_jobs_recording_as_admin(pool) -> None:
    as_user, _ = pool
    running, queued = _running_and_queued(as_user("alice"))
    admin = as_user("bob", admin=True)
    assert cancelling.cancel(admin, queued, grace_s=0)["state"] == "cancelled"
    assert cancelling.cancel(admin, running, grace_s=0)["state"] == "cancelled"
    records = {
        (r["data"]["id"], r["data"]["state"]): r["data"]
        for r in admin.ledger.history(ops={"job"}).records
    }
    assert records[(queued, "cancelled")]["as_admin"] is True
    assert records[(running, "running")]["cancel"]["as_admin"] is True


def test_cancel_by_the_owner_records_no_admin(pool) -> None:
    as_user, _ = pool
    alice = as_user("alice", admin=True)  # an admin cancelling her own job: a plain cancel
    running, queued = _running_and_queued(alice)
    cancelling.cancel(alice, queued, grace_s=0)
    cancelling.cancel(alice, running, grace_s=0)
    for record in alice.ledger.history(ops={"job"}).records:
        assert "as_admin" not in record["data"]
        assert "as_admin" not in (record["data"].get("cancel") or {})


def test_forget_by_an_admin_records_as_admin(pool) -> None:
    as_user, _ = pool
    running, _ = _running_and_queued(as_user("alice"))
    job = cancelling.forget(as_user("root", admin=True), running, who="root")
    assert job["state"] == "failed" and job["as_admin"] is True


def test_drain_now_of_anothers_running_job_is_refused_for_a_non_admin(pool) -> None:
    as_user, node = pool
    alice = as_user("alice")
    theirs = str(submitting.submit(alice, spec()).job_id)
    bob = as_user("bob")
    mine = str(submitting.submit(bob, spec()).job_id)  # bob's own job there is not stopped either
    seq = bob.ledger.read().state.seq
    with pytest.raises(NotOwner) as refused:
        drain_now(bob, ["n1"], "PSU swap", 0)
    message = str(refused.value)
    assert message.startswith(
        f"drain --now n1: it would stop other users' jobs: {theirs} (alice's)"
    )
    assert "nothing was drained or stopped" in message
    assert mine not in message and "\n" not in message
    state = bob.ledger.read().state
    assert state.seq == seq and "n1" not in state.drains  # an error changes nothing
    for job_id in (theirs, mine):
        assert state.jobs[job_id]["state"] == "running" and not state.jobs[job_id].get("preempt")
    assert "signal" not in node.calls


def test_drain_now_of_only_ones_own_jobs_needs_no_admin(pool) -> None:
    as_user, _ = pool
    bob = as_user("bob")
    mine = str(submitting.submit(bob, spec()).job_id)
    drained, (job,) = drain_now(bob, ["n1"], "PSU swap", 0)
    assert job["id"] == mine and job["state"] == "cancelled"
    assert [d["target"] for d in drained] == ["n1"]
    assert bob.ledger.read().state.drains["n1"]["admin"]["reason"] == "PSU swap"


def test_drain_now_by_an_admin_marks_anothers_job_as_admin(pool) -> None:
    as_user, _ = pool
    theirs = str(submitting.submit(as_user("alice"), spec()).job_id)
    admin = as_user("bob", admin=True)
    mine = str(submitting.submit(admin, spec()).job_id)
    ended = {j["id"]: j for j in drain_now(admin, ["n1"], "PSU swap", 0)[1]}
    assert ended[theirs]["state"] == ended[mine]["state"] == "cancelled"
    marks = {
        r["data"]["id"]: r["data"]["preempt"]
        for r in admin.ledger.history(ops={"job"}).records
        if r["data"].get("preempt")
    }
    assert marks[theirs]["as_admin"] is True and "as_admin" not in marks[mine]
