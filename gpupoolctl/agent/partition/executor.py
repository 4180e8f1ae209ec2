"""Run a checked `partition` request: hooks around it, then each GPU on its own."""

from __future__ import annotations

from typing import Any

from gpupoolctl.agent.partition.base import Card, OpFailed, ResetPending
from gpupoolctl.agent.partition.expect import differences, from_snapshot
from gpupoolctl.agent.partition.hooks import HookRunner
from gpupoolctl.agent.partition.lock import NodeBusy, node_lock
from gpupoolctl.agent.partition.request import GpuRequest, Request
from gpupoolctl.hw.ops import GpuOutcome, describe


def _outcome(gpu: GpuRequest, **fields: Any) -> GpuOutcome:
    outcome: GpuOutcome = {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "ok": False,
        "applied": 0,
        "error": None,
        "rolled_back": False,
        "rollback_error": None,
        "reset_required": False,
    }
    outcome.update(fields)  # type: ignore[typeddict-item]
    return outcome


def apply(request: Request) -> dict[str, Any]:
    """Hooks, then every GPU of the request; never raises for a GPU's or a hook's failure."""
    from gpupoolctl.agent.drivers.amdsmi import _stdout_to_stderr

    hooks = HookRunner(request.hooks)
    stopped_by: str | None = None
    warnings: list[str] = []
    # Vendor libraries and hooks' children must never write into our one JSON answer.
    with _stdout_to_stderr():
        try:
            with node_lock():
                try:
                    failure = hooks.run("apply-start")
                    if failure is None and request.changes_mode:
                        failure = hooks.run("pre-apply-mode")
                    if failure is None and request.changes_config:
                        failure = hooks.run("pre-apply-config")
                    if failure is not None:
                        stopped_by = hooks.results[-1]["hook"]
                        outcomes = [
                            _outcome(gpu, error=f"not applied: {failure}") for gpu in request.gpus
                        ]
                    else:
                        outcomes = _run_gpus(request, warnings)
                finally:
                    hooks.run("apply-exit")  # like mig-parted's deferred apply-exit: always
        except NodeBusy as exc:  # nothing ran, not even a hook
            outcomes = [_outcome(gpu, error=str(exc)) for gpu in request.gpus]
    return {
        "gpus": outcomes,
        "hooks": hooks.results,
        "stopped_by": stopped_by,
        "warnings": warnings,
    }


def _run_gpus(request: Request, warnings: list[str]) -> list[GpuOutcome]:
    from gpupoolctl.agent.partition.node import open_node

    node = open_node()
    try:
        # Resolve every GPU first: a partition change may renumber those after it. And check
        # every GPU against its plan before any op runs: an AMD card's ops move the others of
        # its hive on purpose.
        cards = [node.resolve(gpu.index, gpu.uuid, gpu.vendor) for gpu in request.gpus]
        cards = [_as_planned(gpu, card) for gpu, card in zip(request.gpus, cards, strict=True)]
        stale = [card for card in cards if isinstance(card, str)]
        if stale:
            # The plan was made from facts another run has changed since (or is changing):
            # refuse the whole node, so that two runs never leave it half one layout and
            # half the other. The plan's unchanged GPUs are checked too, for that reason.
            why = f"nothing was done on this node: {stale[0]}"
            return [_outcome(gpu, error=why) for gpu in request.gpus]
        outcomes: list[GpuOutcome] = []
        finals: list[tuple[Card, dict[str, Any]]] = []
        for gpu, card in zip(request.gpus, cards, strict=True):
            if isinstance(card, str):
                outcomes.append(_outcome(gpu, error=card))
                continue
            outcome, final = run_gpu(gpu, card, request.force)
            outcomes.append(outcome)
            if final is not None:
                finals.append((card, final))
        warnings.extend(_drift(finals))
        return outcomes
    finally:
        node.close()


def _as_planned(gpu: GpuRequest, card: Card | str) -> Card | str:
    """The card, or why it is refused: it is no longer in the state its plan was made from."""
    if isinstance(card, str) or gpu.expect is None:
        return card
    try:
        moved = differences(gpu.expect, from_snapshot(card.snapshot()))
    except Exception as exc:
        return f"before any change: {_message(exc)}"
    if not moved:
        return card
    return (
        f"GPU {gpu.index} changed since the plan was made ({'; '.join(moved)}); "
        "take facts and plan again"
    )


def run_gpu(gpu: GpuRequest, card: Card, force: bool) -> tuple[GpuOutcome, dict[str, Any] | None]:
    """One GPU: busy check, snapshot, ops in order, restore on failure.

    Returns the outcome and, when it ended as planned, the layout it ended in (so a later
    hive-wide change to it can be reported)."""
    if not gpu.ops:
        return _outcome(gpu, ok=True), None
    try:
        busy = card.blockers(gpu.ops)
        if busy and not force:
            return _outcome(gpu, error=f"busy: {', '.join(busy)} (use --force to act anyway)"), None
        snapshot = card.snapshot()
    except Exception as exc:
        return _outcome(gpu, error=f"before any change: {_message(exc)}"), None
    applied = 0
    for op in gpu.ops:
        try:
            card.apply(op)
        except ResetPending as exc:
            applied += 1
            left = len(gpu.ops) - applied
            if not left:
                return _outcome(gpu, ok=True, applied=applied, reset_required=True), None
            # Not a failure to undo: the reset is what the plan needs next. After it, the
            # same plan, made again, carries on from here.
            error = f"{describe(op)}: {exc}; {left} operation(s) wait for it: apply again then"
            return _outcome(gpu, applied=applied, error=error, reset_required=True), None
        except Exception as exc:  # a vendor error or a bug: the GPU goes back either way
            error = f"{describe(op)} (step {applied + 1} of {len(gpu.ops)}): {_message(exc)}"
            return _rolled_back(gpu, card, snapshot, applied, error), None
        applied += 1
    final = None
    if card.vendor == "amd":  # only hive-wide AMD changes can move a card afterwards
        try:
            final = card.snapshot()
            final.pop("peers", None)  # later GPUs of the request change those on purpose
        except Exception:
            final = None
    return _outcome(gpu, ok=True, applied=applied), final


def _rolled_back(
    gpu: GpuRequest, card: Card, snapshot: dict[str, Any], applied: int, error: str
) -> GpuOutcome:
    try:
        problems = card.restore(snapshot)
        left = card.differences(snapshot)
    except Exception as exc:
        problems, left = [_message(exc)], []
    if problems or left:
        detail = "; ".join([*problems, *(f"differs: {d}" for d in left)])
        return _outcome(gpu, applied=applied, error=error, rollback_error=detail)
    return _outcome(gpu, applied=applied, error=error, rolled_back=True)


def _message(exc: BaseException) -> str:
    if isinstance(exc, OpFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _drift(finals: list[tuple[Card, dict[str, Any]]]) -> list[str]:
    """GPUs that no longer look as their ops left them: an AMD memory partition is set for
    the whole xGMI hive, so another card's change or rollback moves this one too."""
    out = []
    for card, final in finals:
        try:
            moved = card.differences(final)
        except Exception:
            continue
        if moved:
            out.append(f"GPU {card.index} changed after its own ops: {'; '.join(moved)}")
    return out
