"""What secure aggregation's recovery does to PriviRec's power method when users drop mid-protocol.

Secure aggregation delivers what it promises -- the exact sum over the users that sent their masked
input -- and so (1) the power iterations multiply by P~ minus the dropped users' rows while V and P~ count
them: the filters, and the scores, leave the centralized ones; (2) PriviRec's server, which knows P~ and
X, computes P~ X - Y_l: the dropped users' own inputs, whose nonzero rows are their items.
"""

from __future__ import annotations

import numpy as np

import fedrecsim
from fedrecsim.models.gfcf import qr_positive
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.roles import POWER, members_missing
from privirec_harness import table as _table


def _dropping(variant: str, seed: int = 1) -> dict:
    table = _table(variant=variant, crash_stage="masked_input_collection")
    table["run"]["seed"] = seed
    table["availability"] = {"dropout": 0.03}
    return table


def test_one_dropped_user_in_privirec_leaks_its_whole_profile_to_the_server() -> None:
    result = fedrecsim.run(_dropping("privirec"))
    rounds = result.rounds
    assert [row["dropped"] for row in rounds] == [1, 0]
    assert rounds[0]["exposed_users"] == 1 and rounds[0]["profiles_leaked"] == 1
    server = result.outcome.state["server"]
    users = result.outcome.state["users"]
    first = next(seen for seen in server.sums if seen.session == POWER + 1)
    (dropped,) = members_missing(first.members, first)
    assert users[dropped].sessions[POWER + 1] == "crashed"
    # What the server computes from what it holds: P~ X_0 - Y_1 ...
    Y = result.outcome.state["params"].ring.decode(first.result.total).reshape(server.bases[0].shape)
    difference = server.item_item @ server.bases[0] - Y
    # ... is the dropped user's own input A^(u)T A^(u) X_0, whose nonzero rows are its items.
    own = local.power_input(users[dropped].items, server.degrees, server.bases[0])
    np.testing.assert_allclose(difference, own, atol=1e-9)
    assert set(np.flatnonzero(np.abs(difference).max(axis=1) > 1e-6)) == set(users[dropped].items.tolist())
    # The dropped user recovered at the round's end, took part in round 2 and got the filters.
    assert users[dropped].filters is not None and users[dropped].sessions[POWER + 2] == "done"


def test_privirec_k_does_not_expose_the_dropped_user() -> None:
    result = fedrecsim.run(_dropping("privirec_k"))
    assert [row["dropped"] for row in result.rounds] == [1, 0]
    assert result.metrics["exposed_users"] == 0 and result.metrics["profiles_leaked"] == 0
    assert result.outcome.state["server"].item_item is None


def test_the_power_method_under_dropout_leaves_the_centralized_filters() -> None:
    result = fedrecsim.run(_dropping("privirec"))
    final = result.metrics
    # Not a bug but the point: the sum left the dropped user out of one iteration's matrix.
    assert final["max_score_gap"] > 1e-3
    monitor = result.result["invariants"][0]
    assert monitor["checked"] == 0 and monitor["violations"] == 0  # not comparable with users missing
    # The server's QR is the QR of the sum it got: Y_1 over the survivors only.
    server = result.outcome.state["server"]
    users = result.outcome.state["users"]
    first = next(seen for seen in server.sums if seen.session == POWER + 1)
    survivors = first.result.survivors
    expected = sum(local.power_input(users[party].items, server.degrees, server.bases[0]) for party in survivors)
    X1, _ = qr_positive(expected)
    np.testing.assert_allclose(server.bases[1], X1, atol=1e-8)


def test_without_dropout_nothing_is_exposed() -> None:
    result = fedrecsim.run(_table())
    assert [row["dropped"] for row in result.rounds] == [0, 0]
    assert result.metrics["exposed_users"] == 0 and result.metrics["profiles_leaked"] == 0
