"""How the jobs library reaches nodes: agent verbs, grouped so each host gets one request."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupoolctl.remote.results import HostResult
    from gpupoolctl.remote.target import Target

# (target, agent request) pairs -> one result each, in order (the CLI's fan_out_each).
Runner = Callable[[list[tuple["Target", dict[str, Any]]]], list["HostResult"]]


@dataclass
class Call:
    host: str
    verb: str
    args: dict[str, Any]


class Nodes:
    def __init__(self, targets: Sequence[Target], run: Runner) -> None:
        self.targets = {t.name: t for t in targets}
        self._run = run

    def call(self, calls: Sequence[Call]) -> list[HostResult]:
        """Run every call (one connection per call, all at once); results in order. A host
        the inventory does not know ends as failed, without stopping the others."""
        from gpupoolctl.remote.results import FAILED, HostResult

        out: list[HostResult | None] = [None] * len(calls)
        known: list[tuple[int, tuple[Target, dict[str, Any]]]] = []
        for index, call in enumerate(calls):
            target = self.targets.get(call.host)
            if target is None:
                out[index] = HostResult(
                    call.host, FAILED, error=f"{call.host} is not in the inventory"
                )
            else:
                known.append((index, (target, {"v": 1, "verb": call.verb, "args": call.args})))
        if known:
            results = self._run([pair for _, pair in known])
            for (index, _), result in zip(known, results, strict=True):
                out[index] = result
        return [r for r in out if r is not None]

    def one(self, host: str, verb: str, args: dict[str, Any]) -> HostResult:
        return self.call([Call(host, verb, args)])[0]

    def poll(self, wanted: dict[str, list[str]], *, fence: bool = False) -> dict[str, Any]:
        """{host: [node job ids]} -> {host: {node id: status} | HostResult (failed)}."""
        hosts = sorted(wanted)
        results = self.call(
            [Call(h, "poll", {"job_ids": sorted(set(wanted[h])), "fence": fence}) for h in hosts]
        )
        answers: dict[str, Any] = {}
        for host, result in zip(hosts, results, strict=True):
            answers[host] = (result.data or {}).get("jobs", {}) if result.ok else result
        return answers
