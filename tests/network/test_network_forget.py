"""`Network.forget`: the network lets go of a departed party's mailbox, and nothing a party sees changes."""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import trio
import trio.testing

from fedrecsim.actors.actor import Actor
from fedrecsim.errors import ProtocolViolation
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, message
from fedrecsim.seeding import Stream, generator

ALICE = Party(Role.USER, 0)


@message("test.forget_note")
@dataclass(frozen=True)
class Note:
    seq: int
    values: Array("float64", ndim=1)


class Peer(Actor):
    role: ClassVar[Role] = Role.USER
    receives = (Note,)


def _network(**kwargs) -> Network:  # type: ignore[no-untyped-def]
    network = Network(Links(1, LinkSpec(Constant(0.5))), Ledger(), event_time=True, **kwargs)
    network.attach(SERVER)
    network.attach(ALICE)
    return network


async def test_a_forgotten_party_lets_go_of_what_it_never_took_and_comes_back_to_an_empty_mailbox(autojump_clock) -> None:
    network = _network()
    peer = Peer(ALICE, network, generator(0, Stream.ACTOR, 0, 0))
    old = peer.mailbox
    async with network.open():
        network.send(SERVER, ALICE, Note(0, np.zeros(4)))
        await network.sleep(1.0)
        held = weakref.ref(old.queue(Note.KIND)[0].body)
        network.send(SERVER, ALICE, Note(1, np.zeros(4)))  # still in flight when ALICE leaves
        network.detach(ALICE)
        network.forget(ALICE)
        gc.collect()
        assert held() is None  # the message it never took is gone with the mailbox
        assert old.forgotten and not old.queue(Note.KIND)
        await network.sleep(1.0)
        assert network.ledger.dropped_by_reason["offline"] == 1  # as to any offline party
        network.attach(ALICE)
        network.send(SERVER, ALICE, Note(2, np.zeros(4)))
        received = await peer.recv(Note, deadline=network.now + 1.0)
    assert received.body.seq == 2
    assert peer.mailbox is network.mailbox(ALICE) is not old
    assert network.mailbox(ALICE).receives == frozenset({Note.KIND})


def test_only_an_offline_party_no_task_waits_for_is_forgotten() -> None:
    network = _network()
    with pytest.raises(ProtocolViolation, match=r"^user:0 is attached; detach it before forgetting it$"):
        network.forget(ALICE)
    mailbox = network.mailbox(ALICE)

    async def waits() -> None:
        await mailbox.wait(5.0)

    async def scenario() -> None:
        async with network.open(), trio.open_nursery() as nursery:
            nursery.start_soon(waits)
            await network.sleep(1.0)
            network.detach(ALICE)
            with pytest.raises(ProtocolViolation, match=r"^a task waits on the mailbox of user:0; end it before forgetting user:0$"):
                network.forget(ALICE)
            assert network.mailbox(ALICE) is mailbox and not mailbox.forgotten

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    network.forget(ALICE)
    network.forget(ALICE)  # nothing left to let go of
    with pytest.raises(ProtocolViolation, match=r"^user:0 was never attached to the network$"):
        network.mailbox(ALICE)


async def test_a_party_whose_view_is_recorded_keeps_its_view(autojump_clock) -> None:
    network = _network(record_views=[ALICE])
    async with network.open():
        network.send(SERVER, ALICE, Note(0, np.zeros(1)))
        await network.sleep(1.0)
    network.detach(ALICE)
    network.forget(ALICE)
    assert [envelope.body.seq for envelope in network.view(ALICE)] == [0]
    assert not network.mailbox(ALICE).queue(Note.KIND)
