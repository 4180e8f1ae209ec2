"""A gpupoolctl job as sbatch options and a batch script (gpupoolctl.slurm.mapping)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.export.slurm import slurm_config
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.sched.request import JobRequest
from gpupoolctl.slurm.client import SlurmCapacityError
from gpupoolctl.slurm.mapping import (
    batch_script,
    gres_for,
    matching_types,
    nice_for,
    profile_suffix,
    sbatch_request,
)

TYPES = {"h100", "h100_1g.10gb", "h100_3g.40gb", "a100_1g.10gb", "mi300x_cpx.nps4"}


def _spec(**request: object) -> JobSpec:
    fields = {"profile": "gpu", **request}
    return JobSpec(argv=["python", "run.py"], request=JobRequest(**fields))  # type: ignore[arg-type]


def test_type_names_are_the_exports() -> None:
    """The suffix a profile gets is the one `export slurm` writes for a MIG slice."""
    config = slurm_config(
        [
            {"id": "a", "host": "n1", "kind": "mig", "profile": "1g.10gb", "model": "H100"},
            {
                "id": "b",
                "host": "n1",
                "kind": "partition",
                "profile": "cpx/nps4",
                "model": "MI300X",
            },
        ]
    )
    assert sorted(config.types) == ["h100_1g.10gb", "mi300x_cpx.nps4"]
    assert profile_suffix("1g.10gb") == "_1g.10gb"
    assert profile_suffix("CPX/NPS4") == "_cpx.nps4"


def test_profile_and_model_pick_one_type() -> None:
    assert gres_for(JobRequest(profile="3g.40gb", gpus=2), TYPES) == ("gpu:h100_3g.40gb:2", ())
    request = JobRequest(profile="1g.10gb", model="A100")
    assert gres_for(request, TYPES) == ("gpu:a100_1g.10gb:1", ())
    assert gres_for(JobRequest(profile="gpu"), TYPES) == ("gpu:h100:1", ())
    assert matching_types(JobRequest(profile="cpx"), TYPES) == ["mi300x_cpx.nps4"]


def test_several_types_are_refused_with_the_choices() -> None:
    with pytest.raises(UsageError, match=r"a100_1g\.10gb, h100_1g\.10gb.*--model"):
        gres_for(JobRequest(profile="1g.10gb"), TYPES)


@pytest.mark.parametrize(
    ("model", "types", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", TYPES, "gpu:h100:1"),  # full name, export's short type name
        ("H100", TYPES, "gpu:h100:1"),
        # Two H100 models: the export names each by its long name, and the full name picks one.
        ("NVIDIA H100 80GB HBM3", {"h100-80gb-hbm3", "h100-pcie"}, "gpu:h100-80gb-hbm3:1"),
    ],
)
def test_model_may_be_the_cards_full_name(model: str, types: set[str], expected: str) -> None:
    assert gres_for(JobRequest(profile="gpu", model=model), types) == (expected, ())


def test_full_model_name_of_another_card_matches_nothing() -> None:
    with pytest.raises(SlurmCapacityError):
        gres_for(JobRequest(profile="gpu", model="NVIDIA A100-SXM4-80GB"), TYPES)


def test_types_that_differ_in_memory_mode_only_ask_for_the_mode() -> None:
    types = {"mi300x_cpx.nps1", "mi300x_cpx.nps4"}
    with pytest.raises(UsageError) as caught:
        gres_for(JobRequest(profile="cpx", model="MI300X"), types)
    message = str(caught.value)
    assert message.endswith("name the memory mode (--profile cpx/nps1 or --profile cpx/nps4)")
    assert "--model" not in message
    assert gres_for(JobRequest(profile="cpx/nps4", model="MI300X"), types) == (
        "gpu:mi300x_cpx.nps4:1",
        (),
    )


def test_types_that_differ_in_card_and_mode_name_both_ways() -> None:
    types = {"mi300x_cpx.nps1", "mi325x_cpx.nps4"}
    with pytest.raises(UsageError, match=r"add --model, or name the memory mode \(--profile cpx/"):
        gres_for(JobRequest(profile="cpx"), types)


def test_no_type_is_a_capacity_error() -> None:
    with pytest.raises(SlurmCapacityError) as caught:
        gres_for(JobRequest(profile="7g.80gb"), TYPES)
    assert caught.value.exit_code == ExitCode.NO_CAPACITY


def test_memory_asks_for_any_gpu_and_says_so() -> None:
    gres, notes = gres_for(JobRequest(memory_mib=10240, gpus=3), TYPES)
    assert gres == "gpu:3"
    assert notes and "memory" in notes[0]


def test_untyped_cluster_gets_untyped_gpus() -> None:
    assert gres_for(JobRequest(profile="gpu", gpus=2), set()) == ("gpu:2", ())
    with pytest.raises(SlurmCapacityError):
        gres_for(JobRequest(profile="1g.10gb"), set())


@pytest.mark.parametrize(
    ("request_fields", "spec_fields", "word"),
    [
        ({"same_island": True}, {}, "--same-island"),
        ({"preemptible": True}, {}, "--preemptible"),
        ({"bandwidth_class": "high"}, {}, "--bandwidth"),
        ({"vendor": "nvidia"}, {}, "--vendor"),
        ({}, {"policy": "spread"}, "--policy"),
        ({}, {"grace_s": 5.0}, "--grace"),
        ({"host": "node*"}, {}, "glob"),
        ({"profile": "mig"}, {}, "name the profile"),
    ],
)
def test_unmappable_requests_are_refused(
    request_fields: dict[str, object], spec_fields: dict[str, object], word: str
) -> None:
    spec = JobSpec(
        argv=["true"],
        request=JobRequest(**{"profile": "gpu", **request_fields}),  # type: ignore[arg-type]
        **spec_fields,  # type: ignore[arg-type]
    )
    with pytest.raises(UsageError, match=word) as caught:
        sbatch_request(spec, TYPES)
    assert caught.value.exit_code == ExitCode.USAGE


def test_options() -> None:
    spec = JobSpec(
        argv=["/opt/bin/train", "--epochs", "3"],
        request=JobRequest(profile="1g.10gb", model="H100", host="node[1-2]", priority=10),
        workdir="/scratch/me",
        requeue=True,
    )
    request = sbatch_request(spec, TYPES)
    assert request.args == (
        "--job-name=train",
        "--nodes=1",
        "--gres=gpu:h100_1g.10gb:1",
        "--requeue",
        "--nodelist=node[1-2]",
        "--nice=4000",
        "--chdir=/scratch/me",
    )
    assert "--no-requeue" in sbatch_request(_spec(), TYPES).args


def test_a_team_is_the_slurm_account() -> None:
    args = sbatch_request(_spec(team="train"), TYPES).args
    plain = sbatch_request(_spec(), TYPES).args
    assert [a for a in args if a.startswith("--account")] == ["--account=train"]
    assert [a for a in args if a != "--account=train"] == list(plain)  # nothing else changes
    assert not any(a.startswith("--account") for a in plain)


def test_nice_follows_priority() -> None:
    assert nice_for(50) == 0
    assert nice_for(10) > 0 > nice_for(90)


def _run_script(script: str, folder: Path) -> list[str]:
    done = subprocess.run(
        ["sh", "-c", script.replace("exec ", "exec printf '%s\\n' ", 1)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_script_runs_argv_verbatim(tmp_path: Path) -> None:
    argv = ["echo", "$(touch PWNED)", "`touch PWNED`", "a b", "'", ";touch PWNED", "$HOME"]
    script = batch_script(argv, {"X": "$(touch PWNED); y"})
    assert _run_script(script, tmp_path) == argv
    assert not (tmp_path / "PWNED").exists()
    assert "export X='$(touch PWNED); y'" in script


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
            min_size=1,
            max_size=12,
        ).filter(lambda s: "\n" not in s and "\r" not in s),
        min_size=1,
        max_size=4,
    )
)
def test_script_quotes_every_word(argv: list[str]) -> None:
    script = batch_script(["cmd", *argv], {})
    last = script.rstrip("\n").split("\n")[-1]  # sh splits lines at newlines only
    assert shlex.split(last) == ["exec", "cmd", *argv]


class NeverAsked:
    """A Slurm client that must not be reached: every call is recorded and fails."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        def call(*_args: object, **_kwargs: object) -> None:
            self.calls.append(name)
            raise AssertionError(f"Slurm was asked ({name}) before the request was checked")

        return call


@pytest.mark.parametrize("dry_run", [False, True])
def test_submit_refuses_what_slurm_cannot_do_before_asking_slurm(dry_run: bool) -> None:
    from gpupoolctl.slurm import jobs

    client = NeverAsked()
    spec = JobSpec(argv=["true"], request=JobRequest(profile="1g.10gb", same_island=True))
    with pytest.raises(UsageError, match="--same-island") as caught:
        jobs.submit(client, spec, dry_run=dry_run)  # type: ignore[arg-type]
    assert caught.value.exit_code == ExitCode.USAGE
    assert client.calls == []
