"""The pool at a glance (gpupoolctl.board): the frame built from a real ledger, the follower
that keeps it current from appended records only, and the three renderings of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.board.follow import Follower, held_fraction
from gpupoolctl.board.formats import sparkline
from gpupoolctl.board.frame import Filter, build_frame
from gpupoolctl.board.html import frame_page
from gpupoolctl.cli.top_text import frame_text
from gpupoolctl.ledger import Ledger
from gpupoolctl.ledger.units import format_ts

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def card(host: str, gpu: int, *, mib: int = 81920, site: str = "sg", **more: Any) -> dict:
    return {"id": f"{host}/gpu{gpu}", "host": host, "gpu": gpu, "kind": "gpu", "profile": None,
            "memory_mib": mib, "uuid": f"U-{host}-{gpu}", "site": site,
            "model": "NVIDIA H100 80GB HBM3", "vendor": "nvidia", **more}  # fmt: skip


def mig(host: str, gpu: int, n: int) -> dict:
    return {**card(host, gpu, mib=9984), "id": f"{host}/gpu{gpu}/mig-1g.10gb@{n}",
            "kind": "mig", "profile": "1g.10gb", "uuid": f"MIG-{host}-{gpu}-{n}"}  # fmt: skip


def pool_slices() -> list[dict]:
    return [
        card("sg-a", 0),
        card("sg-a", 1),
        mig("sg-a", 2, 0),
        mig("sg-a", 2, 1),
        card("dxb-b", 0, site="dxb"),
        card("dxb-b", 1, site="dxb"),
    ]


@pytest.fixture
def world(tmp_path: Path):
    clock = Clock()
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h", clock=clock)
    slices = pool_slices()
    ledger.refresh_slices(sorted({s["host"] for s in slices}), slices)
    return ledger, clock


def hold(ledger: Ledger, slice_ids: list[str], owner: str, **request: Any) -> str:
    done = ledger.alloc(lambda state, now: list(slice_ids), owner=owner, request=request)
    return done.value.id


def job(ledger: Ledger, job_id: str, owner: str, alloc: str, slices: list[str], **more: Any):
    host = slices[0].split("/")[0]
    with ledger.transaction() as tx:
        tx.append("job", {"id": job_id, "owner": owner, "state": "queued", "request": more})
        tx.append("job", {"id": job_id, "state": "pending", "alloc": alloc,
                          "placement": {"slices": slices, "hosts": [host]}})  # fmt: skip
        tx.append("job", {"id": job_id, "state": "running",
                          "nodes": [{"host": host, "slices": slices, "pid": 1}]})  # fmt: skip


def frame_of(ledger: Ledger, follower: Follower | None = None, **kw: Any):
    follower = follower or Follower(ledger, clock=ledger.clock)
    view = follower.poll()
    return build_frame(
        view.state,
        view.now,
        events=list(follower.events),
        utilization=follower.utilization(view),
        **kw,
    )


def test_every_gpu_is_drawn_as_its_slices_with_holder_and_state(world) -> None:
    ledger, _ = world
    a = hold(ledger, ["sg-a/gpu2/mig-1g.10gb@0"], "ann", job="j-1", team="search")
    job(ledger, "j-1", "ann", a, ["sg-a/gpu2/mig-1g.10gb@0"], team="search")
    hold(ledger, ["sg-a/gpu0"], "bob")
    with ledger.transaction() as tx:
        tx.append("drain", {"target": "dxb-b/gpu1", "state": "drained", "reason": "fans",
                            "source": "admin"})  # fmt: skip
        tx.append("drain", {"target": "dxb-b/gpu0", "state": "drained", "reason": "xid 79",
                            "source": "health"})  # fmt: skip
    frame = frame_of(ledger)

    assert [site for site, _ in frame.sites] == ["dxb", "sg"]
    states = {g.key: g.state for g in frame.nodes()[0].gpus + frame.nodes()[1].gpus}
    assert states == {
        "dxb-b/gpu0": "failed",
        "dxb-b/gpu1": "drained",
        "sg-a/gpu0": "busy",
        "sg-a/gpu1": "free",
        "sg-a/gpu2": "partly held",
    }
    split = frame.gpu("sg-a/gpu2")
    assert split is not None
    assert [(s.label, s.state, s.owner, s.job, s.team) for s in split.slices] == [
        ("1g.10gb", "held", "ann", "j-1", "search"),
        ("1g.10gb", "free", None, None, None),
    ]
    whole = frame.gpu("sg-a/gpu0")
    assert whole is not None and whole.slices[0].job.startswith("a-")  # held by hand: the alloc
    assert frame.gpu("dxb-b/gpu1").reason == "fans"
    t = frame.totals
    assert (t.nodes, t.gpus, t.slices, t.held, t.free, t.down) == (2, 5, 6, 2, 2, 2)
    # A GPU that failed its health check needs a look; one drained by a person does not.
    assert (t.lost, t.failed, t.drained) == (0, 1, 1)
    assert t.down_text() == "1 failed, 1 drained"
    assert t.held_mib == 81920 + 9984
    assert [j.id for j in frame.jobs] == ["j-1"] and frame.jobs[0].team == "search"


def test_queue_rows_carry_the_reason_the_caller_gives_and_the_request(world) -> None:
    ledger, clock = world
    with ledger.transaction() as tx:
        tx.append("job", {"id": "j-9", "owner": "cy", "state": "queued"})
        tx.append("enqueue", {"id": "q-9", "owner": "cy", "priority": 80, "job": "j-9",
                              "request": {"gpus": 2, "memory_mib": 10240}})  # fmt: skip
    clock.advance(90)
    frame = frame_of(ledger, waiting={"j-9": "team ml at its limit (160 of 160 GiB)"})
    (row,) = frame.queue
    assert (row.id, row.owner, row.priority, row.want) == ("j-9", "cy", 80, "2 x 10.0 GiB")
    assert row.reason == "team ml at its limit (160 of 160 GiB)"
    assert row.waited_s == pytest.approx(90, abs=1)
    assert frame.jobs == ()  # queued: in the queue, not among the running


def test_lost_and_silent_nodes_and_a_re_cut_card(world) -> None:
    ledger, _ = world
    with ledger.transaction() as tx:
        tx.append("host", {"host": "dxb-b", "state": "lost", "since": "2026-12-02T08:00:00.000Z"})
        tx.append("reshape", {"id": "r-1", "state": "reserved", "gpu": "sg-a/gpu1",
                              "host": "sg-a", "slices": ["sg-a/gpu1"], "before": "whole",
                              "after": "7 x 1g.10gb", "jobs": ["j-4"]})  # fmt: skip
    frame = frame_of(ledger)
    dxb = frame.nodes()[0]
    assert dxb.state == "lost" and {g.state for g in dxb.gpus} == {"lost"}
    assert frame.gpu("sg-a/gpu1").state == "re-cutting"
    texts = [e.text for e in frame.events]
    assert "dxb-b declared lost" in texts
    assert "re-cutting sg-a/gpu1: whole -> 7 x 1g.10gb for j-4" in texts


def test_the_follower_reads_only_what_was_appended_and_tells_each_record_once(world) -> None:
    ledger, clock = world
    follower = Follower(ledger, clock=clock)
    follower.poll()
    told: list[int] = []
    hook = ledger.observe
    ledger.observe = lambda record, state: (told.append(record["seq"]), hook(record, state))
    writer = Ledger(ledger.path, durable=False, actor="w@h", clock=clock)
    a = hold(writer, ["sg-a/gpu1"], "dee", job="j-2")
    job(writer, "j-2", "dee", a, ["sg-a/gpu1"])
    view = follower.poll()
    assert told == list(range(told[0], view.state.seq + 1))  # only the new records, in order
    assert [e.text for e in follower.events][-1] == "j-2 (dee) placed on sg-a/gpu1"
    told.clear()
    follower.poll()
    assert told == []  # nothing new: nothing parsed
    # Compaction replaces the journal: the next poll reloads, and no event comes twice.
    writer.compact()
    job(writer, "j-2", "dee", a, ["sg-a/gpu1"])
    follower.poll()
    texts = [e.text for e in follower.events]
    assert len(texts) == len(set((e.seq, e.text) for e in follower.events))
    assert texts.count("j-2 (dee) placed on sg-a/gpu1") == 2  # the second placement, once


def test_utilization_per_minute_follows_holds_and_releases(world) -> None:
    ledger, clock = world
    total = 4 * 81920 + 2 * 9984
    clock.advance(60)
    a = hold(ledger, ["sg-a/gpu0"], "ann")
    clock.advance(120)
    hold(ledger, ["sg-a/gpu1"], "ann")
    clock.advance(120)
    ledger.release(a)
    clock.advance(60)
    follower = Follower(ledger, clock=clock)
    series = follower.utilization(follower.poll())
    assert len(series) == 60
    known = [v for v in series if v is not None]
    assert known[0] == 0.0  # the minute the slices were recorded
    assert pytest.approx(81920 / total) in known
    assert pytest.approx(2 * 81920 / total) in known
    assert series[-1] == pytest.approx(81920 / total)  # now: one card held
    assert max(known) == pytest.approx(2 * 81920 / total)
    assert series[: 60 - 7] == [None] * 53  # before the journal began: unknown, not zero


def test_an_expired_hold_counts_as_free(world) -> None:
    ledger, clock = world
    ledger.alloc(lambda s, n: ["sg-a/gpu0"], owner="ann", ttl=timedelta(minutes=5))
    state = ledger.read().state
    assert held_fraction(state, format_ts(clock.now)) > 0
    assert held_fraction(state, format_ts(clock.now + timedelta(minutes=6))) == 0


def test_the_filter_keeps_matching_nodes_jobs_and_events(world) -> None:
    ledger, _ = world
    a = hold(ledger, ["dxb-b/gpu0"], "ann", job="j-1", team="search")
    job(ledger, "j-1", "ann", a, ["dxb-b/gpu0"], team="search")
    b = hold(ledger, ["sg-a/gpu0"], "bob", job="j-2")
    job(ledger, "j-2", "bob", b, ["sg-a/gpu0"])
    by_host = frame_of(ledger, filter=Filter.parse("host=sg-*"))
    assert [n.host for n in by_host.nodes()] == ["sg-a"] and by_host.hidden_nodes == 1
    assert [j.id for j in by_host.jobs] == ["j-2"]
    assert all(e.host == "sg-a" for e in by_host.events)
    by_team = frame_of(ledger, filter=Filter.parse("team=search"))
    assert [n.host for n in by_team.nodes()] == ["dxb-b"]
    assert [j.id for j in by_team.jobs] == ["j-1"]
    bare = frame_of(ledger, filter=Filter.parse("bob"))  # a bare word: host, owner or team
    assert [n.host for n in bare.nodes()] == ["sg-a"]
    both = frame_of(ledger, filter=Filter.parse("owner=ann host=sg-*"))
    assert both.nodes() == [] and both.jobs == ()
    with pytest.raises(ValueError, match="host=, owner= or team="):
        Filter.parse("colour=red")


def test_the_text_frame_names_every_host_slice_state_and_job(world) -> None:
    ledger, _ = world
    a = hold(ledger, ["sg-a/gpu2/mig-1g.10gb@0"], "ann", job="j-1")
    job(ledger, "j-1", "ann", a, ["sg-a/gpu2/mig-1g.10gb@0"])
    frame = frame_of(ledger, waiting={})
    text = frame_text(frame, width=160)
    for expected in ("sg-a  ok", "dxb-b  ok", "[1g.10gb j-1 ann]", "[1g.10gb free]",
                     "partly held", "j-1", "RUNNING (1)", "QUEUE (0, head)",
                     "j-1 (ann) placed on sg-a/gpu2/mig-1g.10gb@0"):  # fmt: skip
        assert expected in text, expected
    narrow = frame_text(frame, width=80)
    assert "[#.]" in narrow and "# held" in narrow  # marks, readable without colour
    assert "\x1b" not in text + narrow


def test_the_page_is_self_contained_escaped_and_lists_every_gpu(world) -> None:
    ledger, _ = world
    hold(ledger, ["sg-a/gpu0"], "<script>alert(1)</script>")
    page = frame_page(frame_of(ledger))

    class Collect(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.gpus: dict[str, str] = {}
            self.tags: set[str] = set()
            self.links: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            values = dict(attrs)
            self.tags.add(tag)
            if values.get("data-gpu"):
                self.gpus[str(values["data-gpu"])] = str(values.get("data-state"))
            for key in ("src", "href"):
                if values.get(key):
                    self.links.append(str(values[key]))

    parsed = Collect()
    parsed.feed(page)
    assert parsed.gpus == {
        "dxb-b/gpu0": "free",
        "dxb-b/gpu1": "free",
        "sg-a/gpu0": "busy",
        "sg-a/gpu1": "free",
        "sg-a/gpu2": "free",
    }
    assert "script" not in parsed.tags and parsed.links == []  # nothing external, no script
    assert "&lt;script&gt;" in page
    assert "<svg" in page  # the sparkline, inline
    warned = frame_page(frame_of(ledger, warnings=["why jobs wait is unknown: a<b"]))
    assert "warning: why jobs wait is unknown: a&lt;b" in warned


def test_sparkline_has_a_block_per_value_and_a_space_for_unknown() -> None:
    assert sparkline([None, 0.0, 0.5, 1.0]) == " ▁▅█"


@settings(max_examples=60, deadline=None)
@given(
    holds=st.lists(st.sampled_from([s["id"] for s in pool_slices()]), unique=True, max_size=6),
    owners=st.lists(st.sampled_from(["ann", "bob", "cy"]), min_size=6, max_size=6),
    pattern=st.sampled_from(["", "host=sg-*", "owner=ann", "team=t1", "bob", "dxb-*"]),
)
def test_totals_and_filter_agree_with_the_slices_shown(tmp_path_factory, holds, owners, pattern):
    folder = tmp_path_factory.mktemp("led")
    clock = Clock()
    ledger = Ledger(folder / "ledger.jsonl", durable=False, actor="t@h", clock=clock)
    slices = pool_slices()
    ledger.refresh_slices(sorted({s["host"] for s in slices}), slices)
    for slice_id, owner in zip(holds, owners, strict=False):
        hold(ledger, [slice_id], owner, team="t1" if owner == "ann" else "t2")
    everything = frame_of(ledger)
    frame = frame_of(ledger, filter=Filter.parse(pattern))
    shown = [s for n in frame.nodes() for g in n.gpus for s in g.slices]
    assert frame.totals.slices == len(shown)
    assert frame.totals.held == sum(s.state == "held" for s in shown)
    assert frame.totals.free == sum(s.state == "free" for s in shown)
    assert len(frame.nodes()) + frame.hidden_nodes == len(everything.nodes()) == 2
    held_ids = {s.id for n in everything.nodes() for g in n.gpus for s in g.slices if s.owner}
    assert held_ids == set(holds)
    ids = [s.id for s in shown]
    assert len(ids) == len(set(ids))  # no slice drawn twice


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["hold", "job", "release", "drain", "undrain", "ttl", "wait", "lost"]),
        st.integers(0, 5),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_a_kept_frame_always_equals_one_drawn_from_nothing(tmp_path_factory, steps) -> None:
    """The live view keeps node rows between frames (FrameBuilder) and redraws only the hosts
    the follower heard touched: after any sequence of writes, what it shows is what a frame
    drawn from nothing shows."""
    from gpupoolctl.board.frame import FrameBuilder

    folder = tmp_path_factory.mktemp("kept")
    clock = Clock()
    writer = Ledger(folder / "ledger.jsonl", durable=False, actor="w@h", clock=clock)
    slices = pool_slices()
    writer.refresh_slices(sorted({s["host"] for s in slices}), slices)
    ids = [s["id"] for s in slices]
    follower = Follower(Ledger(writer.path, durable=False, actor="r@h", clock=clock), clock=clock)
    builder = FrameBuilder()
    held: list[str] = []
    for number, (action, pick) in enumerate(steps):
        state = writer.read().state
        now = format_ts(clock.now)
        free = [i for i in ids if state.slice_state(i, now) == "free"]
        if action in ("hold", "job", "ttl") and free:
            slice_id = free[pick % len(free)]
            ttl = timedelta(minutes=1) if action == "ttl" else None
            done = writer.alloc(lambda s, n, x=slice_id: [x], owner=f"u{pick}", ttl=ttl,
                                request={"team": f"t{pick % 2}"})  # fmt: skip
            held.append(done.value.id)
            if action == "job":
                job(writer, f"j-{number}", f"u{pick}", done.value.id, [slice_id])
        elif action == "release" and held:
            alloc_id = held.pop(pick % len(held))
            alive = state.active(format_ts(clock.now))  # an expired hold is free already
            if alloc_id in alive and state.job_holding(alloc_id) is None:
                writer.release(alloc_id)
        elif action in ("drain", "undrain", "lost"):
            host = ["sg-a", "dxb-b"][pick % 2]
            target = host if pick % 3 else f"{host}/gpu1"
            with writer.transaction() as tx:
                if action == "lost":
                    tx.append("host", {"host": host, "state": "lost"})
                elif action == "drain" and target not in tx.state.drains:
                    tx.append("drain", {"target": target, "state": "drained", "reason": "r"})
                elif action == "undrain" and target in tx.state.drains:
                    tx.append("drain", {"target": target, "state": "undrained"})
        elif action == "wait":
            clock.advance(75)  # a ttl hold expires meanwhile: no record says so
        view = follower.poll()
        kept = builder.frame(view.state, view.now, touched=follower.take_touched())
        fresh = build_frame(view.state, view.now)
        assert kept == fresh, (number, action)


def test_the_pools_memory_is_its_cards_with_or_without_facts_and_in_the_held_share(
    tmp_path: Path,
) -> None:
    """A card cut into two 1g.10gb instances still has all of its 80 GB: the total counts
    the card's memory (what its slices carry from its facts), the same whether the frame
    has the nodes' facts or not, and the last hour's held share is of the same total."""
    clock = Clock()
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h", clock=clock)
    cut = [{**mig("sg-a", 1, n), "gpu_memory_mib": 81920} for n in (0, 1)]
    ledger.refresh_slices(["sg-a"], [card("sg-a", 0), *cut])
    hold(ledger, [cut[0]["id"]], "ann")
    view = ledger.read()
    facts = {"sg-a": {"gpus": [{"index": i, "memory_total_mib": 81920, "memory_used_mib": 5}
                               for i in (0, 1)]}}  # fmt: skip
    plain = build_frame(view.state, view.now).totals
    read = build_frame(view.state, view.now, facts=facts).totals
    assert plain.memory_mib == read.memory_mib == 2 * 81920
    assert held_fraction(view.state, view.now) == pytest.approx(9984 / (2 * 81920))
    assert plain.held_mib / plain.memory_mib == held_fraction(view.state, view.now)
