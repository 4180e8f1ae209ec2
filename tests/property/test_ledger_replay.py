"""Replay equals an independent in-memory model over random operation sequences.

The model below knows nothing of journals: a dict of slices, a dict of holds, best fit by
(memory, id), expiry by clock. After every sequence, a fresh process-like replay of the file
(snapshot + journal), the writer's incremental state and the model must all agree, also
across compactions at random points.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import NotFound
from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerError, NothingFits, drains
from gpupoolctl.sched import JobRequest

T0 = datetime(2025, 6, 1, tzinfo=UTC)
PROFILES = ["1g.10gb", "3g.40gb", None]
MEMORY = {"1g.10gb": 9984, "3g.40gb": 40448, None: 81920}


def pool(host: str, shape: list[str | None]) -> list[dict]:
    return [
        {
            "id": f"{host}/s{i:02d}",
            "host": host,
            "kind": "mig" if p else "gpu",
            "profile": p,
            "memory_mib": MEMORY[p],
            "uuid": f"{host}-{i}-{p}",
        }
        for i, p in enumerate(shape)
    ]


@dataclass
class Model:
    now: datetime = T0
    seq: int = 0
    slices: dict[str, dict] = field(default_factory=dict)
    holds: dict[str, tuple[str, tuple[str, ...], datetime | None]] = field(default_factory=dict)
    uuids: dict[str, list[str]] = field(default_factory=dict)  # alloc -> slice uuids when taken
    drained: set[str] = field(default_factory=set)  # hosts that take no new holds

    def live(self) -> dict[str, tuple[str, tuple[str, ...], datetime | None]]:
        return {k: v for k, v in self.holds.items() if v[2] is None or v[2] > self.now}

    def _write(self, records: int) -> None:
        expired = len(self.holds) - len(self.live())
        self.holds = self.live()
        self.seq += records + (1 if expired else 0)

    def refresh(self, host: str, shape: list[str | None]) -> None:
        new = {s["id"]: s for s in pool(host, shape)}
        old = {k: v for k, v in self.slices.items() if v["host"] == host}
        if old != new:
            self._write(1)
            self.slices = {k: v for k, v in self.slices.items() if v["host"] != host} | new

    def alloc(self, profile: str | None, count: int, owner: str, ttl: int | None) -> str | None:
        held = {s for _, slices, _ in self.live().values() for s in slices}
        free = [
            s for k, s in self.slices.items() if k not in held and s["host"] not in self.drained
        ]
        fits = [s for s in free if s["profile"] == profile]  # None: a whole GPU
        if len(fits) < count:
            return None
        chosen = tuple(s["id"] for s in sorted(fits, key=lambda s: (s["memory_mib"], s["id"])))
        self._write(1)
        alloc_id = f"a-{self.seq}"
        expires = self.now + timedelta(minutes=ttl) if ttl else None
        self.holds[alloc_id] = (owner, chosen[:count], expires)
        self.uuids[alloc_id] = [self.slices[s]["uuid"] for s in chosen[:count]]
        return alloc_id

    def orphans(self) -> set[str]:
        """Holds (expired ones too, until recorded) on slices gone or re-created."""
        return {
            alloc_id
            for alloc_id, (_, slices, _) in self.holds.items()
            for sid, uuid in zip(slices, self.uuids[alloc_id], strict=True)
            if sid not in self.slices or self.slices[sid]["uuid"] != uuid
        }

    def drain(self, host: str) -> bool:
        if not any(s["host"] == host for s in self.slices.values()):
            return False  # no such host: refused, nothing written
        self._write(1)
        self.drained.add(host)
        return True

    def undrain(self, host: str) -> bool:
        if host not in self.drained:
            return False
        self._write(1)
        self.drained.discard(host)
        return True

    def release(self, alloc_id: str) -> bool:
        if alloc_id not in self.live():
            return False
        self._write(1)
        del self.holds[alloc_id]
        return True


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("refresh"),
            st.sampled_from(["h1", "h2"]),
            st.lists(st.sampled_from(PROFILES), max_size=5),
        ),
        st.tuples(
            st.just("alloc"),
            st.sampled_from(PROFILES),
            st.integers(1, 3),
            st.sampled_from(["alice", "bob"]),
            st.sampled_from([None, 5, 60]),
        ),
        st.tuples(st.just("release"), st.integers(0, 40)),
        st.tuples(st.sampled_from(["drain", "undrain"]), st.sampled_from(["h1", "h2", "h3"])),
        st.tuples(st.just("tick"), st.integers(1, 90)),
        st.tuples(st.just("compact")),
        st.tuples(st.just("reopen")),
    ),
    max_size=40,
)


def snapshot_of(ledger: Ledger, now: datetime) -> dict:
    view = ledger.read()
    live = view.state.active(view.now)
    return {
        "seq": view.state.seq,
        "slices": view.state.slices,
        "holds": {k: (a.owner, tuple(a.slices), a.expires) for k, a in live.items()},
        "drained": sorted(view.state.drains),
    }


def model_view(model: Model) -> dict:
    from gpupoolctl.ledger.units import format_ts

    return {
        "seq": model.seq,
        "slices": model.slices,
        "holds": {k: (o, s, format_ts(e) if e else None) for k, (o, s, e) in model.live().items()},
        "drained": sorted(model.drained),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_replay_matches_the_model(sequence):
    model = Model()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.jsonl"

        def clock() -> datetime:
            return model.now

        ledger = Ledger(path, durable=False, actor="p@h", clock=clock)
        for step in sequence:
            kind = step[0]
            if kind == "refresh":
                model.refresh(step[1], step[2])
                ledger.refresh_slices([step[1]], pool(step[1], step[2]))
            elif kind == "alloc":
                _, profile, count, owner, ttl = step
                want = model.alloc(profile, count, owner, ttl)
                request = JobRequest(profile=profile or "gpu", gpus=count)
                try:
                    got = hold(
                        ledger, request, owner=owner, ttl=timedelta(minutes=ttl) if ttl else None
                    ).value.id
                except NothingFits:
                    got = None
                assert got == want
            elif kind == "release":
                alloc_id = f"a-{step[1]}"
                want_ok = model.release(alloc_id)
                try:
                    ledger.release(alloc_id)
                    got_ok = True
                except LedgerError:
                    got_ok = False
                assert got_ok == want_ok
            elif kind in ("drain", "undrain"):
                want_ok = getattr(model, kind)(step[1])
                try:
                    if kind == "drain":
                        drains.drain(ledger, [step[1]], "maintenance")
                    else:
                        drains.undrain(ledger, [step[1]])
                    got_ok = True
                except NotFound:
                    got_ok = False
                assert got_ok == want_ok
            elif kind == "tick":
                model.now += timedelta(minutes=step[1])
            elif kind == "compact":
                ledger.compact()
            else:
                ledger = Ledger(path, durable=False, actor="p@h", clock=clock)
            assert snapshot_of(ledger, model.now) == model_view(model)
        replayed = Ledger(path, durable=False, clock=clock)
        assert snapshot_of(replayed, model.now) == model_view(model)
        assert replayed.read().state == ledger.read().state
        if not path.exists():  # nothing was ever written: a named ledger that is not there
            assert model.seq == 0
            with pytest.raises(LedgerError, match="does not exist"):
                replayed.verify()
            return
        problems = replayed.verify().problems
        assert {p.kind for p in problems} <= {"orphan"}
        assert {p.where for p in problems} == model.orphans()
        everything = replayed.history(everything=True).records
        assert [r["seq"] for r in everything] == list(range(1, model.seq + 1))
