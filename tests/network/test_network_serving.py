"""How the delay line serves an instant (issue 32): under `VirtualClock` the clock's jump serves it in place
(`Network.wake`), with the delay line's task parked for the whole run; whatever serving raises still ends
the run with that error, under either clock, as it did when the delay line's task served the instant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import trio
import trio.testing

from fedrecsim.clock import VirtualClock
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, message

ALICE = Party(Role.USER, 0)

CLOCKS = {
    "mock": lambda: trio.testing.MockClock(autojump_threshold=0),
    "virtual": VirtualClock,
}


@message("test.serving_note")
@dataclass(frozen=True)
class Note:
    seq: int
    values: Array("float64", ndim=1)


class _Broken(Exception):
    pass


class _LedgerBreakingAt(Ledger):
    """A ledger whose ``n``-th delivery raises, as a bug in the carry path would."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self._left = n

    def record_delivered(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self._left -= 1
        if self._left == 0:
            raise _Broken("delivery 2 broke")
        super().record_delivered(*args, **kwargs)


@pytest.mark.parametrize("clock", sorted(CLOCKS))
def test_an_error_raised_while_serving_an_instant_ends_the_run_with_that_error(clock: str) -> None:
    network = Network(Links(1, LinkSpec(Constant(0.5))), _LedgerBreakingAt(2), event_time=True)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    received: list[int] = []

    async def scenario() -> None:
        async with network.open():
            for seq in range(3):
                network.send(ALICE, SERVER, Note(seq, np.zeros(1)))
                await network.sleep(1.0)
                while (envelope := mailbox.take(Note.KIND)) is not None:
                    received.append(envelope.body.seq)

    with pytest.raises(BaseException) as raised:
        trio.run(scenario, clock=CLOCKS[clock]())
    assert [(type(error), str(error)) for error in _leaves(raised.value)] == [(_Broken, "delivery 2 broke")]
    assert received == [0]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def test_under_the_virtual_clock_no_task_runs_to_serve_an_instant() -> None:
    """The task steps of three instants with a delivery and three with a deadline: each wakes the one task
    it is for; the delay line's task never runs (`Network.wake` serves the instant in the clock's call)."""
    network = Network(Links(1, LinkSpec(Constant(0.5))), Ledger(), event_time=True)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    steps: list[str] = []

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            steps.append(task.name.rsplit(".", 1)[-1])

    async def receiver() -> None:
        while await mailbox.wait(10.0):
            mailbox.take_all(Note.KIND)

    async def scenario() -> None:
        instrument = Steps()
        async with network.open(), trio.open_nursery() as nursery:
            nursery.start_soon(receiver)
            await network.sleep(0.1)
            trio.lowlevel.add_instrument(instrument)
            for seq in range(3):
                network.send(ALICE, SERVER, Note(seq, np.zeros(1)))
                await network.sleep(1.0)
            trio.lowlevel.remove_instrument(instrument)

    trio.run(scenario, clock=VirtualClock())
    assert steps == ["receiver", "scenario"] * 3
