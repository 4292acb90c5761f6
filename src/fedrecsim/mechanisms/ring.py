"""Fixed-point arithmetic in the ring Z_{2^b}.

Hua et al. mask every uploaded gradient and every noise piece "mod P" (DP-MF, Sec. 4.2 steps (1)-(4)
and "Further Practical Consideration" steps (1)-(4)): the recommender's mask psi, the pre-shared noise
tau and the third party's alpha only cancel exactly if the arithmetic is exact. Floats are not, so
real values are encoded as fixed-point integers and all masking happens in Z_{2^b} with P = 2^b,
where unsigned numpy integers wrap around for free.

Encoding is two's complement: a real x becomes round(x * 2^f) mod 2^b, and a ring element u decodes
to its signed representative in [-2^(b-1), 2^(b-1)) times 2^-f. Sums of encoded values therefore
decode to the sum of the (rounded) reals as long as the sum of the encoded integers stays in the
signed range; beyond it the sum wraps, which is why `encode` counts overflow instead of hiding it
and `fits` lets callers check headroom before they add.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks

_UNSIGNED = {32: np.uint32, 64: np.uint64}
_SIGNED = {32: np.int32, 64: np.int64}


@dataclasses.dataclass(frozen=True)
class Ring:
    """The ring Z_{2^bits} with ``frac_bits`` fractional bits of fixed-point precision.

    Invariants: ``bits`` is 32 or 64 and ``0 < frac_bits < bits - 1`` (at least one integer bit besides
    the sign). Ring elements are numpy arrays of `dtype`; every operation keeps them there and reduces
    mod 2^bits by unsigned wrap-around, never through Python integers.

    Attributes:
        bits: Width b of the ring; the modulus is 2^b.
        frac_bits: Fractional bits f; reals are represented to a resolution of 2^-f.
    """

    bits: int = 64
    frac_bits: int = 24

    def __post_init__(self) -> None:
        if _checks.integer(self.bits, "Ring(bits)", 1) not in _UNSIGNED:
            raise ConfigError("Ring(bits)", f"must be 32 or 64, got {self.bits!r}")
        _checks.integer(self.frac_bits, "Ring(frac_bits)", 1)
        if self.frac_bits >= self.bits - 1:
            raise ConfigError(
                "Ring(frac_bits)",
                f"must be < bits - 1 = {self.bits - 1} to leave a sign and an integer bit, "
                f"got {self.frac_bits}",
            )

    @property
    def dtype(self) -> type[np.unsignedinteger]:
        """The unsigned numpy type of ring elements: ``np.uint32`` or ``np.uint64``."""
        return _UNSIGNED[self.bits]

    @property
    def modulus(self) -> int:
        """2^bits, the P of Hua et al.'s "mod P"."""
        return 1 << self.bits

    @property
    def resolution(self) -> float:
        """2^-frac_bits, the spacing of representable reals; encoding errs by at most half of it."""
        return math.ldexp(1.0, -self.frac_bits)

    @property
    def max_abs(self) -> float:
        """A magnitude M such that every x with ``|x| <= M`` encodes without overflow.

        M is the largest positive representable value, (2^(b-1) - 1) * 2^-f, rounded down to a float
        where 2^(b-1) - 1 has none (b = 64). The negative end of the range reaches one step further.
        """
        largest = (1 << (self.bits - 1)) - 1
        as_float = float(largest)
        if int(as_float) > largest:
            as_float = math.nextafter(as_float, 0.0)
        return math.ldexp(as_float, -self.frac_bits)

    def fits(self, x: object) -> np.ndarray:
        """Whether each element of ``x`` encodes without overflow (NaN and Inf never fit).

        Args:
            x: Reals, any shape.

        Returns:
            A bool array of the shape of ``x``: True where round(x * 2^f) lies in [-2^(b-1), 2^(b-1)).
        """
        values = self._reals(x, "fits", finite=False)
        if values.ndim and values.size and self._inside(values):
            return np.ones(values.shape, dtype=bool)  # the common case: everything well inside the range
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = np.rint(np.ldexp(values, self.frac_bits))
        half = math.ldexp(1.0, self.bits - 1)
        return (scaled >= -half) & (scaled < half)

    def encode(self, x: object) -> tuple[np.ndarray, int]:
        """Encode reals as ring elements: round(x * 2^f) in two's complement mod 2^b.

        Rounding is to the nearest multiple of 2^-f (ties to even), so ``decode(encode(x))`` differs
        from x by at most 2^-(f+1) whenever x fits. A value that does not fit the signed range is
        clamped to the nearest end of the range (it keeps its sign) and counted; it is never wrapped,
        because a wrapped value would decode as a huge number of the opposite sign.

        Args:
            x: Finite reals, any shape.

        Returns:
            ``(u, n_overflow)``: the ring elements (an array of `dtype`, shape of ``x``) and how many
            elements were clamped.

        Raises:
            ConfigError: ``x`` is not numeric or holds NaN or Inf (named with its first index).
        """
        if type(x) is np.ndarray and x.dtype == np.float64 and x.size:
            # The common case, a float64 array well inside the range: one reduction proves every element
            # finite and in range (a NaN fails the comparison), so no clamping and no checks are needed.
            # Scaling by 2^f is exact, as np.ldexp is.
            if self._inside(x):
                return np.rint(x * self._scale).astype(_SIGNED[self.bits]).view(self.dtype), 0
        values = self._reals(x, "encode", finite=True)
        # Writing into ``out`` keeps 0-d inputs as arrays (ufuncs would hand back numpy scalars).
        scaled = np.empty_like(values)
        with np.errstate(over="ignore"):
            np.ldexp(values, self.frac_bits, out=scaled)
        np.rint(scaled, out=scaled)
        half = math.ldexp(1.0, self.bits - 1)
        too_high = scaled >= half
        too_low = scaled < -half
        n_overflow = int(np.count_nonzero(too_high)) + int(np.count_nonzero(too_low))
        if n_overflow:
            # The largest float below 2^(b-1) is a safe clip target for the int64 cast; the exact top
            # of the range, 2^(b-1) - 1, is written afterwards because b = 64 has no float for it.
            np.clip(scaled, -half, math.nextafter(half, 0.0), out=scaled)
        integers = scaled.astype(np.int64)
        if n_overflow:
            integers[too_high] = (1 << (self.bits - 1)) - 1
        # Every value is now inside the signed range, so the narrowing cast is exact; the view then
        # reinterprets the signed bits as their two's-complement ring element without a copy.
        return integers.astype(_SIGNED[self.bits], copy=False).view(self.dtype), n_overflow

    def decode(self, u: object) -> np.ndarray:
        """Decode ring elements to float64: the two's-complement representative times 2^-f.

        For b = 64 the signed integer is rounded to float64 (53-bit mantissa) before scaling, so
        decoded magnitudes above 2^(53-f) carry float rounding; b = 32 decodes exactly.

        Raises:
            ConfigError: ``u`` is not an array of `dtype`.
        """
        elements = self._elements(u, "decode(u)")
        values = elements.view(_SIGNED[self.bits]).astype(np.float64)
        values *= self.resolution  # a power of two: exact, and in place on the fresh array
        return values

    def add(self, a: object, b: object) -> np.ndarray:
        """``(a + b) mod 2^b``, elementwise with numpy broadcasting."""
        if self._same_shape_elements(a, b):
            return np.add(a, b)  # arrays wrap silently; only numpy scalars warn on overflow
        left, right = self._pair(a, b, "add")
        with np.errstate(over="ignore"):
            return np.add(left, right, dtype=self.dtype)

    def sub(self, a: object, b: object) -> np.ndarray:
        """``(a - b) mod 2^b``, elementwise with numpy broadcasting."""
        if self._same_shape_elements(a, b):
            return np.subtract(a, b)
        left, right = self._pair(a, b, "sub")
        with np.errstate(over="ignore"):
            return np.subtract(left, right, dtype=self.dtype)

    def neg(self, a: object) -> np.ndarray:
        """``(-a) mod 2^b``: the element that adds to ``a`` to give 0."""
        elements = self._elements(a, "neg(a)")
        with np.errstate(over="ignore"):
            return np.negative(elements, dtype=self.dtype)

    def sum(self, u: object, axis: int | tuple[int, ...] | None = None) -> np.ndarray:
        """The sum mod 2^b along ``axis`` (all axes when None), accumulated in `dtype` so it wraps.

        Raises:
            ConfigError: ``u`` is not an array of `dtype`, or ``axis`` does not exist.
        """
        elements = self._elements(u, "sum(u)")
        try:
            with np.errstate(over="ignore"):
                return np.asarray(np.sum(elements, axis=axis, dtype=self.dtype))
        except (np.exceptions.AxisError, TypeError) as exc:
            raise ConfigError("Ring.sum(axis)", f"invalid for shape {elements.shape}: {exc}") from exc

    def uniform(self, rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
        """Masks drawn uniformly from the whole ring, i.e. from [0, 2^b - 1] inclusive.

        A uniform mask makes ``x + mask`` uniform and independent of x, which is what hides a
        gradient from the third party in Hua et al. Sec. 4.2 (psi) and the noise in the
        pre-sharing phase (beta, alpha).

        Args:
            rng: The caller's generator.
            shape: Shape of the result.
        """
        _checks.generator(rng, "Ring.uniform(rng)")
        top = np.iinfo(self.dtype).max
        return rng.integers(0, top, size=shape, dtype=self.dtype, endpoint=True)

    def split(self, value: object, k: int, rng: np.random.Generator) -> np.ndarray:
        """Split ``value`` into k additive shares: uniform subject to summing to ``value`` mod 2^b.

        The first k - 1 shares are independent uniform masks and the last is ``value`` minus their sum,
        so any k - 1 shares are jointly uniform and reveal nothing about ``value``. This is how the
        recommender divides tau_hat_j among the k' online raters (Hua et al., "Further Practical
        Consideration", first exception).

        Args:
            value: Ring elements, any shape S.
            k: Number of shares, >= 1.
            rng: The caller's generator.

        Returns:
            An array of `dtype` and shape (k, *S) with ``sum(shares, axis=0) == value``.
        """
        elements = self._elements(value, "split(value)")
        count = _checks.integer(k, "Ring.split(k)", 1)
        shares = np.empty((count, *elements.shape), dtype=self.dtype)
        shares[:-1] = self.uniform(rng, (count - 1, *elements.shape))
        shares[-1] = self.sub(elements, self.sum(shares[:-1], axis=0))
        return shares

    def _reals(self, x: object, method: str, *, finite: bool) -> np.ndarray:
        where = f"Ring.{method}(x)"
        if finite:
            return _checks.float_array(x, where)
        try:
            return np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ConfigError(where, f"must be an array of real numbers ({exc})") from exc

    def _elements(self, u: object, where: str) -> np.ndarray:
        elements = np.asarray(u)
        if elements.dtype != self.dtype:
            raise ConfigError(
                f"Ring.{where}",
                f"must hold ring elements of dtype {np.dtype(self.dtype).name}, got {elements.dtype}",
            )
        return elements

    def _same_shape_elements(self, a: object, b: object) -> bool:
        """Whether ``a`` and ``b`` are non-scalar ring arrays of one shape (the fast path of add and sub)."""
        return (
            type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == self.dtype and b.dtype == self.dtype
            and a.shape == b.shape and a.ndim > 0
        )

    # The fields are frozen, so what derives from them is computed once per ring.
    @functools.cached_property
    def _scale(self) -> float:
        return math.ldexp(1.0, self.frac_bits)

    @functools.cached_property
    def _safe_abs(self) -> float:
        """A bound below which ``x * 2^f`` rounds into the signed range for sure (half a step below max_abs)."""
        return math.ldexp(1.0, self.bits - 1 - self.frac_bits) * (1.0 - 2.0**-20)

    def _inside(self, values: np.ndarray) -> bool:
        """Whether every element of the non-empty float64 array ``values`` is at most `_safe_abs` in magnitude:
        then each is finite (a NaN fails the comparison) and ``round(x * 2^f)`` fits the signed range."""
        return float(np.abs(values).max()) <= self._safe_abs

    def _pair(self, a: object, b: object, method: str) -> tuple[np.ndarray, np.ndarray]:
        left = self._elements(a, f"{method}(a)")
        right = self._elements(b, f"{method}(b)")
        try:
            np.broadcast_shapes(left.shape, right.shape)
        except ValueError as exc:
            raise ConfigError(
                f"Ring.{method}", f"shapes {left.shape} and {right.shape} do not broadcast"
            ) from exc
        return left, right
