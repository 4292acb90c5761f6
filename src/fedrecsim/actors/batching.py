"""Same-instant batching: parties that need the same pure computation at the same virtual instant have it
computed in one call, each with its own inputs, and each gets only its own result.

A party submits its own inputs (already holding every random draw it made from its own generator) with
the ``shared`` argument every member of a batch has in common -- one object, e.g. the read-only ω the
receivers of one broadcast share (`Network.send_many`) -- and awaits its result. Under `VirtualClock` the
`Batcher` is a wake source while submissions are pending: time cannot move on, and once nothing else can
run at the instant (the network's deliveries due at it come first: it is the clock's older source) the
clock calls `Batcher.wake`, which computes one chunk and makes its parties runnable; when they are
blocked again and submissions remain, the next chunk. A chunk is the first ``chunk`` pending parties in
party order whose ``shared`` is that of the first of them (the same object): who is batched with whom
is fixed by the parties and the instant, never by the order trio happened to run their tasks. At most
one chunk's results exist before its parties have run, so memory grows by a chunk, not by an instant's
whole work.

What a party gets is its own entry of the chunk's results as ``compute`` returns it; a ``compute`` whose
entries are views of one array returns them read-only, with that array read-only too, so no party can
write to what another got. A failure of ``compute`` is raised in the chunk's first party as a
`SimulationError` that names it and how many it was batched with (its cause kept); the others stay
pending and are computed in a later chunk (which may fail the same way: then in its first party). In a
run the first such error ends the run, and the waiting parties are cancelled with the others: one error,
not one per party. A party cancelled while it waits leaves the pending set and no batch is computed for
it.

Results equal a party's own computation to float rounding, not bit for bit: BLAS multiplies a batch in
calls of other shapes than a batch of one. Under any other clock (trio's default clock, `MockClock`, the
shared clock of a TCP run) there is no instant at which the clock asks who still has work, so a party's
inputs are computed alone, at once, as a batch of one: the same numbers to float rounding, and so a
transcript whose content hash (not its structure: the same messages of the same sizes at the same
instants) differs from `fedrecsim.run`'s in the floats' last bits.

A checkpoint never finds a party waiting here (a waiting party is not at a resume point); the batcher
it saves, pickled with the parties that refer to it, comes back empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import outcome
import trio

from ..clock import VirtualClock
from ..errors import SimulationError
from ..network.party import Party

Shared = TypeVar("Shared")
Own = TypeVar("Own")
Result = TypeVar("Result")

#: ``compute(shared, owns)``: one result per entry of ``owns``, in that order; pure (it must not keep or
#: change its arguments).
Compute = Callable[[Any, Sequence[Any]], Sequence[Any]]


class _Submission:
    __slots__ = ("party", "shared", "own", "task")

    def __init__(self, party: Party, shared: object, own: object, task: trio.lowlevel.Task) -> None:
        self.party = party
        self.shared = shared
        self.own = own
        self.task = task


class Batcher(Generic[Shared, Own, Result]):
    """Computes ``compute`` for the parties that submit at one virtual instant, a chunk at a time (module
    docstring).

    Args:
        compute: ``compute(shared, owns) -> results``, pure; ``results[i]`` is ``owns[i]``'s.
        chunk: the most parties computed in one call.
    """

    def __init__(self, compute: Compute, chunk: int) -> None:
        if chunk < 1:
            raise ValueError(f"a batch holds at least one party, got chunk={chunk}")
        self.compute = compute
        self.chunk = chunk
        self._pending: dict[Party, _Submission] = {}
        self._clock: VirtualClock | None = None
        self._instant = math.inf

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.compute, self.chunk))

    async def submit(self, party: Party, shared: Shared, own: Own) -> Result:
        """``party``'s result of ``compute(shared, [own])``, computed with the others of this instant (the
        module docstring says when and with whom).

        Raises:
            SimulationError: ``compute`` failed on the chunk ``party`` was in (its error is the cause).
        """
        clock = trio.lowlevel.current_clock()
        if not isinstance(clock, VirtualClock):
            (result,) = self.compute(shared, [own])
            return result  # type: ignore[no-any-return]
        if party in self._pending:
            raise SimulationError(f"{party} submitted a second computation before its first one's result")
        if not self._pending:
            self._clock, self._instant = clock, clock.current_time()
            clock.add_source(self)
        self._pending[party] = _Submission(party, shared, own, trio.lowlevel.current_task())

        def abort(raise_cancel: object) -> trio.lowlevel.Abort:
            self._withdraw(party)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]

    def next_wake(self) -> float:
        """For `VirtualClock`: the instant of the pending submissions (inf when there are none)."""
        return self._instant

    def wake(self) -> None:
        """For `VirtualClock` (nothing else can run at the instant): compute the next chunk and make its
        parties runnable with their results, or its first party with the error ``compute`` raised."""
        first = min(self._pending)
        shared = self._pending[first].shared
        members = [
            submission for _, submission in sorted(self._pending.items()) if submission.shared is shared
        ][: self.chunk]
        try:
            results = self.compute(shared, [submission.own for submission in members])
            if len(results) != len(members):
                raise SimulationError(f"the computation returned {len(results)} results for {len(members)} parties")
        except Exception as error:  # noqa: BLE001 -- handed to the chunk's first party
            self._withdraw(first)
            failure = SimulationError(
                f"{first}'s computation, batched with {len(members) - 1} other parties', failed: {error}"
            )
            failure.__cause__ = error
            trio.lowlevel.reschedule(members[0].task, outcome.Error(failure))
            return
        for submission, result in zip(members, results):
            self._withdraw(submission.party)
            trio.lowlevel.reschedule(submission.task, outcome.Value(result))

    def _withdraw(self, party: Party) -> None:
        del self._pending[party]
        if not self._pending and self._clock is not None:
            self._clock.remove_source(self)
            self._clock, self._instant = None, math.inf


__all__ = ["Batcher", "Compute"]
