"""The public parameters in a whole run (`run.protocol = "secagg"`): the users check every setup against the
data's users and ``protocol.min_users``, so a session smaller than the floor is refused by its users -- each
refusal a rejection in result.json's ledger -- and aborts with a warning naming AdvertiseKeys; a scenario
that sets a lower floor sums the same few users exactly."""

from __future__ import annotations

from pathlib import Path

import fedrecsim
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "secagg_small.toml"
#: Ten users, four of them online and no churn after: every round's session is over the same four users.
FEW_ONLINE = ["data.users=10", 'availability.model="bernoulli"', "availability.initial_online=0.4", "availability.p_join=0.0",
              "availability.p_leave=0.0", "availability.dropout=0.0", "protocol.length=8", "run.rounds=2"]


def _run(*overrides: str):  # type: ignore[no-untyped-def]
    return fedrecsim.run(parse_scenario(apply_overrides(read_tables(SCENARIO), [*FEW_ONLINE, *overrides])))


def test_a_session_below_t_of_all_users_is_refused_by_its_users_and_aborts() -> None:
    result = _run()
    online = result.rounds[0]["u0"]
    assert 2 <= online < 6  # fewer than t(10) = 6 of the ten users
    assert [(row["u0"], row["aborted"], row["participants"]) for row in result.rounds] == [(online, 1, 0)] * 2
    warnings = result.result["warnings"]
    # Every round aborted, so the run also warns that nobody answered (fedrecsim.runner._unanswered).
    assert warnings[0].startswith("nobody answered in any of the 2 rounds") and warnings[1:] == [
        f"round {r}: secure aggregation aborted at advertise_keys: 0 users remain, the threshold is t = {online // 2 + 1}"
        for r in (1, 2)
    ]
    faults = result.result["ledger"]["faults"]
    assert faults["rejected"] == {"malformed": 0, "unexpected": 0, "duplicate": 0, "invalid": 2 * online}
    problems = {entry["problem"] for entry in faults["rejections"]}
    assert all(problem.endswith(f"expected a valid secagg.setup from server:0: the neighbours of a user in a session of 6 to 10 "
                                f"users, received {online - 1} neighbours") for problem in problems)
    assert result.result["ledger"]["kinds"].get("secagg.advertise") is None  # no user sent a key


def test_a_scenario_that_accepts_smaller_sessions_sums_them_exactly() -> None:
    result = _run("protocol.min_users=2")
    assert all(row["aborted"] == 0 and row["participants"] == row["u0"] and row["wrong_words"] == 0 for row in result.rounds)
    assert not any(result.result["ledger"]["faults"]["rejected"].values())
