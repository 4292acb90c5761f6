"""Crash-and-restart of users (issue 18): the population restarts a crashed user after its rule's delay,
with its state kept or restored to what it held when the population opened (and a fresh generator)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import trio

from fedrecsim.actors.population import Population
from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.network.availability import AlwaysOnline, BernoulliChurn
from fedrecsim.network.faults import Crash, PartyFaults
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.wire import message
from fedrecsim.seeding import Stream, generator


@message("test.restart_ping")
@dataclass(frozen=True)
class Ping:
    round: int


@message("test.restart_pong")
@dataclass(frozen=True)
class Pong:
    round: int
    draw: float


class Counter(User):
    """Answers every ping with a draw from its generator; counts what it answered."""

    def __init__(self, party, network, rng) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.answered: list[int] = []
        self.started = 0

    async def run(self) -> None:
        self.started += 1
        while True:
            ping = (await self.recv(Ping, deadline=self.horizon_s)).body
            self.answered.append(ping.round)
            self.send(self.server, Pong(ping.round, float(self.rng.random())))


class Recorder(Counter):
    """A `Counter` that also keeps its answers in a nested record, as protocols' users keep dicts of arrays."""

    def __init__(self, party, network, rng) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.record: dict[str, list[int]] = {"answered": []}

    async def run(self) -> None:
        self.started += 1
        while True:
            ping = (await self.recv(Ping, deadline=self.horizon_s)).body
            self.record["answered"].append(ping.round)
            self.send(self.server, Pong(ping.round, float(self.rng.random())))


def _world(*crashes: Crash, churn=None, user_class=Counter):  # type: ignore[no-untyped-def]
    network = Network(Links(5, LinkSpec(Constant(0.01))), Ledger(), faults=PartyFaults(crashes))
    network.attach(SERVER)
    server = Server(SERVER, network, generator(5, Stream.ACTOR, 2, 0))
    users = {Party(Role.USER, i): user_class(Party(Role.USER, i), network, generator(5, Stream.ACTOR, 0, i)) for i in range(2)}
    population = Population(network, users, churn=churn or AlwaysOnline(), seed=5, horizon_s=1e6)
    return network, server, population


async def _rounds(network, server, population, rounds: int) -> list[dict[Party, float]]:  # type: ignore[no-untyped-def]
    """Ping every member each round (1 s apart) and collect the pongs."""
    seen = []
    async with network.open(), population.open():
        for round_index in range(1, rounds + 1):
            await network.sleep(1.0)
            population.begin_round(round_index)
            server.update_membership()
            members = sorted(server.members)
            server.send_many(members, Ping(round_index))
            replies = await server.gather(Pong, members, deadline=trio.current_time() + 0.5, accept=lambda pong: pong.round == round_index)
            seen.append({party: pong.draw for party, pong in replies})
            population.end_round(round_index)
    return seen


ALICE, BOB = Party(Role.USER, 0), Party(Role.USER, 1)


async def test_a_crashed_user_restarts_with_its_state_after_its_delay(autojump_clock) -> None:
    network, server, population = _world(Crash(ALICE, Pong.KIND, 2, restart_after_s=1.5))
    user = population.users[ALICE]
    seen = await _rounds(network, server, population, 5)
    assert [sorted(replies) for replies in seen] == [[ALICE, BOB], [BOB], [BOB], [ALICE, BOB], [ALICE, BOB]]
    assert user.answered == [1, 2, 4, 5]  # it kept what it had done; its round-2 pong went nowhere
    assert user.started == 2 and population.restarts == 1
    assert network.ledger.summary()["kinds"]["core.join"]["msgs"] == 3  # two at the start, one on restart


async def test_a_user_restarted_without_its_state_starts_over_with_a_fresh_generator(autojump_clock) -> None:
    network, server, population = _world(Crash(ALICE, Pong.KIND, 2, restart_after_s=1.5, keep_state=False))
    user = population.users[ALICE]
    first_draw = generator(5, Stream.ACTOR, 0, 0).random()
    fresh = generator(5, Stream.ACTOR, Role.USER.code, 0, 1)
    seen = await _rounds(network, server, population, 5)
    assert seen[0][ALICE] == first_draw
    assert user.answered == [4, 5] and user.started == 1  # its record starts over; so does its start count
    assert [seen[3][ALICE], seen[4][ALICE]] == [fresh.random(), fresh.random()]
    assert user.network is network and user.party == ALICE  # the world it lives in is not state


async def test_every_lost_state_restart_starts_from_the_same_initial_state(autojump_clock) -> None:
    crashes = (Crash(ALICE, Pong.KIND, 2, restart_after_s=1.5, keep_state=False),
               Crash(ALICE, Pong.KIND, 5, restart_after_s=1.5, keep_state=False))
    network, server, population = _world(*crashes)
    seen = await _rounds(network, server, population, 7)
    user = population.users[ALICE]
    assert user.answered == [7]  # restarted after round 5 from the state of the start, not of round 4
    again = generator(5, Stream.ACTOR, Role.USER.code, 0, 2)
    assert seen[6][ALICE] == again.random()  # the second restart draws from a generator of its own
    assert population.restarts == 2


async def test_a_restart_without_state_restores_nested_state_untouched_by_what_the_user_did(autojump_clock) -> None:
    crashes = (Crash(ALICE, Pong.KIND, 2, restart_after_s=1.5, keep_state=False),
               Crash(ALICE, Pong.KIND, 5, restart_after_s=1.5, keep_state=False))
    network, server, population = _world(*crashes, user_class=Recorder)
    await _rounds(network, server, population, 7)
    # Neither the first run's appends (rounds 1, 2) nor the first restart's (4, 5) reached the snapshot.
    assert population.users[ALICE].record == {"answered": [7]}
    assert population.users[BOB].record == {"answered": [1, 2, 3, 4, 5, 6, 7]}


async def test_a_user_that_left_while_crashed_recovers_offline(autojump_clock) -> None:
    network, server, population = _world(Crash(ALICE, Pong.KIND, 1, restart_after_s=0.5), churn=BernoulliChurn(0.0, 1.0))
    await _rounds(network, server, population, 2)
    assert not network.is_crashed(ALICE) and not network.is_attached(ALICE)
    assert population.restarts == 1 and population.users[ALICE].started == 1


async def test_only_the_populations_own_users_restart_and_the_listener_leaves_with_it(autojump_clock) -> None:
    network, server, population = _world(Crash(THIRD_PARTY, restart_after_s=1.0))
    network.attach(THIRD_PARTY)
    async with network.open():
        async with population.open():
            assert population._crashed in network.crash_listeners
            network.send(THIRD_PARTY, SERVER, Ping(1))
            await network.sleep(2.0)
            assert population.restarts == 0 and network.is_crashed(THIRD_PARTY)
        assert network.crash_listeners == []


async def test_a_crash_without_restart_stays_down(autojump_clock) -> None:
    network, server, population = _world(Crash(ALICE, Pong.KIND, 2))
    seen = await _rounds(network, server, population, 4)
    assert [sorted(replies) for replies in seen] == [[ALICE, BOB], [BOB], [BOB], [BOB]]
    assert population.restarts == 0 and network.is_crashed(ALICE)
    assert np.isfinite(list(seen[0].values())).all()
