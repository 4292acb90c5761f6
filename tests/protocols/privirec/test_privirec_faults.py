"""PriviRec over a faulty network: duplicated and reordered messages change nothing; lost messages leave
users out of sums, never corrupt one.

A user's part in each sum is asked for by session: a lost setup means the server went on without it, and
the user, finding the next session's setup, misses this one and takes part in the next (it must not offer
the degrees where the server sums P').
"""

from __future__ import annotations

import numpy as np

import fedrecsim
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.roles import DEGREES_SESSION, ITEM_ITEM_SESSION, POWER
from privirec_harness import table


def _faulty(**network: object) -> dict:
    scenario = table()
    scenario["network"].update(network)
    return scenario


def _input(user, session: int, server) -> np.ndarray:  # type: ignore[no-untyped-def]
    """What ``user`` offers to ``session``, computed here from its items and what the server (its state,
    `ServerState`) broadcast."""
    if session == DEGREES_SESSION:
        return local.degree_input(user.items, user.n_items)
    if session == ITEM_ITEM_SESSION:
        return local.item_item_input(user.items, user.n_items)
    return local.power_input(user.items, server.degrees, server.bases[session - POWER - 1]).ravel()


def test_duplicated_and_reordered_messages_change_nothing() -> None:
    clean = fedrecsim.run(table())
    for network in ({"duplicate": 0.3}, {"reorder": 0.3, "reorder_delay_s": 0.5}):
        faulty = fedrecsim.run(_faulty(**network))
        assert faulty.metrics["ndcg@20"] == clean.metrics["ndcg@20"], network
        assert faulty.metrics["max_score_gap"] < 1e-6, network
        assert [row["dropped"] for row in faulty.rounds] == [0, 0], network
        np.testing.assert_array_equal(faulty.outcome.state["server"].basis, clean.outcome.state["server"].basis)


def test_under_loss_every_sum_is_exact_over_the_users_it_kept() -> None:
    result = fedrecsim.run(_faulty(loss=0.02))
    server, users = result.outcome.state["server"], result.outcome.state["users"]
    ring = result.outcome.state["params"].ring
    sessions = [seen.session for seen in server.sums]
    assert sessions == [DEGREES_SESSION, ITEM_ITEM_SESSION, POWER + 1, POWER + 2]
    shortest = min(len(seen.result.survivors) for seen in server.sums)
    assert 0 < shortest < len(users)  # the loss did leave users out
    for seen in server.sums:
        expected = sum(_input(users[party], seen.session, server) for party in seen.result.survivors)
        np.testing.assert_allclose(ring.decode(seen.result.total), expected, atol=1e-6, err_msg=f"session {seen.session}")


def test_a_user_whose_setup_was_lost_misses_that_session_and_takes_part_in_the_next() -> None:
    result = fedrecsim.run(_faulty(loss=0.02))
    server, users = result.outcome.state["server"], result.outcome.state["users"]
    survivors = {seen.session: set(seen.result.survivors) for seen in server.sums}
    missed = {party: [s for s, how in user.sessions.items() if how == "missed"] for party, user in users.items()}
    missed = {party: sessions for party, sessions in missed.items() if sessions}
    assert missed, "seed 4 at 2% loss loses a setup; choose another seed if the generator changed"
    for party, sessions in missed.items():
        for session in sessions:
            assert party not in survivors[session]
            later = [s for s, how in users[party].sessions.items() if s > session and how == "done"]
            assert later and party in survivors[later[0]]


def test_each_sum_of_the_set_up_has_the_round_timeout() -> None:
    """With 1 s links a sum takes about 7 virtual seconds: an 8 s round timeout fits each of the set-up's two
    sums (the degrees, P'), not both together."""
    scenario = table()
    scenario["network"]["latency"] = {"model": "constant", "seconds": 1.0}
    scenario["run"]["round_timeout_s"] = 8.0
    scenario["protocol"]["stage_timeout_s"] = 3.0
    result = fedrecsim.run(scenario)
    assert result.result["warnings"] == [] and result.result["rounds_completed"] == 2
    sessions = [seen.session for seen in result.outcome.state["server"].sums]
    assert sessions == [DEGREES_SESSION, ITEM_ITEM_SESSION, POWER + 1, POWER + 2]
