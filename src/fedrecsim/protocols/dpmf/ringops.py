"""Ring elements on the wire and per-item arithmetic in Z_{2^b}, vectorized across users.

Everything masked in DP-MF lives in `fedrecsim.mechanisms.Ring`; this module adds what the protocol needs
on top: packing ring rows into the ``uint32`` words that travel in messages, summing rows per item mod
2^b (the third party's and the recommender's aggregation), splitting a per-item value into one additive
share per row (tau^_j into the k'_j pieces of S3), and expanding a 16-byte key into masks (the
``seeded`` mask transport).

Per-item sums iterate rows in the order given; callers pass rows in sorted party order, although a sum
mod 2^b does not depend on the order anyway -- which is the point of doing it in a ring.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse

from ...errors import ProtocolViolation
from ...mechanisms.ring import Ring


def words_per_element(ring: Ring) -> int:
    """uint32 words per ring element: 1 in Z_{2^32}, 2 in Z_{2^64}."""
    return ring.bits // 32


# The little-endian element type of each ring width, and of a word: built once, not per message. Where the
# machine is little-endian too (`_NATIVE`), a ring row and its words are two views of the same bytes.
_LITTLE = {32: np.dtype("<u4"), 64: np.dtype("<u8")}
_WORD = _LITTLE[32]
_NATIVE = {32: _LITTLE[32] == np.dtype(np.uint32), 64: _LITTLE[64] == np.dtype(np.uint64)}
_SIGNED = {32: np.dtype(np.int32), 64: np.dtype(np.int64)}


def to_words(ring: Ring, elements: np.ndarray) -> np.ndarray:
    """``uint32[rows, d * w]``: each element as its w little-endian 32-bit words (see `messages`)."""
    bits = ring.bits
    if _NATIVE[bits] and elements.dtype == _LITTLE[bits] and elements.flags.c_contiguous and elements.ndim == 2:
        return elements.view(_WORD)  # the last axis widens by w, the rows stay: the same bytes
    little = np.ascontiguousarray(elements, dtype=_LITTLE[bits])
    return little.view(_WORD).reshape(little.shape[0], little.shape[1] * (bits // 32))


def from_words(ring: Ring, words: np.ndarray, d: int, what: str) -> np.ndarray:
    """The ring elements ``[rows, d]`` packed in ``words``; ProtocolViolation naming ``what`` if the shape is off."""
    bits = ring.bits
    if words.ndim != 2 or words.shape[1] != d * (bits // 32):
        raise ProtocolViolation(f"{what}: expected {d * words_per_element(ring)} words per row, got shape {words.shape}")
    if words.dtype != _WORD or not words.flags.c_contiguous:
        words = np.ascontiguousarray(words, dtype=_WORD)
    elements = words.view(_LITTLE[bits])
    return elements if _NATIVE[bits] else elements.astype(ring.dtype)


def decode_words(ring: Ring, words: np.ndarray, d: int, what: str) -> np.ndarray:
    """``ring.decode(from_words(ring, words, d, what))``, bit for bit: float64 ``[rows, d]``.

    The same two steps as ``decode`` -- the signed view converted to float64, then scaled in place by 2^-f
    (a power of two: exact) -- without its type checks; a mixed integer-by-float multiply would give the same
    bits but pays numpy's casting loop, which costs more than the conversion on a user's few rows.
    """
    values = from_words(ring, words, d, what).view(_SIGNED[ring.bits]).astype(np.float64)
    values *= _fixed_point(ring)[1]
    return values


def encode_rows(ring: Ring, x: np.ndarray, scratch: np.ndarray) -> tuple[np.ndarray, int]:
    """``ring.encode(x)`` for a float64 array, bit for bit, with ``scratch`` (float64, the shape of ``x``,
    overwritten) in place of its three temporaries; ``x`` is left as it was.

    When every ``|x|`` is within ``ring.max_abs`` (a NaN is not), nothing is clamped and the elements are
    ``rint(x * 2^f)`` as signed integers viewed as ring elements -- what ``encode`` computes; otherwise
    ``encode`` itself clamps, counts and raises.
    """
    scale, _, limit = _fixed_point(ring)
    np.abs(x, out=scratch)
    if not x.size or not scratch.max() <= limit:
        return ring.encode(x)
    np.multiply(x, scale, out=scratch)
    np.rint(scratch, out=scratch)
    return scratch.astype(_SIGNED[ring.bits]).view(ring.dtype), 0


# (2^f, 2^-f, max_abs) of each ring, computed once per (bits, frac_bits): constants of the ring, not state.
_FIXED_POINTS: dict[tuple[int, int], tuple[float, float, float]] = {}


def _fixed_point(ring: Ring) -> tuple[float, float, float]:
    key = (ring.bits, ring.frac_bits)
    fixed = _FIXED_POINTS.get(key)
    if fixed is None:
        fixed = _FIXED_POINTS[key] = (math.ldexp(1.0, ring.frac_bits), ring.resolution, ring.max_abs)
    return fixed


class Grouping:
    """Rows grouped by item: the stable order that sorts them, where each item's run starts, and the items.

    Computing it once lets several arrays aligned with the same rows be summed per item at the cost of one
    sort. A sum is the product of a 0/1 matrix (one row per present item, a one at each of its rows) with
    the rows: scipy's sparse product runs in C without the per-item overhead of ``np.add.reduceat`` (4x
    faster on ring words, 15x on float rows, at a few rows per item), and in unsigned integers it wraps
    mod 2^b exactly like the ring. The matrix's index arrays are built in the index type scipy keeps (32
    bits below 2^31 rows): handed 64-bit ones, scipy's constructor spends more checking and narrowing them
    than the product takes.
    """

    __slots__ = ("order", "starts", "present", "_indptr", "_indices", "_matrices")

    def __init__(self, items: np.ndarray, n_items: int) -> None:
        self.order = np.argsort(items, kind="stable")
        ordered = items[self.order]
        first = np.empty(items.size, dtype=bool)
        first[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        self.starts = np.flatnonzero(first)
        self.present = ordered[self.starts].astype(np.int64)
        if self.present.size and (self.present[-1] >= n_items or self.present[0] < 0):
            raise ProtocolViolation(f"an item index outside 0..{n_items - 1} was summed")
        index = np.int32 if items.size <= np.iinfo(np.int32).max else np.int64
        self._indptr = np.empty(self.starts.size + 1, dtype=index)
        self._indptr[:-1] = self.starts
        self._indptr[-1] = items.size
        self._indices = self.order.astype(index)
        self._matrices: dict[np.dtype, scipy.sparse.csr_matrix] = {}

    @property
    def counts(self) -> np.ndarray:
        """``int[present.size]``: the rows of each present item."""
        return np.diff(self._indptr).astype(np.int64)

    def sum(self, rows: np.ndarray, dtype: type | None = None) -> np.ndarray:
        """Per-item sums of ``rows`` (aligned with the grouped items), accumulated in ``dtype`` (ring: wraps)."""
        dtype = np.dtype(dtype or rows.dtype)
        if not self.present.size:
            return np.empty((0, *rows.shape[1:]), dtype=dtype)
        matrix = self._matrices.get(dtype)
        if matrix is None:
            shape = (self.present.size, self.order.size)
            ones = np.ones(self.order.size, dtype=dtype)
            matrix = self._matrices[dtype] = scipy.sparse.csr_matrix((ones, self._indices, self._indptr), shape=shape)
        return np.asarray(matrix @ rows.astype(dtype, copy=False), dtype=dtype)


def sum_by_item(ring: Ring, items: np.ndarray, rows: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``rows`` (ring, ``[r, d]``) per item mod 2^b.

    Args:
        items: ``int[r]``, the item of each row.

    Returns:
        ``(present, sums)``: the items that have at least one row (ascending) and their sums.
    """
    grouping = Grouping(items, n_items)
    return grouping.present, grouping.sum(rows, ring.dtype)


def split_by_item(ring: Ring, items: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Additive shares of ``values[items[r]]``, one per row, uniform subject to summing to the value.

    For every item j, the rows with ``items[r] == j`` get shares that sum to ``values[j]`` mod 2^b and of
    which any all-but-one are jointly uniform -- `Ring.split` for every item at once (the recommender
    dividing tau^_j among the k'_j users it serves, S3's first exception).

    Args:
        items: ``int[r]``, the item of each row.
        values: ring ``[n_items, d]``.
        rng: the caller's generator.

    Returns:
        ring ``[r, d]``.
    """
    shares = ring.uniform(rng, (items.size, values.shape[1]))
    if not items.size:
        return shares
    present, sums = sum_by_item(ring, items, shares, values.shape[0])
    # The last row of each item absorbs the difference, so its share is value - (sum of the others).
    last = items.size - 1 - np.unique(items[::-1], return_index=True)[1]
    shares[last] = ring.add(shares[last], ring.sub(values[present], sums))
    return shares


def expand_masks(ring: Ring, key: bytes, rows: int, d: int) -> np.ndarray:
    """The masks psi that a 16-byte key stands for: ``rows x d`` uniform ring elements.

    Both the recommender and the user expand the key the same way, so only the key travels. The PRG is
    numpy's PCG64 seeded with the 128-bit key -- statistically uniform, which is all the simulation needs;
    a deployment would use a cryptographic PRG (e.g. AES-CTR) keyed the same way.
    """
    generator = np.random.Generator(np.random.PCG64(int.from_bytes(key, "little")))
    return ring.uniform(generator, (rows, d))


__all__ = [
    "Grouping", "decode_words", "encode_rows", "expand_masks", "from_words", "split_by_item", "sum_by_item", "to_words",
    "words_per_element",
]
