"""The secure sum, tested with fedrecsim's pytest plugin: the roles on an open network, then whole runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trio
from secure_sum.messages import MaskedCounts, SumRequest
from secure_sum.roles import CountingUser, SummingServer, pair_mask

import fedrecsim
from fedrecsim.sim import SERVER, Join, MidRoundDropout, Party, Role
from fedrecsim.testing import wire_size

SCENARIO = Path(__file__).resolve().parents[1] / "scenario.toml"
N_ITEMS = 12


def _users(sim, n_users: int) -> dict[Party, CountingUser]:
    """``n_users`` users, user ``i`` counting the items ``i``, ``i+1`` and ``i+2`` (mod N_ITEMS)."""
    users = {}
    for index in range(n_users):
        party = Party(Role.USER, index)
        counts = np.zeros(N_ITEMS, dtype=np.uint64)
        counts[[(index + k) % N_ITEMS for k in range(3)]] = 1
        users[party] = CountingUser(party, sim.network, sim.actor_rng(party), counts, pair_seed=sim.seed)
    return users


async def test_the_server_learns_the_sum_and_sees_only_masked_vectors(autojump_clock, sim_network) -> None:
    sim = sim_network
    users = _users(sim, 5)
    server = SummingServer(SERVER, sim.network, sim.actor_rng(SERVER), N_ITEMS)
    sim.attach(SERVER)
    seen = sim.record(SERVER)
    async with sim.population(users).open():
        await sim.network.sleep(1.0)  # the joins arrive
        total, replies = await server.round(1, trio.current_time() + 10.0)
    counts = sum(user.counts for user in users.values())
    np.testing.assert_array_equal(total, counts)
    assert replies.missing == []
    masked = seen.messages(MaskedCounts)
    assert len(masked) == 5
    for sender, message in zip(seen.senders(MaskedCounts), masked):
        assert not np.array_equal(message.values, users[sender].counts)  # the server never sees counts
    request_bytes = wire_size(SERVER, Party(Role.USER, 0), SumRequest(1, np.arange(5, dtype=np.int64)))
    reply_bytes = wire_size(Party(Role.USER, 0), SERVER, MaskedCounts(1, counts))
    join_bytes = wire_size(Party(Role.USER, 0), SERVER, Join())
    sim.assert_bytes(SERVER, sent=5 * request_bytes, received=5 * (join_bytes + reply_bytes))
    for party in users:
        sim.assert_bytes(party, sent=join_bytes + reply_bytes, received=request_bytes)
    sim.assert_no_drops()


async def test_under_dropout_the_sum_is_off_by_exactly_the_missing_users_masks(autojump_clock, sim_network) -> None:
    sim = sim_network
    users = _users(sim, 8)
    server = SummingServer(SERVER, sim.network, sim.actor_rng(SERVER), N_ITEMS)
    sim.attach(SERVER)
    population = sim.population(users, dropout=MidRoundDropout(0.3))
    async with population.open():
        await sim.network.sleep(1.0)
        population.begin_round(1)
        total, replies = await server.round(1, trio.current_time() + 10.0)
    assert replies.missing, "seed 0 crashes some of the 8 users in round 1"
    answered = [party for party, _ in replies]
    offset = np.zeros(N_ITEMS, dtype=np.uint64)
    for party in answered:
        for gone in replies.missing:
            mask = pair_mask(sim.seed, 1, party.index, gone.index, N_ITEMS)
            offset = offset + mask if gone.index > party.index else offset - mask
    truth = sum(users[party].counts for party in answered)
    np.testing.assert_array_equal(total, truth + offset)  # uint64: wraps around like the masks
    assert np.count_nonzero(total != truth) > N_ITEMS // 2


def _scenario(*overrides: str) -> fedrecsim.Scenario:
    """The tutorial's scenario, naming the protocol by module so that it runs without being installed."""
    return fedrecsim.load_scenario(SCENARIO, ["run.protocol=secure_sum.protocol:PROTOCOL", *overrides])


async def test_the_scenario_runs_in_a_trio_test_and_the_masks_cancel(autojump_clock) -> None:
    result = await fedrecsim.run_async(_scenario())
    [monitor] = result.result["invariants"]
    assert (monitor["name"], monitor["checked"], monitor["violations"]) == ("masks_cancel", 5, 0)
    assert [(row["participants"], row["wrong_items"]) for row in result.rounds] == [(30, 0)] * 5
    np.testing.assert_array_equal(result.outcome.state["sum"], result.outcome.state["truth"])


async def test_with_dropout_the_monitor_flags_exactly_the_rounds_with_missing_users(autojump_clock) -> None:
    result = await fedrecsim.run_async(_scenario("availability.dropout=0.1"))
    broken = [row for row in result.rounds if row["missing"]]
    intact = [row for row in result.rounds if not row["missing"]]
    assert broken, "with 30 users and p = 0.1 some rounds lose users"
    assert all(row["wrong_items"] > 0 for row in broken)
    assert all(row["wrong_items"] == 0 for row in intact)
    [monitor] = result.result["invariants"]
    assert monitor["violations"] == len(broken)
