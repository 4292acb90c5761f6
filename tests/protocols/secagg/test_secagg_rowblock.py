"""Sparse inputs (`RowBlock`): a user whose input is zero but for some rows of its matrix view hands
secure aggregation those rows. In ideal mode the functionality sums the rows without a dense vector per
user; in real mode the user masks the dense vector. Either way the sum is the dense inputs' sum, ring
element for ring element, and the bytes on the wire are the dense protocol's."""

from __future__ import annotations

import tracemalloc
import weakref
from dataclasses import replace

import numpy as np
import pytest

from fedrecsim.mechanisms.ring import Ring
from fedrecsim.protocols.secagg import Aggregate, IdealSum, RowBlock, SecAggParams, Stage
from fedrecsim.protocols.secagg import roles
from fedrecsim.protocols.secagg.real import RealUser
from secagg_harness import run_session

N_ROWS, WIDTH = 5, 3


def _blocks(n: int, ring: Ring, seed: int = 2) -> list[RowBlock]:
    """n inputs, each nonzero on a random set of rows (the last one on none), values anywhere in the ring."""
    rng = np.random.default_rng(seed)
    blocks = []
    for index in range(n):
        rows = np.sort(rng.choice(N_ROWS, size=0 if index == n - 1 else int(rng.integers(1, N_ROWS + 1)), replace=False))
        blocks.append(RowBlock(rows, ring.uniform(rng, (rows.size, WIDTH)), N_ROWS))
    return blocks


def _dense_sum(blocks: list[RowBlock], ring: Ring) -> np.ndarray:
    total = np.zeros(N_ROWS * WIDTH, dtype=ring.dtype)
    for block in blocks:
        matrix = np.zeros((N_ROWS, WIDTH), dtype=ring.dtype)
        for row, values in zip(block.rows, block.block):
            matrix[row] = values
        total = (total + matrix.ravel()).astype(ring.dtype)  # unsigned: wraps mod 2^b
    return total


def test_a_row_block_is_the_vector_of_its_rows() -> None:
    block = RowBlock(np.array([3, 0]), np.array([[1, 2], [3, 4]], dtype=np.uint32), 4)
    assert (block.size, block.dtype) == (8, np.uint32)
    assert block.dense().tolist() == [3, 4, 0, 0, 0, 0, 1, 2]
    assert RowBlock(np.array([], dtype=np.int64), np.zeros((0, 2), dtype=np.uint32), 3).dense().tolist() == [0] * 6


def test_the_ideal_sum_of_blocks_and_dense_inputs_is_their_dense_sum() -> None:
    ring = Ring(32, 8)
    blocks = _blocks(4, ring)
    ideal = IdealSum()
    for index, block in enumerate(blocks):
        ideal.deposit(1, index, block.dense() if index % 2 else block)
    kept = blocks[0].block.copy()
    blocks[0].block[...] = 0  # the functionality holds its own copy of what was deposited
    blocks[0] = RowBlock(blocks[0].rows, kept, N_ROWS)
    np.testing.assert_array_equal(ideal.total(1, [3, 2, 1, 0], ring, N_ROWS * WIDTH), _dense_sum(blocks, ring))
    np.testing.assert_array_equal(ideal.total(1, [0, 2], ring, N_ROWS * WIDTH), _dense_sum(blocks[0:3:2], ring))


class _Inputs(list):
    """The harness's inputs: one per user, with the length of the session."""

    shape = (0, N_ROWS * WIDTH)


@pytest.mark.parametrize("ideal", [False, True], ids=["real", "ideal"])
def test_a_session_over_row_blocks_sums_them_with_the_dense_protocols_bytes(ideal: bool) -> None:
    params = replace(SecAggParams(graph="complete"), ideal=ideal)
    blocks = _blocks(6, params.ring)
    sparse = run_session(_Inputs(blocks), params)
    dense = run_session(np.stack([block.dense() for block in blocks]), params)
    assert isinstance(sparse.result, Aggregate) and len(sparse.result.survivors) == 6
    np.testing.assert_array_equal(sparse.result.total, _dense_sum(blocks, params.ring))
    assert sparse.ledger == dense.ledger


def test_real_mode_makes_a_users_dense_input_only_as_it_masks_it(monkeypatch) -> None:
    """A real-mode user densifies its `RowBlock` at the masking stage, with no wait between, so at most one
    dense input is alive at a time; densified before the first stage, every user's would be alive while the
    session waits (PriviRec's item-item input at ML-1M's shape: 55 MB a user)."""
    alive: list[weakref.ref] = []
    seen: list[int] = []
    dense, mask = RowBlock.dense, RealUser.mask

    def tracked_dense(self: RowBlock) -> np.ndarray:
        vector = dense(self)
        alive.append(weakref.ref(vector))
        return vector

    def counted_mask(self: RealUser, x: np.ndarray, partners) -> np.ndarray:  # type: ignore[no-untyped-def]
        seen.append(sum(ref() is not None for ref in alive))
        return mask(self, x, partners)

    monkeypatch.setattr(RowBlock, "dense", tracked_dense)
    monkeypatch.setattr(RealUser, "mask", counted_mask)
    params = SecAggParams(graph="complete")
    blocks = _blocks(6, params.ring)
    outcome = run_session(_Inputs(blocks), params)
    assert isinstance(outcome.result, Aggregate) and len(outcome.result.survivors) == 6
    assert seen == [1] * 6


def test_a_real_mode_user_keeps_no_copy_of_its_masked_input_once_sent(monkeypatch) -> None:
    """While the server collects the masked inputs, each one lives in the network's message (and the
    server's view of it) only: the user's own bytes of y_u are let go once sent, not kept until its
    session ends. Counted with tracemalloc at the server's check after MaskedInputCollection (every user
    has sent y_u and waits for Unmask): the blocks of at least one input's size allocated in `participate`
    and still alive."""
    params = SecAggParams(graph="complete")
    length = 4096
    input_bytes = length * np.dtype(params.ring.dtype).itemsize
    alive: list[int] = []
    check = roles._Graph.check

    def counted_check(self, stage, alive_parties, t):  # type: ignore[no-untyped-def]
        if stage is Stage.MASKED_INPUT:
            snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, roles.__file__)])
            alive.append(sum(1 for trace in snapshot.traces if trace.size >= input_bytes))
        return check(self, stage, alive_parties, t)

    monkeypatch.setattr(roles._Graph, "check", counted_check)
    tracemalloc.start(1)
    try:
        outcome = run_session(params.ring.uniform(np.random.default_rng(3), (6, length)), params)
    finally:
        tracemalloc.stop()
    assert isinstance(outcome.result, Aggregate) and len(outcome.result.survivors) == 6
    assert alive == [0]
