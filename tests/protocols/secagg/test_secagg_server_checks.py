"""The server's side at its edges (`aggregate`): a session of one user, a stale message of an earlier
session that must not count for this one, and the mode it refuses to mix."""

from __future__ import annotations

import numpy as np
import pytest
import trio

from fedrecsim.actors.actor import Actor
from fedrecsim.actors.server import Server
from fedrecsim.errors import SecAggAborted
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import Aggregate, IdealSum, SecAggParams, Stage, aggregate, crypto, participate
from fedrecsim.protocols.secagg.messages import Advertise, Keys
from fedrecsim.testing import open_network
from secagg_harness import SESSION, SummingUser, inputs, run_session


@pytest.mark.parametrize("ideal", [False, True], ids=["real", "ideal"])
def test_a_session_of_one_user_returns_its_input(ideal: bool) -> None:
    """t = 1 and no neighbours: no pairwise mask, no ciphertext, the self mask rebuilt from the user's own share
    (in a population of one user: the public parameters allow no session of one in a larger one)."""
    params = SecAggParams(ideal=ideal, population=1)
    x = inputs(1, 6, params.ring)
    result = run_session(x, params).result
    assert isinstance(result, Aggregate)
    assert (result.threshold, result.degree, result.graph) == (1, 0, {Party(Role.USER, 0): ()})
    np.testing.assert_array_equal(result.total, x[0])
    assert result.stages[Stage.UNMASKING] == (Party(Role.USER, 0),)


async def test_a_stale_message_of_an_earlier_session_does_not_count_for_this_one(autojump_clock) -> None:
    params = SecAggParams()
    x = inputs(4, 8, params.ring)
    users = [Party(Role.USER, index) for index in range(4)]
    async with open_network() as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER, *users)
        # User 2's advertisement of session SESSION - 1, with other keys, is still in the server's mailbox.
        old = np.random.default_rng(9)
        sim.network.send(users[2], SERVER, Advertise(SESSION - 1, crypto.KeyPair.generate(old).public,
                                                     crypto.KeyPair.generate(old).public))
        await trio.sleep(1)
        actors = [SummingUser(party, sim.network, sim.actor_rng(party), x[party.index], params, None) for party in users]
        async with trio.open_nursery() as nursery:
            for actor in actors:
                nursery.start_soon(actor.run)
            await trio.sleep(0)
            result = await aggregate(server, users, 8, params, session=SESSION, deadline=trio.current_time() + 100)
    np.testing.assert_array_equal(result.total, np.sum(x, axis=0, dtype=np.uint32))
    assert all(actor.contribution.outcome == "done" for actor in actors)


@pytest.mark.parametrize(("ideal", "functionality"), [(True, None), (False, IdealSum())], ids=["ideal", "real"])
async def test_ideal_mode_and_the_functionality_go_together(autojump_clock, ideal: bool, functionality) -> None:  # type: ignore[no-untyped-def]
    async with open_network() as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        with pytest.raises(ValueError, match="^ideal mode needs the IdealSum functionality, and real mode must not have one$"):
            await aggregate(server, [Party(Role.USER, 0)], 4, SecAggParams(ideal=ideal), session=1,
                            deadline=trio.current_time() + 10, ideal=functionality)


def test_too_few_shares_of_a_dropped_users_key_abort_naming_that_secret() -> None:
    """SecAgg+ with k = 4, t = 3: user 0 drops after sharing, and the two neighbours two places from it on
    the ring (the two of its neighbours joined to only one other of them) crash before revealing. Every
    survivor's b still has 3 revealed shares; user 0's s^SK has 2."""
    params = SecAggParams(graph="sparse", neighbours=4)
    x = inputs(10, 8, params.ring)
    graph = run_session(x, params).result.graph
    mine = graph[Party(Role.USER, 0)]
    far = [party for party in mine if sum(other in graph[party] for other in mine) == 1]
    assert len(far) == 2
    crash = {0: Stage.MASKED_INPUT, far[0].index: Stage.UNMASKING, far[1].index: Stage.UNMASKING}
    aborted = run_session(x, params, crash).result
    assert isinstance(aborted, SecAggAborted) and aborted.stage == "unmasking"
    assert str(aborted) == "secure aggregation aborted at unmasking: 2 shares of s^SK of user:0 were revealed, the threshold is t = 3"


class _Bare(Actor):
    """A user actor with no ``server`` attribute: it follows server:0."""

    role = Role.USER

    def __init__(self, party, network, rng, x) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.x = x
        self.contribution = None

    async def run(self) -> None:
        self.contribution = await participate(self, self.x, SecAggParams(), deadline=trio.current_time() + 100)


async def test_the_first_session_of_a_run_with_actors_that_follow_server_zero(autojump_clock) -> None:
    """Session ids start at 1; an actor without a ``server`` attribute takes part with server:0."""
    params = SecAggParams()
    x = inputs(3, 5, params.ring)
    users = [Party(Role.USER, index) for index in range(3)]
    async with open_network() as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER, *users)
        actors = [_Bare(party, sim.network, sim.actor_rng(party), x[party.index]) for party in users]
        assert not any(hasattr(actor, "server") for actor in actors)
        # A stranger's keys of the session wait in user 0's mailbox: they are not server:0's.
        sim.attach(Party(Role.USER, 9))
        stranger = crypto.KeyPair.generate(np.random.default_rng(1)).public
        rows = np.frombuffer(stranger, np.uint8)[None]
        sim.network.send(Party(Role.USER, 9), users[0], Keys(1, np.array([8], np.int32), rows, rows))
        async with trio.open_nursery() as nursery:
            for actor in actors:
                nursery.start_soon(actor.run)
            await trio.sleep(0)
            result = await aggregate(server, users, 5, params, session=1, deadline=trio.current_time() + 100)
    np.testing.assert_array_equal(result.total, np.sum(x, axis=0, dtype=np.uint32))
    assert [actor.contribution.outcome for actor in actors] == ["done"] * 3
