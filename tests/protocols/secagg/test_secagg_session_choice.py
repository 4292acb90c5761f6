"""A user asked for one session (`participate(..., session=S, held=...)`), as a caller whose sessions need
different inputs asks: earlier setups are stale; a setup of S is taken part in; setups of later sessions
mean S went on without the user -- it misses S at once, sends nothing, and holds the later setups for
its next call, which takes part in the one it asks for without waiting for another setup.

The server is played by hand: it sends setups and receives what the user sends; the user gives up on a
session two virtual seconds after it advertised (``stage_s``), the server never answering.
"""

from __future__ import annotations

import numpy as np
import trio

from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.errors import PartyTimeout
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import Contribution, SecAggParams, Stage, participate
from fedrecsim.protocols.secagg.messages import Advertise, Setup
from fedrecsim.testing import open_network

PARAMS = SecAggParams()
S = 5
ME = Party(Role.USER, 0)


def _setup(session: int) -> Setup:
    return Setup(session, 32, 4, 3, np.array([1, 2, 3], dtype=np.int32))


class _Caller(User):
    """Calls `participate` once per entry of ``asks`` (a session id), handing each call the setups the
    previous one held."""

    def __init__(self, party, network, rng, asks: list[int]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.asks = asks
        self.contributions: list[Contribution] = []

    async def run(self) -> None:
        held: tuple[Setup, ...] = ()
        for session in self.asks:
            contribution = await participate(
                self, np.arange(4, dtype=np.uint32), PARAMS, deadline=trio.current_time() + 30.0, stage_s=2.0,
                session=session, held=held,
            )
            self.contributions.append(contribution)
            held = contribution.held


async def _play(setups_before: list[int], asks: list[int], setups_after: tuple[int, ...] = ()) -> tuple[_Caller, list[int]]:
    """Setups of ``setups_before`` wait in the user's mailbox when it starts; ``setups_after`` come one
    second later. Returns the user and the sessions of the advertisements the server received."""
    async with open_network() as sim:
        sim.attach(SERVER, ME)
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        me = _Caller(ME, sim.network, sim.actor_rng(ME), asks)
        for session in setups_before:
            server.send(ME, _setup(session))
        await trio.sleep(1)
        advertised: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(me.run)
            await trio.sleep(1)
            for session in setups_after:
                server.send(ME, _setup(session))
            deadline = trio.current_time() + 20.0
            try:
                while True:
                    advertised.append((await server.recv(Advertise, deadline=deadline)).body.session)
            except PartyTimeout:
                pass  # no more
        return me, advertised


async def test_later_setups_mean_the_session_was_missed_and_are_held_for_the_next_call(autojump_clock) -> None:
    me, advertised = await _play([S - 1, S + 1, S + 2], [S, S + 1])
    missed, next_one = me.contributions
    assert (missed.session, missed.completed, missed.outcome) == (None, (), "missed")
    assert [setup.session for setup in missed.held] == [S + 1, S + 2]
    # The next call takes part in S + 1 from the held setup, and still holds S + 2.
    assert (next_one.session, next_one.completed, next_one.outcome) == (S + 1, (Stage.ADVERTISE_KEYS,), "timed_out")
    assert [setup.session for setup in next_one.held] == [S + 2]
    assert advertised == [S + 1]  # nothing was sent for S


async def test_the_asked_session_is_taken_part_in_and_a_later_one_held(autojump_clock) -> None:
    me, advertised = await _play([S, S + 1], [S])
    (contribution,) = me.contributions
    assert (contribution.session, contribution.outcome) == (S, "timed_out")
    assert [setup.session for setup in contribution.held] == [S + 1]
    assert advertised == [S]


async def test_a_stale_setup_alone_is_ignored_and_the_user_waits_for_its_session(autojump_clock) -> None:
    me, advertised = await _play([S - 1], [S], setups_after=(S,))
    (contribution,) = me.contributions
    assert (contribution.session, contribution.outcome, contribution.held) == (S, "timed_out", ())
    assert advertised == [S]
