"""The stand-alone protocol's user (`fedrecsim.protocols.secagg.protocol.SecAggUser`) across sessions: left
behind in one, it gives up after ``STAGE_WAITS`` stage timeouts and takes part in the next -- never again in
a late copy of the one it left (``participate``'s ``after`` and ``stage_s``)."""

from __future__ import annotations

import numpy as np
import pytest
import trio

from fedrecsim.actors.server import Server
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import SecAggParams
from fedrecsim.protocols.secagg.messages import Advertise, Setup
from fedrecsim.protocols.secagg.protocol import STAGE_WAITS, SecAggUser
from fedrecsim.testing import open_network

NOBODY = np.zeros(0, dtype=np.int32)
USER = Party(Role.USER, 0)


async def test_the_scenarios_user_gives_up_on_a_session_it_was_left_behind_in_and_skips_its_stale_setup(autojump_clock) -> None:
    """`SecAggUser` waits at most STAGE_WAITS stage timeouts for the server's next message of a session, then
    takes part in the next session -- not in a late copy of the one it left."""
    params = SecAggParams(stage_timeout_s=10.0, population=1)  # a population of one: sessions of one user
    assert STAGE_WAITS == 2.0
    async with open_network() as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER, USER)
        user = SecAggUser(USER, sim.network, sim.actor_rng(USER), np.zeros(4), params, None,
                          stage_rng=np.random.default_rng(0))
        heard: list[tuple[float, int]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(user.run)
            server.send(USER, Setup(1, 32, 4, 1, NOBODY))
            first = await server.recv(Advertise, deadline=trio.current_time() + 5)
            heard.append((trio.current_time(), first.body.session))
            # The server never answers session 1: the user gives up after 2 x 10 s.
            await trio.sleep(30.0)
            server.send(USER, Setup(1, 32, 4, 1, NOBODY))  # a late copy of session 1's setup
            await trio.sleep(5.0)
            server.send(USER, Setup(2, 32, 4, 1, NOBODY))
            with trio.move_on_after(100):
                while True:
                    envelope = await server.recv(Advertise, deadline=trio.current_time() + 100)
                    heard.append((trio.current_time(), envelope.body.session))
            nursery.cancel_scope.cancel()
    # Session 2's advertisement as soon as its setup came (links take a few ms), and no second one of session 1.
    assert [session for _, session in heard] == [1, 2]
    assert heard[1][0] == pytest.approx(35.0, abs=0.1)
    assert user.session == 2  # left behind in session 2 as well, it gave that up too
