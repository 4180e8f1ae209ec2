"""Where the pool policy comes from: --pool-policy > GPUPOOL_POLICY > the XDG default."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.policy import PoolPolicy, default_policy_path, policy_path, resolve_policy

POLICY = "version: 1\nelastic:\n  rules:\n    - vendor: nvidia\n"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """An option file, an env file and a default file, each with a different rule count."""
    home = tmp_path / "home"
    default = home / ".config" / "gpupoolctl" / "pool.yaml"
    default.parent.mkdir(parents=True)
    default.write_text(POLICY)
    option = tmp_path / "option.yaml"
    option.write_text(POLICY + "    - vendor: amd\n")
    env = tmp_path / "env.yaml"
    env.write_text(POLICY + "    - vendor: amd\n    - model: H100\n")
    return {"home": home, "default": default, "option": option, "env": env}


def test_the_option_wins_over_the_variable_and_the_default(places) -> None:
    environ = {"HOME": str(places["home"]), "GPUPOOL_POLICY": str(places["env"])}
    assert policy_path(places["option"], environ) == places["option"]
    assert policy_path(str(places["option"]), environ) == places["option"]
    assert len(resolve_policy(places["option"], environ).elastic.rules) == 2


def test_the_variable_wins_over_the_default(places) -> None:
    environ = {"HOME": str(places["home"]), "GPUPOOL_POLICY": str(places["env"])}
    assert policy_path(None, environ) == places["env"]
    assert len(resolve_policy(None, environ).elastic.rules) == 3


def test_the_default_is_read_when_it_exists(places) -> None:
    environ = {"HOME": str(places["home"])}
    assert policy_path(None, environ) == places["default"]
    policy = resolve_policy(None, environ)
    assert policy.source == str(places["default"]) and len(policy.elastic.rules) == 1


def test_without_any_file_the_pool_is_static(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path)}
    assert policy_path(None, environ) is None
    assert resolve_policy(None, environ) == PoolPolicy()


def test_xdg_config_home_moves_the_default(tmp_path: Path, places) -> None:
    config = tmp_path / "xdg"
    (config / "gpupoolctl").mkdir(parents=True)
    (config / "gpupoolctl" / "pool.yaml").write_text("version: 1\n")
    environ = {"HOME": str(places["home"]), "XDG_CONFIG_HOME": str(config)}
    assert default_policy_path(environ) == config / "gpupoolctl" / "pool.yaml"
    assert policy_path(None, environ) == config / "gpupoolctl" / "pool.yaml"
    # The default under HOME is not consulted once XDG_CONFIG_HOME says where config lives.
    (config / "gpupoolctl" / "pool.yaml").unlink()
    assert policy_path(None, environ) is None


@pytest.mark.parametrize("value", ["", "relative/config"], ids=["empty", "relative"])
def test_an_empty_or_relative_xdg_config_home_is_ignored(places, value: str) -> None:
    environ = {"HOME": str(places["home"]), "XDG_CONFIG_HOME": value}
    assert policy_path(None, environ) == places["default"]


@pytest.mark.parametrize("option", ["", "   "])
def test_an_empty_option_is_a_usage_error(places, option: str) -> None:
    with pytest.raises(UsageError, match="--pool-policy / GPUPOOL_POLICY is empty"):
        policy_path(option, {"HOME": str(places["home"])})


def test_an_empty_variable_is_a_usage_error_not_the_default(places) -> None:
    with pytest.raises(UsageError, match="GPUPOOL_POLICY is empty"):
        policy_path(None, {"HOME": str(places["home"]), "GPUPOOL_POLICY": ""})


@pytest.mark.parametrize("via", ["option", "env"])
def test_a_missing_file_that_was_asked_for_is_one_line_naming_it(
    places, tmp_path: Path, via: str
) -> None:
    missing = tmp_path / "gone.yaml"
    environ = {"HOME": str(places["home"])}
    if via == "env":
        environ["GPUPOOL_POLICY"] = str(missing)
    with pytest.raises(SourceError) as info:
        resolve_policy(missing if via == "option" else None, environ)
    message = str(info.value)
    assert message.startswith(f"{missing}: no such pool policy file (given by ")
    assert "GPUPOOL_POLICY" in message and "\n" not in message


def test_a_bad_default_file_is_an_error_not_skipped(places) -> None:
    places["default"].write_text("version: 1\nteams: []\n")
    with pytest.raises(SourceError) as info:
        resolve_policy(None, {"HOME": str(places["home"])})
    assert (info.value.path, info.value.line) == (str(places["default"]), 2)
