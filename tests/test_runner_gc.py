"""The cyclic garbage collector during runs: relaxed and frozen for `run`, restored after, whatever happens."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import fedrecsim
from fedrecsim.runner import RELAXED_THRESHOLDS, relaxed_garbage_collection


class _Node:
    """A member of a reference cycle, to watch with a weak reference."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> tuple[_Node, weakref.ref[_Node]]:
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    return first, weakref.ref(second)


@pytest.fixture(autouse=True)
def _nothing_frozen() -> Iterator[None]:
    """Every test starts with nothing frozen and the default thresholds, and must leave it so."""
    gc.collect()
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    assert thresholds != RELAXED_THRESHOLDS
    yield
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


class _Watch:
    """A progress callback noting, after each round, what is frozen and the collector's thresholds."""

    def __init__(self, fail_at: int = 0) -> None:
        self.frozen: list[int] = []
        self.thresholds: list[tuple[int, ...]] = []
        self.fail_at = fail_at

    def __call__(self, completed: int, total: int) -> None:
        self.frozen.append(gc.get_freeze_count())
        self.thresholds.append(gc.get_threshold())
        if completed == self.fail_at:
            raise RuntimeError("the caller's progress callback failed")


def test_a_run_freezes_from_its_first_round_to_its_end(tiny_fcf: dict[str, Any]) -> None:
    watch = _Watch()
    fedrecsim.run(tiny_fcf, progress=watch)
    assert len(watch.frozen) == 5
    assert all(count > 1000 for count in watch.frozen)  # the actors, data and network the set-up built
    assert watch.thresholds == [RELAXED_THRESHOLDS] * 5
    # and the fixture checks that nothing is frozen after it, at the thresholds from before


def test_a_run_that_fails_restores_the_collector(tiny_fcf: dict[str, Any]) -> None:
    watch = _Watch(fail_at=2)
    with pytest.raises(RuntimeError, match="progress callback failed"):
        fedrecsim.run(tiny_fcf, progress=watch)
    assert watch.frozen[0] > 0  # it froze, then failed: the fixture checks it unfroze


def test_a_callers_objects_are_collected_as_always_around_a_run(tiny_fcf: dict[str, Any]) -> None:
    """An object of the caller's that existed before the run and became garbage during it is collected
    after the run; one made during the run is collected during it; one made after, after."""
    before, before_ref = _cycle()
    during_refs: list[weakref.ref[_Node]] = []
    collected_during: list[bool] = []

    def progress(completed: int, total: int) -> None:
        nonlocal before
        if completed == 1:
            before = None  # type: ignore[assignment]  # garbage now, but frozen until the run ends
            node, ref = _cycle()
            during_refs.append(ref)
            del node
        if completed == 2:
            gc.collect()
            collected_during.append(during_refs[0]() is None)

    fedrecsim.run(tiny_fcf, progress=progress)
    assert collected_during == [True]
    assert before_ref() is not None  # kept frozen while the run was under way
    gc.collect()
    assert before_ref() is None
    after, after_ref = _cycle()
    del after
    gc.collect()
    assert after_ref() is None


def test_runs_under_way_at_once_hold_the_collector_until_the_last_ends() -> None:
    """Held by a count: the first in relaxes, the last out restores, whatever order they end in."""
    thresholds = gc.get_threshold()
    first, second = relaxed_garbage_collection(), relaxed_garbage_collection()
    freeze_first = first.__enter__()
    freeze_first()
    frozen = gc.get_freeze_count()
    freeze_second = second.__enter__()
    made_by_second, _ = _cycle()
    freeze_second()
    assert gc.get_freeze_count() > frozen  # the second run's own objects are frozen too
    first.__exit__(None, None, None)
    assert gc.get_threshold() == RELAXED_THRESHOLDS and gc.get_freeze_count() > frozen
    second.__exit__(None, None, None)
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0
    del made_by_second


def test_two_runs_in_two_threads_at_once(tiny_fcf: dict[str, Any]) -> None:
    both_under_way = threading.Barrier(2, timeout=60)
    watches = [_Watch(), _Watch()]
    results: list[str] = []

    def run(index: int) -> None:
        def progress(completed: int, total: int) -> None:
            watches[index](completed, total)
            if completed == 1:
                both_under_way.wait()

        results.append(fedrecsim.run(tiny_fcf, progress=progress).transcript_xxh3_128)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1]
    assert all(watch.thresholds == [RELAXED_THRESHOLDS] * 5 for watch in watches)
    assert all(count > 0 for watch in watches for count in watch.frozen)


def test_a_process_that_froze_objects_of_its_own_keeps_them_frozen(tiny_fcf: dict[str, Any]) -> None:
    mine, mine_ref = _cycle()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        watch = _Watch()
        fedrecsim.run(tiny_fcf, progress=watch)
        assert watch.frozen == [frozen] * 5  # the run froze nothing of its own...
        assert gc.get_freeze_count() == frozen  # ...and unfroze nothing of the process's
        del mine
        gc.collect()
        assert mine_ref() is not None  # still frozen, as the process left it
    finally:
        gc.unfreeze()


async def test_run_async_leaves_the_collector_alone(tiny_fcf: dict[str, Any], autojump_clock: Any) -> None:
    watch = _Watch()
    await fedrecsim.run_async(tiny_fcf, progress=watch)
    assert watch.frozen == [0] * 5
    assert RELAXED_THRESHOLDS not in watch.thresholds
