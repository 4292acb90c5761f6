"""PriviRec's parties (`fedrecsim.protocols.privirec.roles`): what the server keeps and broadcasts -- exact
degrees, the bases and factors of every iteration, S_k and PriviRec-k's spectrum -- the stage at which a
dropped user goes silent, and a user that refuses a basis of the wrong shape."""

from __future__ import annotations

import numpy as np
import pytest
import trio

import fedrecsim
from fedrecsim.actors.server import Server
from fedrecsim.data.prepare import prepare_data
from fedrecsim.errors import ProtocolViolation
from fedrecsim.models.gfcf import gaussian_start, qr_positive
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.messages import Basis
from fedrecsim.protocols.privirec.protocol import start_rng
from fedrecsim.protocols.privirec.roles import POWER, PriviRecUser, members_missing, session_round
from fedrecsim.protocols.secagg import SecAggParams, Stage, crypto
from fedrecsim.protocols.secagg.messages import Advertise
from fedrecsim.scenario import parse_scenario
from fedrecsim.seeding import Stream, generator
from fedrecsim.testing import open_network
from privirec_harness import table as _table


def test_the_server_keeps_exact_degrees_every_basis_and_factor_and_publishes_s_k_and_the_spectrum() -> None:
    table = _table(variant="privirec_k", k=6, oversample=3, secagg="ideal")
    scenario = parse_scenario(table)
    train, _ = prepare_data(scenario.data, scenario.run.seed)
    result = fedrecsim.run(table)
    server, users = result.outcome.state["server"], result.outcome.state["users"]
    # The degree sum is rounded to the integers it is: every user decoded exactly the item degrees.
    degrees = np.bincount(train.items, minlength=train.n_items).astype(float)
    assert np.array_equal(server.degrees, degrees)
    assert all(np.array_equal(user.degrees, degrees) for user in users.values())
    # X_0 is the seeded Gaussian start (p = k + oversample = 9 columns); X_l, T_l the QR of each sum Y_l.
    np.testing.assert_array_equal(server.bases[0], gaussian_start(60, 9, start_rng(4)))
    assert len(server.bases) == 2 and [seen.session for seen in server.sums] == [1, POWER + 1, POWER + 2]
    ring = result.outcome.state["params"].ring
    for l, seen in enumerate(server.sums[1:], start=1):
        Y = ring.decode(seen.result.total).reshape(60, 9)
        X, T = qr_positive(Y)
        np.testing.assert_array_equal(seen.T, T)
        following = server.bases[l] if l < len(server.bases) else server.basis
        np.testing.assert_array_equal(following, X)
    np.testing.assert_array_equal(server.T, server.sums[-1].T)
    # The filters: S_k = the first k columns of X_L, and PriviRec-k's spectrum diag(T_L)[:k].
    for user in users.values():
        np.testing.assert_array_equal(user.filters.basis, server.basis[:, :6])
        np.testing.assert_array_equal(user.filters.spectrum, np.diag(server.T)[:6])
        assert user.filters.item_item is None and user.phase == "done"
        assert user.sessions == {1: "done", POWER + 1: "done", POWER + 2: "done"}
    assert server.item_item is None


def test_privirec_users_hold_the_servers_p_tilde_and_their_full_filters() -> None:
    result = fedrecsim.run(_table(variant="privirec", k=5, ideal_k=3, secagg="ideal"))
    server, users = result.outcome.state["server"], result.outcome.state["users"]
    assert [seen.session for seen in server.sums] == [1, 2, POWER + 1, POWER + 2]
    # The users mirror the broadcast upper triangle (the server's product rounds its two halves apart by an ulp).
    rows, columns = np.triu_indices(60)
    mirrored = local.symmetric_from_upper(server.item_item[rows, columns], 60)
    np.testing.assert_allclose(mirrored, server.item_item, rtol=1e-15, atol=1e-17)
    for user in users.values():
        np.testing.assert_array_equal(user.item_item, mirrored)
        np.testing.assert_array_equal(user.filters.item_item, mirrored)
        np.testing.assert_array_equal(user.filters.basis, server.basis[:, :5])
        assert user.filters.spectrum is None and user.filters.ideal_rank == 3


def test_a_dropped_user_goes_silent_at_the_stage_drawn_from_its_own_stream() -> None:
    """crash_stage = random: before each session a user draws a stage from (Stream.PROTOCOL, 1, its index);
    PriviRec-k's user draws in sessions 1 (degrees) and 3 (round 1), so round 1 uses its second draw."""
    table = _table(variant="privirec_k", secagg="ideal", graph="complete", threshold=0.2)
    table["run"]["seed"] = 2
    table["availability"] = {"dropout": 0.2}
    result = fedrecsim.run(table)
    server = result.outcome.state["server"]
    seen = next(seen for seen in server.sums if seen.session == POWER + 1)
    dropped = [party for party in seen.members if party not in seen.result.stages[Stage.UNMASKING]]
    assert len(dropped) >= 4
    stopped = {}
    for party in dropped:
        for stage in Stage:
            if party not in seen.result.stages[stage]:
                stopped[party] = stage
                break
    assert len(set(stopped.values())) >= 2
    for party, stage in stopped.items():
        rng = generator(2, Stream.PROTOCOL, 1, party.index)
        rng.integers(4)  # session 1's draw
        assert stage is tuple(Stage)[int(rng.integers(4))], party
    assert set(members_missing(seen.members, seen)) == {p for p, s in stopped.items() if s is not Stage.UNMASKING}


@pytest.mark.parametrize(("session", "round_index"), [(1, 0), (2, 0), (POWER + 1, 1), (POWER + 7, 7)])
def test_sessions_belong_to_the_set_up_or_to_their_power_iteration(session: int, round_index: int) -> None:
    assert session_round(session) == round_index


async def test_a_user_refuses_a_basis_of_another_item_count(autojump_clock) -> None:
    async with open_network() as sim:
        sim.attach(SERVER, Party(Role.USER, 0))
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        user = PriviRecUser(Party(Role.USER, 0), sim.network, sim.actor_rng(Party(Role.USER, 0)), np.array([1, 3]), 5,
                            SecAggParams(), None, exact_item_item=False, iterations=2, stage_rng=np.random.default_rng(0))
        user.phase, user.degrees = "power", np.ones(5)
        server.send(Party(Role.USER, 0), Basis(1, np.zeros((6, 2))))
        with pytest.raises(ProtocolViolation, match=r"^user:0 received a basis of shape \(6, 2\)$"):
            with trio.fail_after(10):
                await user.run()
    assert user.next_iteration == 2  # it had taken the basis of iteration 1


def test_a_configured_crash_stage_is_where_every_dropped_user_goes_silent() -> None:
    table = _table(variant="privirec_k", secagg="ideal", graph="complete", threshold=0.2, crash_stage="share_keys")
    table["run"]["seed"] = 2
    table["availability"] = {"dropout": 0.2}
    result = fedrecsim.run(table)
    seen = next(seen for seen in result.outcome.state["server"].sums if seen.session == POWER + 1)
    stages = seen.result.stages
    dropped = [party for party in seen.members if party not in stages[Stage.UNMASKING]]
    assert len(dropped) >= 4
    assert all(party in stages[Stage.ADVERTISE_KEYS] and party not in stages[Stage.SHARE_KEYS] for party in dropped)


def test_each_user_draws_its_keys_from_its_own_actor_stream() -> None:
    table = _table(variant="privirec_k", k=4)
    table["run"]["rounds"] = 1
    result = fedrecsim.run(table, record_views=[SERVER])
    first = {envelope.src: envelope.body for envelope in result.views[SERVER]
             if isinstance(envelope.body, Advertise) and envelope.body.session == 1}
    assert len(first) == 40
    for party, body in first.items():
        rng = generator(4, Stream.ACTOR, Role.USER.code, party.index)
        c, s = crypto.KeyPair.generate(rng), crypto.KeyPair.generate(rng)
        assert (body.c_public, body.s_public) == (c.public, s.public), party
    assert len({body.s_public for body in first.values()}) == 40  # no two users share a key
