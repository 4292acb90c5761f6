"""Fixed-point ring Z_{2^b}: exact modular arithmetic, faithful encoding, overflow that is counted."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import Ring

RINGS = [Ring(), Ring(64, 40), Ring(64, 1), Ring(32, 16), Ring(32, 8), Ring(32, 30)]
rings = st.sampled_from(RINGS)
shapes = hnp.array_shapes(min_dims=0, max_dims=2, max_side=6)


def elements(ring: Ring, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """Arbitrary ring elements over the whole range (hypothesis favours the edges, 0 and 2^b - 1)."""
    return hnp.arrays(ring.dtype, shape)


def reals(ring: Ring, shape: tuple[int, ...], bound: float) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float64, shape, elements=st.floats(-bound, bound, allow_nan=False))


def as_ints(u: np.ndarray) -> np.ndarray:
    """Ring elements as exact Python integers, the reference the numpy results are checked against."""
    return np.vectorize(int, otypes=[object])(u)


@given(st.data())
def test_encode_then_decode_is_within_half_a_step(data: st.DataObject) -> None:
    ring = data.draw(rings)
    x = data.draw(reals(ring, data.draw(shapes), ring.max_abs))
    u, n_overflow = ring.encode(x)
    assert u.dtype == ring.dtype and u.shape == x.shape
    assert n_overflow == 0
    assert np.all(np.abs(ring.decode(u) - x) <= ring.resolution / 2)


@given(st.data())
def test_add_and_sub_are_exact_modular_arithmetic(data: st.DataObject) -> None:
    ring = data.draw(rings)
    shape = data.draw(shapes)
    a, b, c = (data.draw(elements(ring, shape)) for _ in range(3))
    assert np.array_equal(ring.sub(ring.add(a, b), b), a)
    assert np.array_equal(ring.add(a, b), ring.add(b, a))
    assert np.array_equal(ring.add(ring.add(a, b), c), ring.add(a, ring.add(b, c)))
    assert np.array_equal(ring.add(a, ring.neg(a)), np.zeros(shape, ring.dtype))
    expected = (as_ints(a) + as_ints(b)) % ring.modulus
    assert np.array_equal(as_ints(ring.add(a, b)), expected)


@given(st.data())
def test_sum_wraps_like_python_integers(data: st.DataObject) -> None:
    ring = data.draw(rings)
    u = data.draw(elements(ring, data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))))
    axis = data.draw(st.integers(0, u.ndim - 1))
    expected = as_ints(u).sum(axis=axis) % ring.modulus
    assert np.array_equal(as_ints(ring.sum(u, axis=axis)), expected)
    assert int(ring.sum(u)) == int(as_ints(u).sum()) % ring.modulus


@given(st.data(), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_shares_sum_to_the_value(data: st.DataObject, k: int, seed: int) -> None:
    ring = data.draw(rings)
    value = data.draw(elements(ring, data.draw(shapes)))
    shares = ring.split(value, k, np.random.default_rng(seed))
    assert shares.shape == (k, *value.shape) and shares.dtype == ring.dtype
    assert np.array_equal(ring.sum(shares, axis=0), value)


@given(st.data())
def test_sum_of_encodings_decodes_to_the_sum(data: st.DataObject) -> None:
    ring = data.draw(rings)
    shape = data.draw(shapes)
    # One step of headroom: rounding may push each encoding half a step outward, and the sum of the
    # two encodings (not only x + y) has to stay in the signed range.
    half = ring.max_abs / 2 - ring.resolution
    x = data.draw(reals(ring, shape, half))
    y = data.draw(reals(ring, shape, half))
    total = ring.decode(ring.add(ring.encode(x)[0], ring.encode(y)[0]))
    # Two roundings of at most half a step each, plus float64 rounding of x + y and of the decode.
    tolerance = ring.resolution + 4 * np.spacing(np.abs(x) + np.abs(y))
    assert np.all(np.abs(total - (x + y)) <= tolerance)


@given(st.data())
def test_overflow_is_counted_and_clamped_never_wrapped(data: st.DataObject) -> None:
    ring = data.draw(rings)
    x = data.draw(reals(ring, data.draw(shapes), 1e300))
    u, n_overflow = ring.encode(x)
    outside = ~ring.fits(x)
    assert n_overflow == int(np.count_nonzero(outside))
    top = np.iinfo(ring.dtype).max // 2  # 2^(b-1) - 1, the largest positive element
    assert np.all(u[outside & (x > 0)] == top)
    assert np.all(u[outside & (x < 0)] == top + 1)  # -2^(b-1), the most negative element
    decoded = ring.decode(u)
    assert np.all(np.sign(decoded[outside]) == np.sign(x[outside]))


def _fits_exactly(ring: Ring, value: float) -> bool:
    """The definition of `Ring.fits` in exact arithmetic: round(x 2^f) (ties to even) in [-2^(b-1), 2^(b-1))."""
    if not math.isfinite(value):
        return False
    return -(2 ** (ring.bits - 1)) <= round(Fraction(value) * 2**ring.frac_bits) < 2 ** (ring.bits - 1)


@settings(max_examples=200)
@given(st.data())
def test_fits_agrees_with_its_definition_inside_near_and_past_the_range(data: st.DataObject) -> None:
    ring = data.draw(rings)
    # Arrays well inside the range (answered by one reduction), around its ends, and past them.
    bound = ring.max_abs * data.draw(st.sampled_from([1e-6, 0.5, 1.0, 1.0 + 2.0**-30, 2.0]))
    x = data.draw(hnp.arrays(np.float64, data.draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=6)),
                             elements=st.floats(-bound, bound, allow_nan=False)))
    expected = np.array([_fits_exactly(ring, value) for value in x.ravel()], dtype=bool).reshape(x.shape)
    assert np.array_equal(ring.fits(x), expected)


@pytest.mark.parametrize("ring", RINGS, ids=str)
def test_one_value_past_the_range_among_small_ones_is_the_one_that_does_not_fit(ring: Ring) -> None:
    beyond = max(math.nextafter(ring.max_abs, math.inf), ring.max_abs + ring.resolution)
    for odd in (beyond, -2 * ring.max_abs, math.nan, -math.inf):
        x = np.full((3, 4), 0.25)
        x[1, 2] = odd
        expected = np.ones((3, 4), dtype=bool)
        expected[1, 2] = False
        assert np.array_equal(ring.fits(x), expected)
    assert ring.fits(np.full((2, 2), ring.max_abs)).all()


@pytest.mark.parametrize("ring", RINGS, ids=str)
def test_the_range_edges(ring: Ring) -> None:
    # The first floats past each end; near 2^(b-1-f) a 64-bit ring's step is finer than a float's.
    low = -math.ldexp(1.0, ring.bits - 1 - ring.frac_bits)
    beyond = max(math.nextafter(ring.max_abs, math.inf), ring.max_abs + ring.resolution)
    below = min(math.nextafter(low, -math.inf), low - ring.resolution)
    assert ring.fits([ring.max_abs, -ring.max_abs, low]).all()
    assert not ring.fits([beyond, below, math.nan, math.inf]).any()
    u, n_overflow = ring.encode([beyond, -ring.max_abs, 0.0])
    assert n_overflow == 1
    assert u[0] == np.iinfo(ring.dtype).max // 2  # the largest positive element, 2^(b-1) - 1


def test_huge_values_overflow_without_warnings() -> None:
    ring = Ring()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        u, n_overflow = ring.encode(np.array([1e308, -1e308, 2.0]))
        top = np.uint64(np.iinfo(np.uint64).max)
        assert ring.add(top, top) == top - np.uint64(1)
        assert ring.sub(np.uint64(0), np.uint64(1)) == top
        assert ring.neg(np.uint64(1)) == top
    assert n_overflow == 2
    assert ring.decode(u)[2] == 2.0


def test_encoding_is_twos_complement() -> None:
    ring = Ring(32, 8)
    u, _ = ring.encode([-1.0, 1.0, -0.00390625])
    assert u.tolist() == [2**32 - 256, 256, 2**32 - 1]


def test_scalars_stay_zero_dimensional() -> None:
    ring = Ring()
    u, n_overflow = ring.encode(3.25)
    assert isinstance(u, np.ndarray) and u.shape == () and n_overflow == 0
    assert ring.decode(u) == 3.25


@pytest.mark.parametrize("ring", [Ring(64, 24), Ring(32, 16)], ids=str)
def test_masks_are_uniform_over_the_whole_ring(ring: Ring) -> None:
    rng = np.random.default_rng(20240611)
    masks = ring.uniform(rng, 65536)
    assert masks.dtype == ring.dtype
    # The top and the bottom byte must each be uniform over 256 values; a mask drawn from a
    # smaller range (e.g. forgetting the endpoint or using int64) fails the top-byte test.
    # Chi-square at p < 1e-4 is rejected; with 65536 draws a half-range generator gives p = 0.
    for byte in (masks >> np.asarray(ring.bits - 8, ring.dtype), masks & np.asarray(255, ring.dtype)):
        counts = np.bincount(byte.astype(np.int64), minlength=256)
        assert stats.chisquare(counts).pvalue > 1e-4


def test_every_share_but_none_alone_is_uniform() -> None:
    ring = Ring(32, 16)
    value = np.zeros(40000, ring.dtype)
    shares = ring.split(value, 3, np.random.default_rng(7))
    for share in shares:
        counts = np.bincount((share >> np.uint32(24)).astype(np.int64), minlength=256)
        assert stats.chisquare(counts).pvalue > 1e-4  # rejected at p < 1e-4, as above


@settings(max_examples=25)
@given(st.integers(0, 2**32 - 1))
def test_split_is_reproducible_from_the_seed(seed: int) -> None:
    ring = Ring()
    value = ring.encode(np.arange(5.0))[0]
    first = ring.split(value, 4, np.random.default_rng(seed))
    second = ring.split(value, 4, np.random.default_rng(seed))
    assert np.array_equal(first, second)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"bits": 16}, "Ring(bits)"),
        ({"bits": 64.0}, "Ring(bits)"),
        ({"bits": True}, "Ring(bits)"),
        ({"frac_bits": 0}, "Ring(frac_bits)"),
        ({"bits": 32, "frac_bits": 31}, "Ring(frac_bits)"),
        ({"frac_bits": 2.5}, "Ring(frac_bits)"),
    ],
)
def test_bad_ring_parameters_are_config_errors(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Ring(**kwargs)
    assert info.value.key_path == key


def test_bad_inputs_are_config_errors_naming_the_argument() -> None:
    ring = Ring()
    u = ring.encode([1.0, 2.0])[0]
    cases = [
        (lambda: ring.encode([1.0, math.nan]), "Ring.encode(x)"),
        (lambda: ring.encode([[math.inf]]), "Ring.encode(x)"),
        (lambda: ring.encode("abc"), "Ring.encode(x)"),
        (lambda: ring.decode(np.array([1.0])), "Ring.decode(u)"),
        (lambda: ring.add(u, u.astype(np.uint32)), "Ring.add(b)"),
        (lambda: ring.add(u, ring.encode([1.0, 2.0, 3.0])[0]), "Ring.add"),
        (lambda: ring.sum(u, axis=3), "Ring.sum(axis)"),
        (lambda: ring.split(u, 0, np.random.default_rng(0)), "Ring.split(k)"),
        (lambda: ring.uniform(np.random.RandomState(0), 3), "Ring.uniform(rng)"),
    ]
    for call, key in cases:
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.key_path == key
        assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigError, match=r"at index \(0, 1\)"):
        ring.encode([[1.0, math.nan]])


@settings(max_examples=200, deadline=None)
@given(ring=rings, data=st.data())
def test_the_array_fast_paths_agree_with_the_general_ones(ring: Ring, data: st.DataObject) -> None:
    # A float64 array inside the range takes encode's fast path; the same values as a list do not.
    bound = ring.max_abs
    values = data.draw(hnp.arrays(np.float64, (3, 4), elements=st.floats(-bound, bound)))
    fast, fast_overflow = ring.encode(values)
    general, general_overflow = ring.encode(values.tolist())
    assert np.array_equal(fast, general) and fast_overflow == general_overflow
    a, b = ring.uniform(np.random.default_rng(1), (2, 3, 4))
    assert np.array_equal(ring.add(a, b), ring.add(a, b[None])[0])
    assert np.array_equal(ring.sub(a, b), ring.sub(a, b[None])[0])


def test_fits_refuses_what_is_not_a_number_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        Ring().fits("abc")
    assert info.value.key_path == "Ring.fits(x)"
    assert info.value.problem.startswith("must be an array of real numbers (")


def test_fits_answers_for_huge_and_non_finite_values_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Ring(32, 16).fits([1e308, -1e308, math.inf, math.nan, 1.0]).tolist() == [False, False, False, False, True]


def test_masks_are_the_generators_raw_words() -> None:
    # A 64-bit mask ranges over the whole ring, 0 to 2^64 - 1 inclusive, with nothing rejected: numpy hands
    # out the generator's raw 64-bit words for exactly that range. A range one short of it (an exclusive
    # top, or a floor of 1) would need rejection sampling and give other numbers.
    masks = Ring(64, 24).uniform(np.random.default_rng(8), 64)
    assert np.array_equal(masks, np.random.default_rng(8).bit_generator.random_raw(64).astype(np.uint64))


def test_ring_parameter_errors_say_what_is_allowed() -> None:
    for kwargs, problem in [
        ({"bits": 1}, "must be 32 or 64, got 1"),
        ({"bits": 32, "frac_bits": 31}, "must be < bits - 1 = 31 to leave a sign and an integer bit, got 31"),
        ({"bits": 64, "frac_bits": 63}, "must be < bits - 1 = 63 to leave a sign and an integer bit, got 63"),
    ]:
        with pytest.raises(ConfigError) as info:
            Ring(**kwargs)
        assert info.value.problem == problem


def test_the_widest_fraction_leaves_one_integer_bit() -> None:
    for bits in (32, 64):
        ring = Ring(bits, bits - 2)  # a sign bit, one integer bit, the rest fraction
        assert ring.decode(ring.encode([1.5, -2.0])[0]).tolist() == [1.5, -2.0]


def test_element_errors_name_the_expected_dtype_and_the_shapes() -> None:
    ring = Ring()
    with pytest.raises(ConfigError) as info:
        ring.decode(np.array([1.0]))
    assert info.value.problem == "must hold ring elements of dtype uint64, got float64"
    two, three = ring.encode([1.0, 2.0])[0], ring.encode([1.0, 2.0, 3.0])[0]
    with pytest.raises(ConfigError) as info:
        ring.sub(two, three)
    assert (info.value.key_path, info.value.problem) == ("Ring.sub", "shapes (2,) and (3,) do not broadcast")


def test_operands_that_are_not_ring_arrays_are_refused_not_computed() -> None:
    ring = Ring()
    u = ring.encode([1.0, 2.0])[0]
    for call, key in [
        (lambda: ring.add([1, 2], u), "Ring.add(a)"),
        (lambda: ring.add(u, [1, 2]), "Ring.add(b)"),
        (lambda: ring.add(u.astype(np.int64), u), "Ring.add(a)"),
        (lambda: ring.sub(u.astype(np.int64), u), "Ring.sub(a)"),
    ]:
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.key_path == key


def test_zero_dimensional_and_broadcast_operations_wrap_silently() -> None:
    ring = Ring()
    top = np.array(np.iinfo(np.uint64).max, dtype=np.uint64)
    one = np.array(1, dtype=np.uint64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert int(ring.add(top, one)) == 0
        assert int(ring.sub(np.array(0, dtype=np.uint64), one)) == int(top)
        assert int(ring.neg(one)) == int(top)
        assert int(ring.sum(np.array([top, one]))) == 0
        assert ring.add(np.array([top, top]), one).tolist() == [0, 0]
        assert ring.sub(np.array([0, 0], dtype=np.uint64), one).tolist() == [int(top)] * 2


def test_the_most_negative_value_encodes_without_overflow() -> None:
    for ring in (Ring(32, 16), Ring(64, 24)):
        lowest = -math.ldexp(1.0, ring.bits - 1 - ring.frac_bits)
        u, overflow = ring.encode([lowest])
        assert overflow == 0 and ring.decode(u).tolist() == [lowest]
        assert ring.encode([lowest - 1.0])[1] == 1
