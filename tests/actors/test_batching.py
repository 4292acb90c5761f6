"""Same-instant batching (`fedrecsim.actors.batching`): who is computed with whom, what each party gets back,
and what happens on failure, on cancellation and under a clock that does not jump."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import trio

from fedrecsim.actors.batching import Batcher
from fedrecsim.clock import VirtualClock
from fedrecsim.errors import SimulationError
from fedrecsim.network.party import Party, Role


class Squares:
    """``shared + own ** 2`` for each party's ``own``, one read-only array per call, recording each call's inputs."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, shared: np.ndarray, owns: Sequence[int]) -> list[np.ndarray]:
        self.calls.append(list(owns))
        rows = shared + np.square(np.array(owns, dtype=np.float64))[:, None]
        rows.flags.writeable = False
        return list(rows)


def _user(index: int) -> Party:
    return Party(Role.USER, index)


async def _submit_all(batcher: Batcher, submissions: list[tuple[int, np.ndarray, int]], delays: dict[int, float]) -> dict[int, np.ndarray]:
    """Every ``(party index, shared, own)`` submitted by a task of its own after ``delays[index]`` (0 if absent)
    virtual seconds; started in reverse party order so that a batch in submission order would be visible."""
    results: dict[int, np.ndarray] = {}

    async def one(index: int, shared: np.ndarray, own: int) -> None:
        await trio.sleep(delays.get(index, 0.0))
        results[index] = await batcher.submit(_user(index), shared, own)

    async with trio.open_nursery() as nursery:
        for submission in reversed(submissions):
            nursery.start_soon(one, *submission)
    return results


def test_the_parties_of_one_instant_are_computed_together_in_party_order_a_chunk_at_a_time() -> None:
    squares = Squares()
    omega = np.zeros(3)
    submissions = [(index, omega, index) for index in range(7)]

    results = trio.run(_submit_all, Batcher(squares, chunk=3), submissions, {}, clock=VirtualClock())

    assert squares.calls == [[0, 1, 2], [3, 4, 5], [6]]
    for index, result in results.items():
        assert np.array_equal(result, np.full(3, float(index * index)))


def test_parties_of_other_instants_or_of_another_shared_object_are_not_batched_together() -> None:
    squares = Squares()
    first, second = np.zeros(2), np.zeros(2)
    submissions = [(0, first, 0), (1, second, 1), (2, first, 2), (3, first, 3), (4, first, 4)]

    trio.run(_submit_all, Batcher(squares, chunk=8), submissions, {4: 1.0}, clock=VirtualClock())

    assert squares.calls == [[0, 2, 3], [1], [4]]


def test_a_party_gets_its_own_result_read_only_and_cannot_write_to_anothers() -> None:
    results = trio.run(_submit_all, Batcher(Squares(), chunk=4), [(0, np.zeros(2), 1), (1, np.zeros(2), 2)], {}, clock=VirtualClock())

    for result in results.values():
        assert not result.flags.writeable and not result.base.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            result[0] = 5.0


def test_a_failing_computation_reaches_the_chunks_first_party_and_the_others_are_tried_again_none_left_waiting() -> None:
    def failing(shared: object, owns: Sequence[int]) -> list[int]:
        raise ZeroDivisionError("the model diverged")

    batcher: Batcher = Batcher(failing, chunk=4)
    failures: dict[int, BaseException] = {}

    async def one(index: int) -> None:
        try:
            await batcher.submit(_user(index), None, index)
        except SimulationError as error:
            failures[index] = error

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for index in range(3):
                nursery.start_soon(one, index)

    trio.run(main, clock=VirtualClock())

    assert sorted(failures) == [0, 1, 2]
    for index, error in failures.items():
        assert f"user:{index}'s computation, batched with {2 - index} other parties', failed: the model diverged" in str(error)
        assert isinstance(error.__cause__, ZeroDivisionError)


def test_a_computation_that_returns_too_few_results_ends_the_run_with_one_error_and_no_party_left_waiting() -> None:
    """The first party's error ends the nursery; the other party, still pending, is cancelled with it."""
    batcher: Batcher = Batcher(lambda shared, owns: [0], chunk=4)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for index in range(3):
                nursery.start_soon(batcher.submit, _user(index), None, index)

    with pytest.raises(BaseExceptionGroup) as caught:
        trio.run(main, clock=VirtualClock(), strict_exception_groups=True)
    (error,) = caught.value.exceptions
    assert "user:0's computation, batched with 2 other parties', failed: the computation returned 1 results for 3 parties" in str(error)


def test_a_party_cancelled_while_it_waits_leaves_the_batch_and_time_moves_on() -> None:
    squares = Squares()
    batcher: Batcher = Batcher(squares, chunk=4)
    omega = np.zeros(1)

    async def main() -> float:
        with trio.CancelScope() as scope:
            scope.cancel()
            await batcher.submit(_user(0), omega, 5)
        await trio.sleep(2.0)
        await batcher.submit(_user(1), omega, 1)
        return trio.current_time()

    assert trio.run(main, clock=VirtualClock()) == 2.0
    assert squares.calls == [[1]]


def test_under_trios_default_clock_each_party_is_computed_alone_at_once() -> None:
    squares = Squares()
    omega = np.zeros(2)

    results = trio.run(_submit_all, Batcher(squares, chunk=8), [(index, omega, index) for index in range(3)], {})

    assert sorted(squares.calls) == [[0], [1], [2]]
    assert all(np.array_equal(results[index], np.full(2, float(index * index))) for index in range(3))


def test_a_chunk_holds_at_least_one_party() -> None:
    with pytest.raises(ValueError, match="at least one party"):
        Batcher(Squares(), chunk=0)
