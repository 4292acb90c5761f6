"""Waking a parked receiver (`network._wake`): the network appends it to trio's run queue itself, as
trio's ``reschedule`` would (issue 32) -- except when an instrument watches tasks being scheduled, which
must then see every wake, as it sees trio's own."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from fedrecsim.clock import VirtualClock
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, user
from fedrecsim.network.wire import message


@message("test.wake_note")
@dataclass(frozen=True)
class Note:
    number: int


class _Scheduled(trio.abc.Instrument):
    def __init__(self) -> None:
        self.tasks: list[trio.lowlevel.Task] = []

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        self.tasks.append(task)


def _run(notes: int, instruments: list[trio.abc.Instrument]) -> tuple[list[int], trio.lowlevel.Task]:
    """The server sends ``notes`` notes 10 ms apart; the user waits for each in turn: every note wakes it
    once (by a delivery), and its last wait ends by its deadline (a wake too). Returns what it took."""
    network = Network(Links(0, LinkSpec(Constant(0.005))), Ledger(), event_time=True)
    receiver = user(0)
    for party in (SERVER, receiver):
        network.attach(party)
    taken: list[int] = []
    tasks: list[trio.lowlevel.Task] = []

    async def receive() -> None:
        tasks.append(trio.lowlevel.current_task())
        mailbox = network.mailbox(receiver)
        while await mailbox.wait(1.0):
            while (envelope := mailbox.take(Note.KIND)) is not None:
                taken.append(envelope.body.number)

    async def main() -> None:
        async with network.open(), trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            for number in range(notes):
                network.send(SERVER, receiver, Note(number))
                await network.sleep(0.01)

    trio.run(main, clock=VirtualClock(), instruments=instruments)
    return taken, tasks[0]


def test_every_delivery_wakes_the_receiver_once() -> None:
    taken, _ = _run(5, [])
    assert taken == [0, 1, 2, 3, 4]


def test_an_instrument_watching_scheduling_sees_every_wake_of_the_receiver() -> None:
    instrument = _Scheduled()
    taken, task = _run(5, [instrument])
    assert taken == [0, 1, 2, 3, 4]
    # Scheduled when spawned, woken by each of the five deliveries, then by its deadline.
    assert instrument.tasks.count(task) == 1 + 5 + 1
