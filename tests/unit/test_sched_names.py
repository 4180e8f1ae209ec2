"""Unknown names vs a pool too small: a profile no catalog or slice has is a usage error
(2), a --host that matches no host is an unknown host (1); known names pass (exit 5 is then
the caller's, for capacity)."""

from __future__ import annotations

import pytest

from gpupoolctl.errors import ExitCode, GpupoolError
from gpupoolctl.sched import JobRequest
from gpupoolctl.sched.names import catalog_profiles, check_names

POOL = [
    {"id": "n1/gpu0", "host": "n1", "kind": "gpu", "profile": None},
    {"id": "n1/gpu1/mig-1g.10gb@0", "host": "n1", "kind": "mig", "profile": "1g.10gb"},
    {"id": "n2/gpu3/xpx", "host": "n2", "kind": "partition", "profile": "newmode/nps9"},
]


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (JobRequest(profile="9g.99gb"), ExitCode.USAGE),
        (JobRequest(profile="gpu", host="nosuch*"), ExitCode.ERROR),
    ],
)
def test_unknown_names_are_told_apart(request_, code):
    with pytest.raises(GpupoolError) as caught:
        check_names(request_, POOL)
    assert caught.value.exit_code == code


@pytest.mark.parametrize(
    "request_",
    [
        JobRequest(profile="7g.80gb"),  # in the catalog, not in this pool: capacity
        JobRequest(profile="cpx/nps4"),
        JobRequest(profile="newmode"),  # not in the catalog, but a slice of the pool has it
        JobRequest(profile="MIG"),
        JobRequest(profile="gpu", host="n*"),
    ],
)
def test_known_names_pass(request_):
    check_names(request_, POOL)


def test_the_catalog_knows_every_mig_profile_and_amd_mode_of_the_bundled_pool():
    assert {"1g.10gb", "3g.40gb", "2g.10gb", "3g.20gb", "cpx", "spx", "cpx/nps4"} <= set(
        catalog_profiles()
    )
