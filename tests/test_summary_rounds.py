"""Metamorphic, for every protocol whose rounds are alike: a 1-round and a 4-round run print the same
traffic per round in their summaries (each role's set-up, its bytes and messages per round and, for
privirec, its closing phase: the filters' broadcast after the last round, counted apart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrecsim.cli import main

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
#: Per protocol a scenario at a tiny size whose rounds carry the same messages (no churn, no dropout).
ALIKE_ROUNDS = {
    "fcf": ("fcf_static.toml", ["data.users=30", "data.items=40", "data.ratings=400"]),
    "dpmf": ("hua_s2.toml", ["data.users=30", "data.items=40", "data.ratings=400"]),
    "ldp_implicit": ("minto_ldp.toml", ["data.users=30", "data.items=40", "data.ratings=400"]),
    "fedvae": ("fedvae_comm_cost.toml", ["data.users=30", "data.items=40", "data.ratings=400", "protocol.users_per_round=5"]),
    "secagg": ("secagg_small.toml", ["data.users=8", "availability.dropout=0.0"]),
    "privirec": ("privirec_small.toml", ["data.users=20", "data.items=80", "data.ratings=400"]),
}
# prototypes is not among them: it runs exactly two rounds (Ribero et al.'s Algorithm 1).


def _traffic_per_round(tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str, overrides: list[str], rounds: int) -> list[str]:
    sets = [argument for override in [*overrides, f"run.rounds={rounds}"] for argument in ("--set", override)]
    assert main(["run", str(SCENARIOS / scenario), *sets, "--quiet", "--out", str(tmp_path / f"r{rounds}")]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("traffic per role: set-up (round 0)"))
    said = "1 round" if rounds == 1 else f"{rounds} rounds"  # never "1 rounds"
    assert f", {said}, " in lines[0] and lines[start].endswith(f"(bytes; mean over {said})"), (lines[0], lines[start])
    table = lines[start + 1:lines.index("", start)]
    assert table[0].split()[:3] == ["role", "set-up", "sent"] and len(table) >= 3
    # Per user, the means over the users (not the heaviest user: fedvae samples whom a round reaches).
    per_user = lines.index(next(line for line in lines if line.startswith("per user (bytes; ")))
    return table + [line.rsplit(None, 1)[0] for line in lines[per_user + 1:lines.index("", per_user)]]


@pytest.mark.parametrize("protocol", ALIKE_ROUNDS)
def test_a_1_round_and_a_4_round_run_print_the_same_traffic_per_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    scenario, overrides = ALIKE_ROUNDS[protocol]
    one = _traffic_per_round(tmp_path, capsys, scenario, overrides, 1)
    four = _traffic_per_round(tmp_path, capsys, scenario, overrides, 4)
    assert one == four
