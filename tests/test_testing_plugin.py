"""fedrecsim.testing: the pytest plugin's fixtures, used directly and from a user's test session."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import trio

from fedrecsim.sim import SERVER, Array, Join, MidRoundDropout, Party, Role, Server, Stream, User, generator, message
from fedrecsim.testing import Constant, LinkSpec, LogNormal, SimNetwork, open_network, wire_size

pytest_plugins = ["pytester"]

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)


@message("test.plugin_ping")
@dataclass(frozen=True)
class Ping:
    seq: int
    values: Array("float64", ndim=1)


@message("test.plugin_pong")
@dataclass(frozen=True)
class Pong:
    seq: int


class Echo(Server):
    """Answers every Ping with a Pong carrying its sequence number."""

    async def run(self) -> None:
        while True:
            envelope = await self.recv(Ping, deadline=math.inf)
            self.send(envelope.src, Pong(envelope.body.seq))


class Replier(User):
    """Answers the server's Ping with a Pong -- unless it crashes in that round (round = seq)."""

    async def run(self) -> None:
        while True:
            envelope = await self.recv(Ping, deadline=self.horizon_s)
            if self.crashes_in(envelope.body.seq):
                return
            self.send(self.server, Pong(envelope.body.seq))


def test_the_plugin_is_loaded_by_its_entry_point(request) -> None:
    assert request.config.pluginmanager.hasplugin("fedrecsim")


async def test_assert_bytes_checks_exact_encoded_sizes_and_names_the_party(autojump_clock, sim_network) -> None:
    sim: SimNetwork = sim_network
    sim.attach(ALICE, SERVER)
    ping = Ping(1, np.arange(4.0))
    sim.network.send(ALICE, SERVER, ping)
    await sim.network.sleep(1.0)
    size = wire_size(ALICE, SERVER, ping)
    assert size == sim.ledger.party(ALICE)["sent_bytes"] > 0
    sim.assert_bytes(ALICE, sent=size, received=0)
    sim.assert_bytes(SERVER, received=size)
    with pytest.raises(AssertionError, match=rf"server:0 received {size:,} bytes, expected {size + 1:,}"):
        sim.assert_bytes(SERVER, received=size + 1)
    with pytest.raises(AssertionError, match=r"user:0 sent .* and received 0 bytes, expected 1"):
        sim.assert_bytes(ALICE, sent=0, received=1)


async def test_assert_no_drops_names_the_reason_and_the_sender(autojump_clock, sim_network) -> None:
    sim: SimNetwork = sim_network
    sim.attach(ALICE, BOB)
    sim.network.send(ALICE, BOB, Pong(1))
    await sim.network.sleep(1.0)
    sim.assert_no_drops()
    sim.network.detach(BOB)
    sim.network.send(ALICE, BOB, Pong(2))
    await sim.network.sleep(1.0)
    with pytest.raises(AssertionError, match=r"1 messages dropped \(1 offline\); by sender: user:0: 1"):
        sim.assert_no_drops()


async def test_a_recorder_holds_what_the_party_received_from_when_recording_began(autojump_clock, sim_network) -> None:
    sim: SimNetwork = sim_network
    sim.attach(ALICE, BOB, SERVER)
    sim.network.send(ALICE, SERVER, Pong(0))
    await sim.network.sleep(1.0)
    received = sim.record(SERVER)
    assert sim.record(SERVER) is received
    start = trio.current_time()
    sim.network.send(ALICE, SERVER, Ping(1, np.array([1.0, 2.0])))
    sim.network.send(BOB, SERVER, Pong(2))
    sim.network.send(SERVER, ALICE, Pong(3))  # sent by the recorded party: not received by it
    await sim.network.sleep(1.0)
    assert len(received) == 2
    assert sorted(received.kinds()) == ["test.plugin_ping", "test.plugin_pong"]
    [ping] = received.messages(Ping)
    np.testing.assert_array_equal(ping.values, [1.0, 2.0])
    assert [pong.seq for pong in received.messages(Pong)] == [2]
    assert received.senders(Pong) == [BOB] and set(received.senders()) == {ALICE, BOB}
    assert all(start < time <= start + 0.001 for time in received.times)  # one resolution tick later
    taken = sim.network.mailbox(SERVER).take_all(Ping.KIND)
    assert [envelope.body.seq for envelope in taken] == [1]  # the party itself still gets its messages


@pytest.mark.parametrize("sim_links", [LinkSpec(Constant(3600.0))])
async def test_sim_links_sets_every_link_and_time_is_virtual(autojump_clock, sim_network) -> None:
    sim: SimNetwork = sim_network
    echo = Echo(SERVER, sim.network, sim.actor_rng(SERVER))
    sim.attach(ALICE)
    answers = sim.record(ALICE)
    async with sim.start(echo):
        start = trio.current_time()
        sim.network.send(ALICE, SERVER, Ping(1, np.zeros(1)))
        await sim.network.sleep(3 * 3600.0)
    assert [pong.seq for pong in answers.messages(Pong)] == [1]
    assert answers.times[0] - start == pytest.approx(7200.0, abs=0.002)  # there and back, an hour each


async def _arrival_times(seed: int) -> list[float]:
    async with open_network(seed=seed, links=LinkSpec(LogNormal(0.05, 1.0)), resolution_s=0.0) as sim:
        sim.attach(ALICE, SERVER)
        received = sim.record(SERVER)
        start = trio.current_time()
        for seq in range(5):
            sim.network.send(ALICE, SERVER, Pong(seq))
        await sim.network.sleep(60.0)
        return [time - start for time in received.times]


async def test_the_seed_decides_the_link_draws(autojump_clock) -> None:
    first, again, other = await _arrival_times(3), await _arrival_times(3), await _arrival_times(4)
    assert first == pytest.approx(again, abs=1e-9)  # measured from different start times
    assert first != pytest.approx(other, abs=1e-3) and len(set(first)) == 5


@pytest.mark.parametrize("sim_seed", [11])
async def test_sim_seed_is_the_seed_of_the_network_fixture(autojump_clock, sim_network) -> None:
    assert sim_network.seed == 11
    assert sim_network.rng(Stream.PROTOCOL, 1).random() == generator(11, Stream.PROTOCOL, 1).random()
    assert sim_network.actor_rng(ALICE).random() == generator(11, Stream.ACTOR, Role.USER.code, 0).random()


async def test_start_runs_actors_until_the_block_ends(autojump_clock, sim_network) -> None:
    sim: SimNetwork = sim_network
    echo = Echo(SERVER, sim.network, sim.actor_rng(SERVER))
    sim.attach(ALICE)
    async with sim.start(echo):
        assert sim.network.is_attached(SERVER)
        sim.network.send(ALICE, SERVER, Ping(5, np.zeros(2)))
        await sim.network.sleep(1.0)
        assert [e.body.seq for e in sim.network.mailbox(ALICE).take_all(Pong.KIND)] == [5]
    sim.network.send(ALICE, SERVER, Ping(6, np.zeros(2)))  # the echo's task has ended
    await sim.network.sleep(1.0)
    assert sim.network.mailbox(ALICE).take_all(Pong.KIND) == []


async def test_population_joins_users_and_applies_dropout_by_the_seed(autojump_clock, sim_network) -> None:
    sim: SimNetwork = sim_network

    server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
    sim.attach(SERVER)
    users = [Replier(Party(Role.USER, index), sim.network, sim.actor_rng(Party(Role.USER, index))) for index in range(10)]
    population = sim.population(users, dropout=MidRoundDropout(0.5))
    async with population.open():
        await sim.network.sleep(1.0)
        server.update_membership()
        assert server.members == {user.party for user in users}
        population.begin_round(1)
        server.send_many(sorted(server.members), Ping(1, np.zeros(1)))
        replies = await server.gather(Pong, sorted(server.members), deadline=trio.current_time() + 5.0)
    crashed = MidRoundDropout(0.5).crashes(sim.seed, 1, [user.party for user in users])
    assert 0 < len(crashed) < 10
    assert replies.missing == sorted(crashed)
    join = wire_size(ALICE, SERVER, Join())
    sim.assert_bytes(SERVER, received=10 * join + (10 - len(crashed)) * wire_size(ALICE, SERVER, Pong(1)))


async def test_open_network_refuses_a_real_clock() -> None:
    with pytest.raises(RuntimeError, match="autojump_clock"):
        async with open_network():
            pass


def test_a_users_test_session_gets_the_fixtures_and_readable_failures(pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        test_user_protocol='''
        from dataclasses import dataclass

        from fedrecsim.sim import SERVER, Party, Role, message
        from fedrecsim.testing import wire_size

        ALICE = Party(Role.USER, 0)


        @message("user.hello")
        @dataclass(frozen=True)
        class Hello:
            text: str


        async def test_bytes_add_up(autojump_clock, sim_network):
            sim_network.attach(ALICE, SERVER)
            sim_network.network.send(ALICE, SERVER, Hello("hi"))
            await sim_network.network.sleep(1.0)
            sim_network.assert_bytes(SERVER, received=wire_size(ALICE, SERVER, Hello("hi")))
            sim_network.assert_no_drops()


        async def test_a_wrong_count_fails(autojump_clock, sim_network):
            sim_network.attach(ALICE, SERVER)
            sim_network.network.send(ALICE, SERVER, Hello("hi"))
            await sim_network.network.sleep(1.0)
            sim_network.assert_bytes(SERVER, received=1)


        async def test_without_a_virtual_clock_the_fixture_says_what_to_do(sim_network):
            pass
        '''
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*AssertionError: server:0 received * bytes, expected 1*",
        "*RuntimeError: the simulated network needs virtual time: request pytest-trio's autojump_clock*",
    ])
