"""Ring rows on the wire and per-item ring arithmetic: exact, vectorized, strict."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrecsim.errors import ProtocolViolation, WireError
from fedrecsim.mechanisms import Ring
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.wire import decode, encode
from fedrecsim.protocols.dpmf.messages import Aggregate, Contribution, ItemRequest, ItemVectors, Roster
from fedrecsim.protocols.dpmf.ringops import expand_masks, from_words, split_by_item, sum_by_item, to_words

RINGS = [Ring(32, 16), Ring(64, 32)]
USER = Party(Role.USER, 3)


@pytest.mark.parametrize("ring", RINGS, ids=lambda ring: f"Z_2^{ring.bits}")
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(0, 5), d=st.integers(1, 7))
def test_rows_survive_the_wire_bit_for_bit(ring: Ring, seed: int, rows: int, d: int) -> None:
    elements = ring.uniform(np.random.default_rng(seed), (rows, d))
    words = to_words(ring, elements)
    assert words.dtype == np.uint32 and words.shape == (rows, d * ring.bits // 32)
    body = decode(encode(USER, THIRD_PARTY, 0.0, Contribution(1, np.arange(rows, dtype=np.int32), words))).body
    np.testing.assert_array_equal(from_words(ring, body.phi, d, "test"), elements)


def test_a_32_bit_ring_costs_4_bytes_per_value() -> None:
    sizes = {}
    for ring in RINGS:
        words = to_words(ring, ring.uniform(np.random.default_rng(0), (20, 50)))
        sizes[ring.bits] = len(encode(USER, THIRD_PARTY, 0.0, Contribution(1, np.arange(20, dtype=np.int32), words)))
    assert 20 * 50 * 4 < sizes[32] < 20 * 50 * 4 + 200
    assert sizes[64] - sizes[32] == 20 * 50 * 4


def test_rows_of_the_wrong_width_are_refused() -> None:
    with pytest.raises(ProtocolViolation, match="words per row"):
        from_words(Ring(64, 32), np.zeros((2, 5), dtype=np.uint32), 5, "test")


@pytest.mark.parametrize("ring", RINGS, ids=lambda ring: f"Z_2^{ring.bits}")
def test_sum_by_item_is_the_modular_sum_per_item(ring: Ring) -> None:
    rng = np.random.default_rng(1)
    items = rng.integers(0, 7, size=60)
    rows = ring.uniform(rng, (60, 3))
    present, sums = sum_by_item(ring, items, rows, 7)
    np.testing.assert_array_equal(present, np.unique(items))
    for item, total in zip(present, sums):
        expected = [sum(int(value) for value in rows[items == item, column]) % ring.modulus for column in range(3)]
        assert [int(value) for value in total] == expected


def test_sum_by_item_refuses_unknown_items() -> None:
    ring = Ring(64, 32)
    with pytest.raises(ProtocolViolation, match="outside"):
        sum_by_item(ring, np.array([0, 9]), ring.uniform(np.random.default_rng(0), (2, 1)), 5)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 40))
def test_split_by_item_shares_sum_to_each_items_value(seed: int, n_rows: int) -> None:
    ring = Ring(64, 32)
    rng = np.random.default_rng(seed)
    items = rng.integers(0, 6, size=n_rows)
    values = ring.uniform(rng, (6, 4))
    shares = split_by_item(ring, items, values, rng)
    present, sums = sum_by_item(ring, items, shares, 6)
    np.testing.assert_array_equal(sums, values[present])


def test_split_shares_are_uniform_one_at_a_time() -> None:
    """tau^_j = 0 split in two: each share alone is uniform (top-4-bit chi-square, fixed seed, p > 1e-3)."""
    ring = Ring(64, 32)
    items = np.repeat(np.arange(2000), 2)
    shares = split_by_item(ring, items, np.zeros((2000, 1), dtype=np.uint64), np.random.default_rng(2))
    for share in (shares[0::2], shares[1::2]):
        counts = np.bincount((share.ravel() >> np.uint64(60)).astype(np.int64), minlength=16)
        assert stats.chisquare(counts).pvalue > 1e-3
    np.testing.assert_array_equal(ring.add(shares[0::2], shares[1::2]), 0)


def test_masks_from_a_key_are_reproducible_and_key_specific() -> None:
    ring = Ring(64, 32)
    first = expand_masks(ring, b"k" * 16, 3, 4)
    np.testing.assert_array_equal(first, expand_masks(ring, b"k" * 16, 3, 4))
    assert not np.array_equal(first, expand_masks(ring, b"j" * 16, 3, 4))


@pytest.mark.parametrize("message, problem", [
    (lambda: ItemRequest(np.array([3, 1], dtype=np.int32)), "sorted"),
    (lambda: ItemVectors(1, np.zeros((2, 4), np.uint32), np.ones(2, np.int32), masks=np.zeros((2, 4), np.uint32), mask_seed=b"x" * 16), "not both"),
    (lambda: ItemVectors(1, np.zeros((2, 4), np.uint32), np.ones(2, np.int32), mask_seed=b"short"), "16 bytes"),
    (lambda: ItemVectors(1, np.zeros((2, 4), np.uint32), np.zeros(2, np.int32)), "at least one rater"),
    (lambda: Aggregate(1, np.array([0, 1], np.int32), np.zeros((3, 4), np.uint32), ()), "rows"),
    (lambda: Roster(1, (Party(Role.USER, 2), Party(Role.USER, 1)), 5.0), "sorted"),
])
def test_malformed_messages_are_refused_on_decode(message, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        decode(encode(SERVER, USER, 0.0, message()))


def test_a_mask_key_seeds_pcg64_with_its_bytes_read_little_endian() -> None:
    """The documented PRG: key byte 0 is the least significant byte of PCG64's 128-bit seed."""
    ring = Ring(64, 32)
    key = bytes([7]) + bytes(14) + bytes([1])  # 7 + 2^120
    expected = ring.uniform(np.random.Generator(np.random.PCG64(7 + 2**120)), (3, 4))
    np.testing.assert_array_equal(expand_masks(ring, key, 3, 4), expected)
