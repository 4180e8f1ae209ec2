"""`alloc` end to end on the bundled simulated pool through the real CLI: a hold by hand is
admitted against its holder's team's quota as submit's work is, `quota` counts it and `usage`
books it to that team; when nothing fits, "free now" lists what is free where it may go."""

from __future__ import annotations

from pathlib import Path

DGX = "sg-dgx01"  # eight whole H100 80 GB cards
POLICY = """\
version: 1
teams:
  serve:
    members: [alice]
    quota: {nominal: {cards: 2}, borrowing-limit: {cards: 0}}
  train:
    members: [bob]
    quota: {nominal: {cards: 6}}
"""


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def in_use(cli, policy: Path) -> dict[str, int]:
    run = cli("-q", "--pool-policy", str(policy), "quota", "-o", "json")
    assert run.code == 0, run.stderr
    return {r["team"]: r["in_use"] for r in run.json()["teams"] if r["resource"] == "cards"}


def test_alloc_counts_against_the_holders_team_and_stops_at_its_hard_limit(
    cli, tmp_path: Path
) -> None:
    policy = tmp_path / "pool.yaml"
    policy.write_text(POLICY)

    def alloc(*args: str):
        return cli("-q", "--pool-policy", str(policy), "alloc", "--profile", "gpu", *args)

    held = [alloc("--owner", "alice", "--host", DGX) for _ in range(2)]
    assert [r.code for r in held] == [0, 0], [r.stderr for r in held]
    refused = alloc("--owner", "alice", "--host", DGX)
    assert refused.code == 5, refused.stderr  # six cards free there, none for team serve
    assert "team serve at its limit (2 of 2 cards)" in one_line(refused.stderr)
    assert refused.stdout == ""
    assert in_use(cli, policy) == {"serve": 2, "train": 0}

    other = alloc("--owner", "bob", "--team", "train", "--host", DGX)
    assert other.code == 0, other.stderr
    assert in_use(cli, policy) == {"serve": 2, "train": 1}
    unknown = alloc("--owner", "bob", "--team", "nosuch")
    assert unknown.code == 2 and "no such team" in one_line(unknown.stderr)

    usage = cli("-q", "usage", "--by", "team", "-o", "json")
    assert usage.code == 0, usage.stderr
    assert {r["team"]: r["holds"] for r in usage.json()["rows"]} == {"serve": 2, "train": 1}

    # A released hold gives the team its room back.
    assert cli("-q", "release", held[0].stdout.strip()).code == 0
    again = alloc("--owner", "alice", "--host", DGX)
    assert again.code == 0, again.stderr


def test_alloc_free_now_lists_only_the_hosts_asked_for(cli) -> None:
    assert cli("-q", "pool", "--summary").code == 0
    run = cli("-q", "alloc", "--profile", "gpu", "--host", "sg-a100-*", "--gpus", "4")
    assert run.code == 5, run.stderr
    line = one_line(run.stderr)
    # sg-a100-01 has three whole cards free and MIG slices of an A100: nothing of the H100s'
    # 1g.10gb, nor of the MI300X or L40S nodes.
    assert "3 matching slice(s) free" in line, line
    free_now = line.split("free now on sg-a100-*: ", 1)[1]
    assert free_now == "2 x 2g.10gb, 1 x 3g.20gb, 3 x gpu", line
