"""A network saved between two instants and restored into a new one built alike (issue 18, checkpoints)
carries on exactly as the network never saved: the same deliveries in the same order, the same forgeries
refused, the same ledger."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pytest
import trio

from fedrecsim.actors.server import Server
from fedrecsim.clock import VirtualClock
from fedrecsim.errors import PartyTimeout
from fedrecsim.network.faults import Byzantine, Crash, PartyFaults
from fedrecsim.network.ledger import Ledger, RejectReason
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, message
from fedrecsim.seeding import Stream, generator

HONEST, FORGER = Party(Role.USER, 0), Party(Role.USER, 1)


@message("test.checkpoint_values")
@dataclass(frozen=True)
class Values:
    step: int
    values: Array("float64", ndim=1)  # type: ignore[valid-type]


def _network() -> Network:
    """Losses on every link, the forger's messages 5 s late and sent as float32 (malformed at the receiver)."""
    links = Links(9, LinkSpec(Constant(0.01), loss=0.3, bandwidth_bps=80_000), slow={FORGER: 5.0})
    network = Network(links, Ledger(), faults=PartyFaults(byzantine=[Byzantine(FORGER, "dtype")]))
    for party in (SERVER, HONEST, FORGER):
        network.attach(party)
    return network


async def _first_part(network: Network) -> None:
    """The forger's message (sequence number 1) goes first and is still in flight at 1 s; the honest
    user's messages arrive, some lost, the rest left in the server's mailbox."""
    network.send(FORGER, SERVER, Values(0, np.ones(3)))
    for step in range(1, 8):
        network.send(HONEST, SERVER, Values(step, np.full(40, float(step))))
    await network.sleep_until(1.0)
    network.ledger.fold()


def _taken(network: Network) -> list[tuple[int, float]]:
    return [(envelope.body.step, envelope.sent_at) for envelope in network.mailbox(SERVER).take_all(Values.KIND)]


async def _second_part(network: Network) -> list[tuple[int, float]]:
    """How many messages were in flight at 1 s (as a pair) and what the server had taken; then more
    honest messages, and what it takes by 20 s."""
    taken = [(-1, float(network.in_flight)), *_taken(network)]
    for step in range(8, 16):
        network.send(HONEST, SERVER, Values(step, np.full(40, float(step))))
    await network.sleep_until(20.0)
    return taken + _taken(network)


def _outcome(network: Network, taken: list[tuple[int, float]]) -> tuple[list[tuple[int, float]], dict, str, list]:
    ledger = network.ledger
    return taken, ledger.summary(), ledger.transcript_xxh3_128, [(r.src, r.reason) for r in ledger.rejections]


def _kept() -> tuple[list[tuple[int, float]], dict, str, list]:
    network = _network()

    async def whole() -> list[tuple[int, float]]:
        async with network.open():
            await _first_part(network)
            return await _second_part(network)

    return _outcome(network, trio.run(whole, clock=VirtualClock()))


def _restored() -> tuple[list[tuple[int, float]], dict, str, list]:
    """`_kept`'s run, saved at 1 s and restored into a new network built alike, on a clock starting there."""
    first = _network()

    async def save() -> tuple[dict, dict]:
        async with first.open():
            await _first_part(first)
            return pickle.loads(pickle.dumps((first.checkpoint_state(), first.ledger.checkpoint_state())))

    saved, ledger = trio.run(save, clock=VirtualClock())
    network = _network()
    network.restore_state(saved)
    network.ledger.restore_state(ledger)

    async def rest() -> list[tuple[int, float]]:
        async with network.open():
            return await _second_part(network)

    return _outcome(network, trio.run(rest, clock=VirtualClock(1.0)))


def test_a_restored_network_delivers_refuses_and_counts_as_the_network_never_saved() -> None:
    kept = _kept()
    assert _restored() == kept
    taken, summary, _, rejections = kept
    assert rejections == [(FORGER, "malformed")]  # the forgery in flight at the save is still refused
    assert summary["faults"]["dropped"]["lost"] > 0
    assert taken[0] == (-1, 1.0)  # the forgery
    assert [step for step, _ in taken[1:]] == sorted(step for step, _ in taken[1:])


@message("test.checkpoint_other")
@dataclass(frozen=True)
class Other:
    step: int


def _watched(attach: bool) -> Network:
    """The server receives only `Values` and its view is recorded; the forger crashes when it first sends."""
    network = Network(Links(9, LinkSpec(Constant(0.01))), Ledger(), record_views=(SERVER,),
                      faults=PartyFaults(crashes=[Crash(FORGER)]))
    network.expect(SERVER, [Values.KIND])
    if attach:
        for party in (SERVER, HONEST, FORGER):
            network.attach(party)
    return network


def test_restore_makes_the_mailboxes_of_parties_the_rebuilt_network_has_not_attached_yet() -> None:
    """As in a resumed run, whose users attach only when its population opens, after the restore: their
    mailboxes are made as the first network made them -- the party's own, on the network's timers, with
    its view and the kinds it receives -- and a crashed party stays crashed."""
    first = _watched(attach=True)

    async def save() -> tuple[dict, dict]:
        async with first.open():
            first.send(HONEST, SERVER, Values(1, np.ones(2)))
            assert first.send(FORGER, SERVER, Values(0, np.ones(2))) == 0  # it crashes instead
            await first.sleep_until(1.0)
            first.send(HONEST, SERVER, Values(2, np.ones(2)))  # in flight at the save
            first.ledger.fold()
            return pickle.loads(pickle.dumps((first.checkpoint_state(), first.ledger.checkpoint_state())))

    saved, ledger = trio.run(save, clock=VirtualClock())
    second = _watched(attach=False)
    second.restore_state(saved)
    second.ledger.restore_state(ledger)
    server = Server(SERVER, second, generator(9, Stream.ACTOR, 2, 0))

    async def rest() -> list[int]:
        async with second.open():
            second.send(HONEST, SERVER, Other(3))  # a kind the server does not receive
            steps = [(await server.recv(Values, deadline=5.0)).body.step for _ in range(2)]
            with pytest.raises(PartyTimeout, match=r"^server:0 waited for test.checkpoint_values until t=7.000s; none came$"):
                await server.recv(Values, deadline=7.0)
            assert trio.current_time() == 7.0
            return steps

    assert trio.run(rest, clock=VirtualClock(1.0)) == [1, 2]
    assert [envelope.body.step for envelope in second.view(SERVER)] == [1, 2]  # recorded before the save and after
    assert [(row.src, row.reason) for row in second.ledger.rejections] == [(HONEST, RejectReason.UNEXPECTED)]
    assert second.is_crashed(FORGER) and FORGER not in second.attached
    assert [second.mailbox(party).party for party in (SERVER, HONEST, FORGER)] == [SERVER, HONEST, FORGER]


def test_restore_fills_the_mailbox_a_party_of_the_rebuilt_network_already_has() -> None:
    first = _watched(attach=True)

    async def save() -> dict:
        async with first.open():
            first.send(HONEST, SERVER, Values(1, np.ones(2)))
            await first.sleep_until(1.0)
            first.ledger.fold()
            return pickle.loads(pickle.dumps(first.checkpoint_state()))

    saved = trio.run(save, clock=VirtualClock())
    second = _watched(attach=True)
    held = second.mailbox(SERVER)  # e.g. by an actor built before the restore
    second.restore_state(saved)
    assert second.mailbox(SERVER) is held
    assert [envelope.body.step for envelope in held.take_all(Values.KIND)] == [1]


def test_a_broadcast_saved_half_delivered_gives_its_other_receivers_a_read_only_body_after_the_restore() -> None:
    """The receivers of one `send_many` share the body the first delivered copy decoded to; a checkpoint
    taken after some copies arrived saves none of it, so the copies still in flight are decoded again from
    their bytes after the restore -- read-only, shared by them alone, each in an envelope of its own."""
    from fedrecsim.network.links import LogNormal

    receivers = [Party(Role.USER, index) for index in range(8)]

    def built() -> Network:
        network = Network(Links(9, LinkSpec(LogNormal(0.05, 0.5))), Ledger())
        for party in (SERVER, *receivers):
            network.attach(party)
        return network

    def arrived(network: Network) -> list[Party]:
        return [party for party in receivers if network.mailbox(party).queue(Values.KIND)]

    first = built()

    async def save() -> tuple[dict, dict, float]:
        async with first.open():
            first.send_many(SERVER, receivers, Values(3, np.arange(5.0)))
            while len(arrived(first)) < 2:
                await first.sleep(0.001)
            first.ledger.fold()
            state = pickle.loads(pickle.dumps((first.checkpoint_state(), first.ledger.checkpoint_state())))
            return state[0], state[1], first.now

    saved, ledger, at = trio.run(save, clock=VirtualClock())
    early = arrived(first)
    assert 2 <= len(early) < len(receivers)
    second = built()
    second.restore_state(saved)
    second.ledger.restore_state(ledger)

    async def rest() -> None:
        async with second.open():
            await second.sleep_until(at + 10.0)

    trio.run(rest, clock=VirtualClock(at))
    envelopes = {party: second.mailbox(party).take(Values.KIND) for party in receivers}
    assert [(envelope.src, envelope.dst) for envelope in envelopes.values()] == [(SERVER, party) for party in receivers]
    for envelope in envelopes.values():
        assert envelope.body.step == 3
        np.testing.assert_array_equal(envelope.body.values, np.arange(5.0))
    late = [envelopes[party].body for party in receivers if party not in early]
    assert all(body is late[0] for body in late) and not late[0].values.flags.writeable
