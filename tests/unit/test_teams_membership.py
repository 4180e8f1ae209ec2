"""Which team a submission counts against (gpupoolctl.policy.membership.team_for): the one
asked for, else the user's first team in file order (by name or by Unix group), else the
default team; the exit codes the CLI gives for each refusal."""

from __future__ import annotations

import pytest

from gpupoolctl.errors import ExitCode, GpupoolError, UsageError
from gpupoolctl.policy import parse_policy
from gpupoolctl.policy.membership import NotAMember, team_for
from gpupoolctl.policy.model import TeamsPolicy

SOURCE = "pool.yaml"

POLICY = """\
version: 1
teams:
  vision:
    members: [ann, group:cv]
  speech:
    members: [ann, bob, group:audio]
  everyone:
    default: true
"""

NO_DEFAULT = """\
version: 1
teams:
  vision:
    members: [ann]
  speech:
    members: [group:audio]
"""


def teams_of(text: str) -> TeamsPolicy:
    return parse_policy(text, SOURCE).teams


def test_without_teams_nothing_is_chosen() -> None:
    teams = teams_of("version: 1\n")
    assert not teams.enabled
    assert team_for(teams, "ann") is None
    assert team_for(teams, "ann", frozenset({"cv"}), admin=True, source=SOURCE) is None


def test_without_teams_asking_for_one_is_a_usage_error_naming_the_file() -> None:
    with pytest.raises(UsageError) as caught:
        team_for(teams_of("version: 1\n"), "ann", asked="vision", source=SOURCE)
    message = str(caught.value)
    assert message.startswith("--team vision:")
    assert SOURCE in message and "no teams: section" in message
    assert caught.value.exit_code == ExitCode.USAGE == 2


def test_an_unknown_team_is_a_usage_error_listing_the_teams() -> None:
    with pytest.raises(UsageError) as caught:
        team_for(teams_of(POLICY), "ann", asked="visoin", source=SOURCE)
    message = str(caught.value)
    assert "no such team" in message and SOURCE in message
    assert message.endswith("teams: vision, speech, everyone")
    assert caught.value.exit_code == ExitCode.USAGE
    # Even an admin cannot submit for a team that does not exist.
    with pytest.raises(UsageError):
        team_for(teams_of(POLICY), "root", asked="visoin", admin=True)


def test_asking_for_a_team_one_is_not_in_is_refused_with_exit_1() -> None:
    with pytest.raises(NotAMember) as caught:
        team_for(teams_of(POLICY), "bob", asked="vision", source=SOURCE)
    message = str(caught.value)
    assert message.startswith("bob is not a member of team vision")
    assert SOURCE in message
    assert isinstance(caught.value, GpupoolError) and not isinstance(caught.value, UsageError)
    assert caught.value.exit_code == ExitCode.ERROR == 1


def test_asked_a_member_by_name_or_by_group_gets_it() -> None:
    teams = teams_of(POLICY)
    assert team_for(teams, "ann", asked="speech") == "speech"  # not her first: still hers
    assert team_for(teams, "carl", frozenset({"cv"}), asked="vision") == "vision"
    with pytest.raises(NotAMember):  # a group of another team does not make carl a member
        team_for(teams, "carl", frozenset({"cv"}), asked="speech")


def test_an_admin_may_submit_for_any_team() -> None:
    assert team_for(teams_of(POLICY), "ops", asked="vision", admin=True) == "vision"
    assert team_for(teams_of(NO_DEFAULT), "ops", asked="speech", admin=True) == "speech"


def test_anyone_may_submit_for_the_default_team() -> None:
    assert team_for(teams_of(POLICY), "zed", asked="everyone") == "everyone"
    assert team_for(teams_of(POLICY), "ann", asked="everyone") == "everyone"


def test_not_asked_the_first_team_in_file_order_wins() -> None:
    teams = teams_of(POLICY)
    assert team_for(teams, "ann") == "vision"  # in vision and speech: vision comes first
    assert team_for(teams, "bob") == "speech"
    # By group: the first team whose groups include one of the user's.
    assert team_for(teams, "carl", frozenset({"audio", "cv"})) == "vision"
    assert team_for(teams, "carl", frozenset({"audio"})) == "speech"
    # File order, not the order of the names.
    reordered = teams_of(
        "version: 1\nteams:\n  zeta:\n    members: [ann]\n  alpha:\n    members: [ann]\n"
    )
    assert team_for(reordered, "ann") == "zeta"


def test_not_asked_and_in_no_team_the_default_team() -> None:
    teams = teams_of(POLICY)
    assert team_for(teams, "zed") == "everyone"
    assert team_for(teams, "zed", frozenset({"staff"})) == "everyone"


def test_in_no_team_and_no_default_is_refused_with_exit_1() -> None:
    teams = teams_of(NO_DEFAULT)
    assert team_for(teams, "carl", frozenset({"audio"})) == "speech"
    with pytest.raises(NotAMember) as caught:
        team_for(teams, "zed", frozenset({"staff"}), source=SOURCE)
    message = str(caught.value)
    assert message.startswith("zed is in no team") and SOURCE in message
    assert "--team" in message
    assert caught.value.exit_code == ExitCode.ERROR
    # Without a source the message names no file.
    with pytest.raises(NotAMember) as caught:
        team_for(teams, "zed")
    assert " in pool.yaml" not in str(caught.value)
