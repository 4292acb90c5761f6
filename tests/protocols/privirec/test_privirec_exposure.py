"""PriviRec's exposure count when several users drop in one round: a group of at most ``exposure_group``
dropped users is isolated by P~ X - Y_l, and what the server learns is exactly the union of their items."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fedrecsim
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.protocol import _exposure
from fedrecsim.protocols.privirec.roles import ITEM_ITEM_SESSION, POWER, Iteration, ServerState, members_missing
from fedrecsim.protocols.secagg import Aggregate, Stage
from privirec_harness import table as _table


@pytest.mark.parametrize(
    ("seed", "expected", "first"),
    # seed 3: two users drop in round 1, a group of exactly exposure_group = 2, three in round 2, more than it;
    # seed 1: three in round 1, then one in round 2, isolated with the basis of round 2, X_1.
    [(3, [(2, 2, 1), (3, 0, 0)], 1), (1, [(3, 0, 0), (1, 1, 1)], 2)],
)
def test_a_group_of_at_most_exposure_group_dropped_users_exposes_the_union_of_their_profiles(seed, expected, first) -> None:  # type: ignore[no-untyped-def]
    table = _table(variant="privirec", crash_stage="masked_input_collection", exposure_group=2)
    table["run"]["seed"] = seed
    table["availability"] = {"dropout": 0.05}
    result = fedrecsim.run(table)
    assert [(row["dropped"], row["exposed_users"], row["profiles_leaked"]) for row in result.rounds] == expected
    assert (result.metrics["exposed_users"], result.metrics["profiles_leaked"]) == (expected[first - 1][1], 1)
    server, users = result.outcome.state["server"], result.outcome.state["users"]
    seen = next(seen for seen in server.sums if seen.session == POWER + first)
    dropped = members_missing(seen.members, seen)
    # What the server computes from what it holds, P~ X_(l-1) - Y_l, is nonzero on exactly their items.
    basis = server.bases[first - 1]
    total = result.outcome.state["params"].ring.decode(seen.result.total).reshape(basis.shape)
    difference = server.item_item @ basis - total
    revealed = set(np.flatnonzero(np.abs(difference).max(axis=1) > 1e-6).tolist())
    assert revealed == set(np.concatenate([users[party].items for party in dropped]).tolist())


def _seen(total: np.ndarray, members: list[Party], survivors: list[Party], ring: Ring, session: int = POWER + 1) -> Iteration:
    encoded, _ = ring.encode(total.ravel())
    stages = {Stage.MASKED_INPUT: tuple(survivors)}
    return Iteration(session, tuple(members), Aggregate(session, encoded, 2, 2, {}, stages))


def test_a_leaked_profile_is_counted_only_when_the_rows_the_server_learns_are_the_dropped_items() -> None:
    """The simulator's exposure check on hand-made sums: m = 5 items, users 0 (items 0, 2), 1 (no items),
    2 (items 1, 3, 4)."""
    ring = Ring(64, 40)
    rng = np.random.default_rng(0)
    X = np.linalg.qr(rng.standard_normal((5, 2)))[0]
    items = {0: np.array([0, 2]), 1: np.array([], dtype=np.int64), 2: np.array([1, 3, 4])}
    degrees = sum(local.degree_input(row, 5) for row in items.values())
    inputs = {index: local.power_input(row, degrees, X) for index, row in items.items()}
    p_tilde = local.normalize_item_item(local.symmetric_from_upper(sum(local.item_item_input(row, 5) for row in items.values()), 5), degrees)
    parties = [Party(Role.USER, index) for index in items]
    users = {party: SimpleNamespace(items=items[party.index]) for party in parties}
    in_p_prime = _seen(np.zeros(1), parties, parties, ring, ITEM_ITEM_SESSION)  # every user is in P'
    server = SimpleNamespace(state=ServerState(item_item=p_tilde, bases=[X], sums=[in_p_prime]), params=SimpleNamespace(ring=ring))

    def exposure(survivors: list[int], total: np.ndarray | None = None, group: int = 10) -> tuple[int, int]:
        total = sum(inputs[index] for index in survivors) if total is None else total
        return _exposure(server, _seen(total, parties, [parties[i] for i in survivors], ring), users, group, 1e-6)

    assert exposure([0, 1, 2]) == (0, 0)  # nobody missing
    assert exposure([1, 2]) == (1, 1)  # user 0 dropped: its rows 0 and 2 stand out
    assert exposure([0, 2]) == (1, 0)  # user 1 dropped, with no items: nothing to learn, nothing leaked
    assert exposure([2]) == (2, 1)  # users 0 and 1: the union of their items, {0, 2}
    assert exposure([2], group=1) == (0, 0)  # two missing, more than a group of one
    # A sum that is off elsewhere too: the rows the server sees are not the dropped user's items.
    assert exposure([1, 2], total=inputs[1] + inputs[2] + 0.5) == (1, 0)
    # User 0 missing from P' as well: P~ is P' without it, so P~ X - Y_1 is zero -- nothing isolated.
    without_0 = [parties[1], parties[2]]
    p_tilde_without_0 = local.normalize_item_item(
        local.symmetric_from_upper(sum(local.item_item_input(items[i], 5) for i in (1, 2)), 5), degrees
    )
    inputs_without_0 = {i: local.power_input(items[i], degrees, X) for i in (1, 2)}
    server.state = ServerState(item_item=p_tilde_without_0, bases=[X], sums=[_seen(np.zeros(1), parties, without_0, ring, ITEM_ITEM_SESSION)])
    seen = _seen(inputs_without_0[1] + inputs_without_0[2], parties, without_0, ring)
    assert _exposure(server, seen, users, 10, 1e-6) == (0, 0)
    no_item_item = SimpleNamespace(state=ServerState(item_item=None, bases=[X]), params=SimpleNamespace(ring=ring))
    seen = _seen(inputs[1] + inputs[2], parties, parties[1:], ring)
    assert _exposure(no_item_item, seen, users, 10, 1e-6) == (0, 0)  # PriviRec-k: no P~ at the server
