"""Ring rows on the wire and per-item ring arithmetic: exact, vectorized, strict."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrecsim.errors import ConfigError, ProtocolViolation, WireError
from fedrecsim.mechanisms import Ring
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.wire import decode, encode
from fedrecsim.protocols.dpmf.messages import Aggregate, Contribution, ItemRequest, ItemVectors, Roster
from fedrecsim.protocols.dpmf.ringops import (
    Grouping, decode_words, encode_rows, expand_masks, from_words, split_by_item, sum_by_item, to_words,
)

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


def test_words_are_views_of_the_elements_where_they_can_be() -> None:
    """A contiguous row block and its words share their bytes (no copy either way); anything else is copied."""
    ring = Ring(64, 32)
    elements = ring.uniform(np.random.default_rng(9), (5, 4))
    words = to_words(ring, elements)
    assert np.shares_memory(words, elements) and words.shape == (5, 8)
    assert np.shares_memory(from_words(ring, words, 4, "test"), words)
    strided = to_words(ring, elements[:, ::2])
    assert not np.shares_memory(strided, elements)
    np.testing.assert_array_equal(from_words(ring, strided, 2, "test"), elements[:, ::2])


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
    (lambda: ItemVectors(1, np.zeros((3, 2, 4), np.uint32), np.ones((1, 2), np.int32), b"x" * 16), "1 or 2 planes"),
    (lambda: ItemVectors.of(1, np.zeros((2, 4), np.uint32), np.ones(2, np.int32), mask_seed=b"short"), "16 bytes"),
    (lambda: ItemVectors.of(1, np.zeros((2, 4), np.uint32), np.zeros(2, np.int32)), "at least one rater"),
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


@pytest.mark.parametrize("ring", RINGS, ids=lambda ring: f"Z_2^{ring.bits}")
def test_elements_of_any_integer_dtype_or_byte_order_pack_to_the_same_words(ring: Ring) -> None:
    elements = ring.uniform(np.random.default_rng(3), (4, 3))
    words = to_words(ring, elements)
    big_endian = elements.astype(np.dtype(ring.dtype).newbyteorder(">"))
    np.testing.assert_array_equal(to_words(ring, big_endian), words)
    small = np.arange(12, dtype=np.int64).reshape(4, 3)
    np.testing.assert_array_equal(to_words(ring, small), to_words(ring, small.astype(ring.dtype)))


@pytest.mark.parametrize("ring", RINGS, ids=lambda ring: f"Z_2^{ring.bits}")
def test_words_of_any_integer_dtype_or_byte_order_unpack_to_the_same_elements(ring: Ring) -> None:
    elements = ring.uniform(np.random.default_rng(4), (4, 3))
    words = to_words(ring, elements)
    np.testing.assert_array_equal(from_words(ring, words.astype(">u4"), 3, "test"), elements)
    np.testing.assert_array_equal(from_words(ring, words.astype(np.int64), 3, "test"), elements)


def test_unpacking_views_the_received_words_without_copying() -> None:
    ring = Ring(64, 32)
    words = to_words(ring, ring.uniform(np.random.default_rng(5), (3, 2)))
    assert np.shares_memory(from_words(ring, words, 2, "test"), words)


def test_sum_by_item_wraps_in_the_ring_whatever_dtype_the_rows_come_in() -> None:
    ring = Ring(32, 16)
    rows = np.array([[2**32 - 1], [2], [7]], dtype=np.int64)
    present, sums = sum_by_item(ring, np.array([1, 1, 0]), rows, 2)
    assert sums.dtype == np.uint32
    np.testing.assert_array_equal(present, [0, 1])
    np.testing.assert_array_equal(sums, [[7], [1]])  # (2^32 - 1 + 2) mod 2^32 = 1


def test_an_item_equal_to_n_items_is_refused_naming_the_valid_range() -> None:
    ring = Ring(64, 32)
    with pytest.raises(ProtocolViolation, match=r"outside 0\.\.4 was summed"):
        sum_by_item(ring, np.array([0, 5]), ring.uniform(np.random.default_rng(0), (2, 1)), 5)


def test_float_sums_add_each_items_rows_in_the_order_given() -> None:
    """Within an item the rows are added first to last (stable grouping), so float rounding is reproducible.

    Magnitudes from 1e-8 to 1e8 make the float sum depend on the order; the expected sum is a plain
    left-to-right Python sum over the item's rows in input order, compared bit for bit.
    """
    rng = np.random.default_rng(6)
    items = rng.integers(0, 3, size=300)
    rows = (rng.standard_normal(300) * 10.0 ** rng.integers(-8, 9, size=300)).reshape(300, 1)
    grouping = Grouping(items, 3)
    sums = grouping.sum(rows)
    for item, total in zip(grouping.present, sums):
        expected = 0.0
        for value in rows[items == item, 0]:
            expected += float(value)
        assert float(total[0]) == expected
    np.testing.assert_array_equal(grouping.order, np.argsort(items, kind="stable"))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int64, np.float32, np.float64, np.float16])
def test_grouped_sums_come_back_in_the_dtype_asked_for(dtype: type) -> None:
    grouping = Grouping(np.array([2, 0, 2]), 3)
    sums = grouping.sum(np.array([[1], [2], [3]], dtype=np.uint32), dtype)
    assert sums.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(sums, [[2], [4]])


def test_grouped_sums_default_to_the_rows_dtype_and_widen_when_asked() -> None:
    grouping = Grouping(np.array([0, 0]), 1)
    rows = np.array([[2**32 - 1], [1]], dtype=np.uint32)
    assert grouping.sum(rows).dtype == np.uint32
    np.testing.assert_array_equal(grouping.sum(rows), [[0]])
    np.testing.assert_array_equal(grouping.sum(rows, np.uint64), [[2**32]])


def test_a_grouping_builds_its_summing_matrix_once_per_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    original = scipy.sparse.csr_matrix

    def counting(*args, **kwargs):
        built.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(scipy.sparse, "csr_matrix", counting)
    grouping = Grouping(np.array([1, 0, 1]), 2)
    rows = np.arange(6, dtype=np.uint64).reshape(3, 2)
    for _ in range(3):
        np.testing.assert_array_equal(grouping.sum(rows), [[2, 3], [4, 6]])
    np.testing.assert_array_equal(grouping.sum(rows, np.float64), [[2.0, 3.0], [4.0, 6.0]])
    assert len(built) == 2


def test_a_grouping_hands_scipy_its_32_bit_index_arrays_and_counts_each_items_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The summing matrix gets the index arrays in the type scipy keeps (handed 64-bit ones, its constructor
    checks and narrows them at more cost than the product); the sums are still every item's rows added mod
    2^64, and ``counts`` is each present item's number of rows."""
    handed = []
    original = scipy.sparse.csr_matrix

    def recording(arg1, *args, **kwargs):
        handed.append((arg1[1].dtype, arg1[2].dtype))
        return original(arg1, *args, **kwargs)

    monkeypatch.setattr(scipy.sparse, "csr_matrix", recording)
    rng = np.random.default_rng(11)
    items = rng.integers(0, 40, size=500)
    rows = rng.integers(0, 2**64 - 1, size=(500, 3), dtype=np.uint64, endpoint=True)
    grouping = Grouping(items, 40)
    expected = np.zeros((40, 3), dtype=np.uint64)
    np.add.at(expected, items, rows)
    np.testing.assert_array_equal(grouping.sum(rows), expected[grouping.present])
    np.testing.assert_array_equal(grouping.counts, np.bincount(items, minlength=40)[grouping.present])
    assert handed == [(np.dtype(np.int32), np.dtype(np.int32))]


def test_an_empty_grouping_has_no_items_counts_or_sums() -> None:
    grouping = Grouping(np.empty(0, dtype=np.int64), 5)
    assert grouping.present.size == grouping.counts.size == grouping.starts.size == 0
    assert grouping.sum(np.empty((0, 2), dtype=np.uint64)).shape == (0, 2)


@pytest.mark.parametrize("ring", RINGS, ids=lambda ring: f"Z_2^{ring.bits}")
def test_decoding_words_is_decoding_their_elements_bit_for_bit(ring: Ring) -> None:
    rng = np.random.default_rng(11)
    elements = ring.uniform(rng, (5, 7))
    edges = np.array([[0, 1, 2 ** (ring.bits - 1) - 1, 2 ** (ring.bits - 1), 2**ring.bits - 1, 2, 3]], dtype=ring.dtype)
    for block in (elements, edges, elements[:0]):
        words = to_words(ring, block)
        decoded = decode_words(ring, words, 7, "test")
        assert decoded.dtype == np.float64 and decoded.shape == block.shape
        np.testing.assert_array_equal(decoded.view(np.uint64), ring.decode(block).view(np.uint64))
    with pytest.raises(ProtocolViolation, match="test: expected"):
        decode_words(ring, np.zeros((2, 5), dtype=np.uint32), 7, "test")


@pytest.mark.parametrize("ring", RINGS, ids=lambda ring: f"Z_2^{ring.bits}")
def test_encoding_rows_in_scratch_is_the_rings_encoding_bit_for_bit(ring: Ring) -> None:
    """Inside the range (ties, negative zero, the exact ends), past it (clamped and counted by `Ring.encode`),
    empty; the rows themselves are left as they were."""
    rng = np.random.default_rng(12)
    step, top = ring.resolution, ring.max_abs
    cases = [
        rng.standard_normal((4, 6)) * 100,
        np.array([[0.5 * step, 1.5 * step, -2.5 * step, -0.0, top, -top]]),
        np.array([[top * 2, -top * 4, 1.0, np.nextafter(top, np.inf), 3.0, -1.0]]),
        np.empty((0, 6)),
    ]
    for rows in cases:
        before = rows.copy()
        scratch = np.full(rows.shape, np.nan)
        elements, overflow = encode_rows(ring, rows, scratch)
        expected, expected_overflow = ring.encode(rows)
        assert elements.dtype == ring.dtype and overflow == expected_overflow
        np.testing.assert_array_equal(elements, expected)
        np.testing.assert_array_equal(rows, before)
    assert encode_rows(ring, cases[2], np.empty((1, 6)))[1] >= 2  # the two past the range, clamped


def test_encoding_rows_refuses_what_the_ring_refuses() -> None:
    ring = Ring(64, 32)
    with pytest.raises(ConfigError, match="Ring.encode"):
        encode_rows(ring, np.array([[1.0, np.nan]]), np.empty((1, 2)))
