"""Inventory values that reach ssh are data: host and user names that ssh_config's
ProxyCommand (%h, %r) or fabric's config parsing could read as more than a name are refused."""

from __future__ import annotations

import pytest

from gpupoolctl.remote.target import target_from_vars


@pytest.mark.parametrize(
    "address",
    [
        "-oProxyCommand=touch${IFS}x",  # an option to `ssh -W %h:%p bastion`
        "node1 -oProxyCommand=x",
        "*\n    ProxyCommand touch x",  # a config line of its own
        "node1\tx",
        "node1;id",
        "$(id)",
        "`id`",
        "node1|id",
        "",
    ],
)
def test_bad_ssh_addresses_fail_that_host_only(address: str) -> None:
    target = target_from_vars("n1", {"ansible_host": address})
    assert target.invalid is not None
    assert "not a host name" in target.invalid
    assert target.invalid.startswith("host 'n1':")


def test_the_alias_is_checked_when_it_is_the_host_name() -> None:
    assert target_from_vars("-oProxyCommand=x", {}).invalid is not None
    # With an address, the alias is only a label.
    assert target_from_vars("odd (alias)", {"ansible_host": "10.0.0.1"}).invalid is None


@pytest.mark.parametrize("user", ["-lroot", "root;id", "root\nx", "a -oX=y", "x\\", "$(id)x'"])
def test_bad_users_are_refused(user: str) -> None:
    target = target_from_vars("n1", {"ansible_host": "10.0.0.1", "ansible_user": user})
    assert target.invalid is not None and "not a login name" in target.invalid


@pytest.mark.parametrize(
    ("address", "user"),
    [
        ("10.0.0.1", "gpuadmin"),
        ("fe80::1%eth0", "root"),
        ("sg-dgx01.example.com", "svc_gpu"),
        ("node_1", "CORP\\alice"),
        ("[2001:db8::1]", "first last"),
    ],
)
def test_ordinary_names_are_kept(address: str, user: str) -> None:
    target = target_from_vars("n1", {"ansible_host": address, "ansible_user": user})
    assert target.invalid is None
    assert (target.address, target.user) == (address, user)


def test_local_hosts_are_not_ssh_names() -> None:
    target = target_from_vars("odd host's name", {"transport": "local"})
    assert target.invalid is None
