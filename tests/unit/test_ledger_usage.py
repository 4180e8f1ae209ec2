"""ledger/usage.py over hand-built records: what a hold is, how long it counts, what a slice
of it is worth, and how the sums are grouped."""

from __future__ import annotations

import pytest

from gpupoolctl.errors import UsageError
from gpupoolctl.ledger.usage import Meter, check_by, gpu_share, usage

H100 = {"host": "h1", "model": "H100", "vendor": "nvidia", "kind": "gpu", "memory_mib": 81920}
MIG = {**H100, "kind": "mig", "memory_mib": 10240, "gpu_memory_mib": 81920}
A100 = {"host": "h2", "model": "A100", "vendor": "nvidia", "kind": "gpu", "memory_mib": 40960}


def ts(hour: float) -> str:
    """2025-06-01 plus `hour` hours, as the journal writes times."""
    minutes = round(hour * 60)
    day, minute = divmod(minutes, 24 * 60)
    return f"2025-06-{1 + day:02d}T{minute // 60:02d}:{minute % 60:02d}:00.000Z"


class Journal:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def add(self, hour: float, op: str, **data) -> None:
        seq = len(self.records) + 1
        self.records.append({"seq": seq, "ts": ts(hour), "actor": "t@h", "op": op, "data": data})

    def slices(self, hour: float, hosts: list[str], entries: dict[str, dict]) -> None:
        self.add(hour, "slices", hosts=hosts, slices=[{"id": k, **v} for k, v in entries.items()])

    def alloc(self, hour, alloc_id, owner, slices, expires=None, team=None, job=None):
        request = {k: v for k, v in {"team": team, "job": job}.items() if v is not None}
        self.add(
            hour,
            "alloc",
            id=alloc_id,
            owner=owner,
            slices=slices,
            expires=ts(expires) if expires is not None else None,
            request=request,
        )


@pytest.fixture
def j() -> Journal:
    journal = Journal()
    journal.slices(0, ["h1"], {"h1/gpu0": H100, "h1/gpu1": H100, "h1/gpu2/mig-1g@0": MIG})
    journal.slices(0, ["h2"], {"h2/gpu0": A100})
    return journal


def one(result, **keys) -> dict:
    rows = [r for r in result.rows if all(r[k] == v for k, v in keys.items())]
    assert len(rows) == 1, result.rows
    return rows[0]


def test_a_release_ends_a_whole_card_hold(j):
    j.alloc(1, "a-1", "ann", ["h1/gpu0"], team="ml")
    j.add(3, "release", id="a-1")
    result = usage(j.records, now=ts(10))
    assert result.rows == [
        {
            "team": "ml",
            "user": "ann",
            "gpu_hours": 2.0,
            "gib_hours": 160.0,
            "slice_hours": 2.0,
            "holds": 1,
        }
    ]
    assert result.total == {"gpu_hours": 2.0, "gib_hours": 160.0, "slice_hours": 2.0, "holds": 1}


def test_an_expire_record_ends_a_hold_at_its_time(j):
    j.alloc(1, "a-1", "ann", ["h1/gpu0"])
    j.alloc(1, "a-2", "bob", ["h1/gpu1"])
    j.add(4, "expire", ids=["a-1", "a-2"])
    result = usage(j.records, now=ts(10))
    assert one(result, user="ann")["gpu_hours"] == 3.0
    assert one(result, user="bob")["gpu_hours"] == 3.0


def test_a_hold_stops_at_its_expiry_when_that_comes_before_the_close(j):
    j.alloc(1, "a-1", "ann", ["h1/gpu0"], expires=2.5)
    j.add(6, "expire", ids=["a-1"])  # recorded by a later write, long after
    j.alloc(1, "a-2", "bob", ["h1/gpu1"], expires=8)
    j.add(2, "release", id="a-2")  # released before it would have expired
    j.alloc(1, "a-3", "cat", ["h2/gpu0"], expires=4)  # never closed, expired before now
    result = usage(j.records, now=ts(10))
    assert one(result, user="ann")["gpu_hours"] == 1.5
    assert one(result, user="bob")["gpu_hours"] == 1.0
    assert one(result, user="cat")["gpu_hours"] == 3.0


def test_an_open_hold_counts_up_to_now(j):
    j.alloc(1, "a-1", "ann", ["h1/gpu0"])
    assert usage(j.records, now=ts(5)).total["gpu_hours"] == 4.0
    # and up to --until when that is earlier; a later --until does not run past now
    assert usage(j.records, now=ts(5), until=ts(2)).total["gpu_hours"] == 1.0
    assert usage(j.records, now=ts(5), until=ts(9)).total["gpu_hours"] == 4.0


def test_only_the_part_inside_the_period_counts(j):
    j.alloc(1, "a-1", "ann", ["h1/gpu0"])
    j.add(5, "release", id="a-1")
    j.alloc(6, "a-2", "ann", ["h1/gpu0"])  # after the period
    j.add(7, "release", id="a-2")
    j.alloc(0.5, "a-3", "ann", ["h1/gpu1"])  # before the period
    j.add(1.5, "release", id="a-3")
    result = usage(j.records, now=ts(10), since=ts(2), until=ts(4))
    assert result.total == {"gpu_hours": 2.0, "gib_hours": 160.0, "slice_hours": 2.0, "holds": 1}
    # a hold that ended exactly where the period starts does not overlap it
    assert usage(j.records, now=ts(10), since=ts(5), until=ts(5.5)).total["holds"] == 0


def test_since_a_seq_starts_at_that_records_time(j):
    j.alloc(1, "a-1", "ann", ["h1/gpu0"])
    j.add(2, "release", id="a-1")  # seq 4: ends before the period
    j.alloc(3, "a-2", "bob", ["h1/gpu0"])  # seq 5
    j.alloc(4, "a-3", "cat", ["h1/gpu1"])  # seq 6: the period starts here
    j.add(6, "release", id="a-2")
    result = usage(j.records, now=ts(7), since_seq=6)
    assert result.since == ts(4)
    assert {r["user"]: r["gpu_hours"] for r in result.rows} == {"bob": 2.0, "cat": 3.0}


def test_a_hold_over_several_hosts_is_split_per_slice(j):
    j.alloc(0, "a-1", "ann", ["h1/gpu0", "h1/gpu1", "h2/gpu0"], job="j-7")
    j.add(2, "release", id="a-1")
    result = usage(j.records, now=ts(3), by=["host", "model", "job"])
    assert result.rows == [
        {
            "host": "h1",
            "model": "H100",
            "job": "j-7",
            "gpu_hours": 4.0,
            "gib_hours": 320.0,
            "slice_hours": 4.0,
            "holds": 1,
        },
        {
            "host": "h2",
            "model": "A100",
            "job": "j-7",
            "gpu_hours": 2.0,
            "gib_hours": 80.0,
            "slice_hours": 2.0,
            "holds": 1,
        },
    ]
    assert result.total["holds"] == 1  # one hold, in two rows


def test_a_mig_slice_counts_its_share_of_the_card(j):
    j.alloc(0, "a-1", "ann", ["h1/gpu2/mig-1g@0"])
    j.add(8, "release", id="a-1")
    row = one(usage(j.records, now=ts(9)), user="ann")
    assert row["gpu_hours"] == 1.0  # 8 hours of an eighth
    assert row["gib_hours"] == 80.0  # 8 hours of 10 GiB
    assert row["slice_hours"] == 8.0
    assert gpu_share(MIG) == 0.125 and gpu_share(H100) == 1.0
    assert gpu_share({"memory_mib": 0, "gpu_memory_mib": 81920}) == 1.0


def test_a_slice_counts_as_it_was_when_the_hold_began(j):
    j.alloc(0, "a-1", "ann", ["h1/gpu0"])
    # h1 is re-cut while a-1 holds it: the hold keeps the whole card it took
    j.slices(1, ["h1"], {"h1/gpu0": {**MIG, "memory_mib": 40960}})
    j.alloc(1, "a-2", "bob", ["h1/gpu0"])
    j.add(2, "release", id="a-1")
    j.add(2, "release", id="a-2")
    result = usage(j.records, now=ts(3))
    assert one(result, user="ann")["gpu_hours"] == 2.0
    assert one(result, user="bob")["gpu_hours"] == 0.5


def test_missing_or_empty_team_and_job_are_a_dash(j):
    j.alloc(0, "a-1", "ann", ["h1/gpu0"])  # no request keys at all
    j.alloc(0, "a-2", "ann", ["h1/gpu1"], team="")
    j.alloc(0, "a-3", "ann", ["h2/gpu0"], team="ml")
    result = usage(j.records, now=ts(1), by=["team", "job"])
    assert [(r["team"], r["job"], r["holds"]) for r in result.rows] == [
        ("-", "-", 2),
        ("ml", "-", 1),
    ]


def test_rows_are_sorted_by_the_keys_in_the_order_given(j):
    for n, (owner, team) in enumerate([("zed", "a"), ("amy", "b"), ("bob", "a")]):
        j.alloc(0, f"a-{n}", owner, [f"h1/gpu{n}"], team=team)
    by_team = usage(j.records, now=ts(1))
    assert [(r["team"], r["user"]) for r in by_team.rows] == [
        ("a", "bob"),
        ("a", "zed"),
        ("b", "amy"),
    ]
    by_user = usage(j.records, now=ts(1), by=["user", "team"])
    assert [r["user"] for r in by_user.rows] == ["amy", "bob", "zed"]


def test_a_snapshot_start_counts_its_open_holds_from_their_creation():
    state = {
        "seq": 10,
        "slices": [{"id": "h1/gpu0", **H100}],
        "allocations": [
            {"id": "a-9", "owner": "ann", "slices": ["h1/gpu0"], "created": ts(1),
             "expires": None, "request": {"team": "ml"}},
        ],
    }  # fmt: skip
    records = [{"seq": 11, "ts": ts(4), "actor": "t", "op": "release", "data": {"id": "a-9"}}]
    result = usage(records, now=ts(5), state=state, state_seq=10)
    assert result.total["gpu_hours"] == 3.0
    assert result.known_after_seq == 10
    assert "usage before seq 11 is not known" in result.warnings[0]


def test_start_again_drops_what_was_summed():
    meter = Meter(now=ts(5))
    meter.start(None, 0)
    meter.feed({"seq": 1, "ts": ts(0), "op": "alloc", "data": {"id": "a-1", "owner": "x",
                "slices": ["h9/gpu0"]}})  # fmt: skip
    meter.feed({"seq": 2, "ts": ts(1), "op": "release", "data": {"id": "a-1"}})
    assert meter.result().total["slice_hours"] == 1.0
    meter.start({"slices": [], "allocations": []}, 2)
    assert meter.result().rows == []


def test_malformed_records_hold_nothing(j):
    j.add(0, "alloc", owner="ann")  # no id, no slices
    j.add(0, "release")
    j.add(0, "expire", ids=None)
    assert usage(j.records, now=ts(1)).rows == []


def test_unknown_slices_count_one_card_and_no_memory(j):
    j.alloc(0, "a-1", "ann", ["h7/gpu0"])
    j.add(1, "release", id="a-1")
    (row,) = usage(j.records, now=ts(2), by=["host", "model"]).rows
    assert (row["host"], row["model"], row["gpu_hours"], row["gib_hours"]) == ("h7", "-", 1.0, 0)


def test_by_is_checked():
    assert check_by(None) == ("team", "user")
    assert check_by(["host", "host", "user"]) == ("host", "user")
    with pytest.raises(UsageError, match="bad --by 'site'"):
        check_by(["site"])
