"""JobRequest: priorities, validation, the dict form, and which slices match."""

from __future__ import annotations

import pytest

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.sched import PRIORITIES, JobRequest, matches, parse_priority
from gpupoolctl.sched.request import sized_profile

H100_MIG = {
    "id": "n1/gpu6/mig-1g.10gb@0",
    "host": "n1",
    "kind": "mig",
    "profile": "1g.10gb",
    "memory_mib": 9984,
    "vendor": "nvidia",
    "model": "NVIDIA H100 80GB HBM3",
    "bandwidth_class": "ultra",
}
MI300X_CPX = {
    "id": "n2/gpu3",
    "host": "n2",
    "kind": "partition",
    "profile": "CPX/NPS4",
    "memory_mib": 49152,
    "vendor": "amd",
    "model": "AMD Instinct MI300X",
    "bandwidth_class": "ultra",
}
L40S = {
    "id": "n3/gpu0",
    "host": "n3",
    "kind": "gpu",
    "profile": None,
    "memory_mib": 46068,
    "vendor": "nvidia",
    "model": "NVIDIA L40S",
    "bandwidth_class": "standard",
}


@pytest.mark.parametrize(
    ("text", "value"), [("low", 10), ("Normal", 50), ("HIGH", 90), ("0", 0), (" 100 ", 100)]
)
def test_priorities_by_name_or_number(text, value):
    assert parse_priority(text) == value
    assert PRIORITIES == {"low": 10, "normal": 50, "high": 90}


@pytest.mark.parametrize("text", ["urgent", "101", "-1", "", "5.5"])
def test_bad_priorities_are_usage_errors(text):
    with pytest.raises(UsageError) as caught:
        parse_priority(text)
    assert caught.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (JobRequest(gpus=0), "gpus must be at least 1"),
        (JobRequest(profile="1g.10gb", memory_mib=9000), "not both"),
        (JobRequest(memory_mib=0), "more than zero"),
        (JobRequest(vendor="intel"), "unknown vendor"),
        (JobRequest(bandwidth_class="fast"), "unknown bandwidth class"),
        (JobRequest(priority=101), "priority"),
        (JobRequest(host=" "), "host pattern"),
        (JobRequest(profile=""), "profile"),
    ],
)
def test_contradictions_are_refused_up_front(request_, message):
    with pytest.raises(UsageError, match=message):
        request_.validate()


def test_valid_requests_pass():
    JobRequest().validate()
    JobRequest(gpus=4, same_island=True, model="H100", priority=90, vendor="NVIDIA").validate()


def test_dict_form_round_trips_and_tolerates_newer_keys():
    request = JobRequest(gpus=2, profile="3g.40gb", same_node=True, priority=90, preemptible=True)
    data = request.to_dict()
    assert "memory_mib" not in data and data["gpus"] == 2
    assert JobRequest.from_dict(data) == request
    assert JobRequest.from_dict({**data, "job": "j-7", "future": 1}) == request
    with pytest.raises(UsageError, match="gpus must be an integer"):
        JobRequest.from_dict({"gpus": "2"})
    with pytest.raises(UsageError, match="true or false"):
        JobRequest.from_dict({"same_node": 1})


def test_matching_rules():
    assert matches(H100_MIG, JobRequest(profile="1G.10GB"))
    assert matches(H100_MIG, JobRequest(profile="mig", model="h100"))
    assert not matches(H100_MIG, JobRequest(profile="gpu"))
    assert matches(L40S, JobRequest(profile="gpu", vendor="NVIDIA"))
    assert matches(MI300X_CPX, JobRequest(profile="cpx"))
    assert matches(MI300X_CPX, JobRequest(profile="partition", vendor="amd"))
    # memory is a minimum; bandwidth class a minimum (standard < high < ultra)
    assert matches(H100_MIG, JobRequest(memory_mib=9984))
    assert not matches(H100_MIG, JobRequest(memory_mib=9985))
    assert matches(H100_MIG, JobRequest(bandwidth_class="high"))
    assert not matches(L40S, JobRequest(bandwidth_class="high"))
    assert matches(L40S, JobRequest(bandwidth_class="standard"))
    assert matches(L40S, JobRequest(host="n[0-3]"))
    assert not matches(L40S, JobRequest(host="n1*"))
    assert not matches(L40S, JobRequest(model="A100"))


def test_describe_reads_well():
    text = JobRequest(gpus=4, model="H100", same_island=True, bandwidth_class="ultra").describe()
    assert text == "4 x any slice, model H100, bandwidth >= ultra, same island"


@pytest.mark.parametrize(
    ("profile", "mem", "expected"),
    [
        (None, None, "gpu"),  # says nothing about its size: whole cards
        ("1g.10gb", None, "1g.10gb"),
        (None, "10G", None),  # a memory size: any slice that big
        ("", None, ""),  # given, empty: kept, for validate() to refuse
        (None, "", None),
    ],
)
def test_a_job_without_a_size_gets_whole_cards(
    profile: str | None, mem: str | None, expected: str | None
) -> None:
    assert sized_profile(profile, mem) == expected
