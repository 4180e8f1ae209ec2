"""Files several operators share: the ledger and the simulator's state in a folder shared
with its group (setgid) are group-readable and -writable whatever the umask, private ones
stay 0600, a replaced file keeps its mode; and who is acting comes from the uid."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupoolctl.hw import sharing
from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, current_user
from gpupoolctl.ledger.ledger import default_actor, user_name
from gpupoolctl.sched import JobRequest
from gpupoolctl.sim.state import SimState

SLICES = [
    {
        "id": f"n1/gpu{n}",
        "host": "n1",
        "kind": "gpu",
        "profile": None,
        "memory_mib": 81920,
        "uuid": f"GPU-{n}",
    }
    for n in range(4)
]
OTHER_GID = 4242  # a group the test process is not in: only root can give a folder it


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """022, the usual default: it would take the group's write bit from a plain create."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def shared(tmp_path: Path, usual_umask: None) -> Path:
    folder = tmp_path / "pool"
    folder.mkdir()
    if os.geteuid() == 0:
        os.chown(folder, -1, OTHER_GID)
    folder.chmod(0o2770)
    return folder


def ledger_in(folder: Path) -> Ledger:
    led = Ledger(folder / "ledger.jsonl", durable=True, actor="tester@box")
    led.refresh_slices(["n1"], SLICES)
    return led


def ledger_files(led: Ledger) -> list[Path]:
    paths = led.paths
    return [
        paths.journal,
        paths.lock,
        paths.snapshot,
        paths.watermark,
        *paths.archive_dir.iterdir(),
    ]


def test_a_shared_folders_ledger_files_are_its_groups_whatever_the_umask(shared: Path) -> None:
    led = ledger_in(shared)
    hold(led, JobRequest(), owner="alice")
    led.compact()
    hold(led, JobRequest(), owner="bob")
    files = ledger_files(led)
    assert {p.name for p in files} >= {"ledger.jsonl", "ledger.jsonl.synced"}
    for path in files:
        assert mode(path) == 0o660, path
        assert path.stat().st_gid == shared.stat().st_gid, path
    assert mode(led.paths.archive_dir) == 0o2770


def test_a_private_folders_ledger_files_stay_0600(tmp_path: Path, usual_umask: None) -> None:
    led = ledger_in(tmp_path)
    hold(led, JobRequest(), owner="alice")
    led.compact()
    hold(led, JobRequest(), owner="alice")
    for path in ledger_files(led):
        assert mode(path) == 0o600, path
    assert mode(led.paths.archive_dir) == 0o700


def test_compaction_keeps_the_modes_an_operator_gave(shared: Path) -> None:
    # Read-only for the group: the journal and the snapshot are renamed over on compaction,
    # and their new versions keep 0640 (not 0600, nor the folder's 0660).
    led = ledger_in(shared)
    hold(led, JobRequest(), owner="alice")
    led.compact()
    led.paths.journal.chmod(0o640)
    led.paths.snapshot.chmod(0o640)
    hold(led, JobRequest(), owner="alice")
    led.compact()
    assert mode(led.paths.journal) == 0o640
    assert mode(led.paths.snapshot) == 0o640


def test_a_too_open_journal_in_a_shared_folder_is_tightened_to_the_groups(shared: Path) -> None:
    led = ledger_in(shared)
    led.paths.journal.chmod(0o666)
    done = hold(led, JobRequest(), owner="alice")
    assert f"{led.paths.journal}: mode 666 was too open; set to 660" in done.warnings
    assert mode(led.paths.journal) == 0o660


def test_the_simulators_state_in_a_shared_folder_is_its_groups(shared: Path) -> None:
    state = SimState.reset("n1", "l40s-4", shared / "sim")
    with state.mutate() as data:
        data["nvidia"]["driver_version"] = "999.1"
    assert mode(shared / "sim") == 0o2770
    for path in (state.path, state.path.with_name(state.path.name + ".lock")):
        assert mode(path) == 0o660, path


def test_a_new_folder_takes_its_parents_rule_and_an_existing_one_is_left(
    shared: Path, tmp_path: Path
) -> None:
    sharing.make_dirs(shared / "a" / "b")
    assert mode(shared / "a") == mode(shared / "a" / "b") == 0o2770
    sharing.make_dirs(tmp_path / "c" / "d")
    assert mode(tmp_path / "c" / "d") == 0o700
    (tmp_path / "e").mkdir(mode=0o750)
    sharing.make_dirs(tmp_path / "e")
    assert mode(tmp_path / "e") == 0o750


def test_the_acting_user_is_the_uids_whatever_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "mallory")
    expected = pwd.getpwuid(os.getuid()).pw_name
    assert current_user() == expected
    assert default_actor().startswith(f"{expected}@")


def test_a_uid_without_a_passwd_entry_is_named_by_its_number() -> None:
    taken = {entry.pw_uid for entry in pwd.getpwall()}
    uid = next(n for n in range(60000, 65000) if n not in taken)
    assert user_name(uid) == str(uid)
