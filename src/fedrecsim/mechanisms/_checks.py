"""Argument checks shared by the mechanisms.

Every mechanism validates its parameters before it touches numpy, so a bad epsilon or a NaN gradient
surfaces as a `ConfigError` naming the function and the argument (``laplace_noise(epsilon): ...``)
instead of a numpy traceback or, worse, a silently wrong distribution.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from fedrecsim.errors import ConfigError


def real(value: object, where: str) -> float:
    """``value`` as a finite float; bools are refused because ``True`` is never a meant epsilon."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(where, f"must be a real number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ConfigError(where, f"must be finite, got {result!r}")
    return result


def positive(value: object, where: str) -> float:
    """``value`` as a finite float > 0."""
    result = real(value, where)
    if result <= 0.0:
        raise ConfigError(where, f"must be > 0, got {result!r}")
    return result


def non_negative(value: object, where: str) -> float:
    """``value`` as a finite float >= 0."""
    result = real(value, where)
    if result < 0.0:
        raise ConfigError(where, f"must be >= 0, got {result!r}")
    return result


def open_unit(value: object, where: str) -> float:
    """``value`` as a float strictly between 0 and 1 (a DP delta)."""
    result = real(value, where)
    if not 0.0 < result < 1.0:
        raise ConfigError(where, f"must lie in the open interval (0, 1), got {result!r}")
    return result


def integer(value: object, where: str, minimum: int) -> int:
    """``value`` as a Python int >= ``minimum``; floats such as ``2.0`` are refused, not truncated."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(where, f"must be an integer, got {value!r}")
    result = int(value)
    if result < minimum:
        raise ConfigError(where, f"must be >= {minimum}, got {result}")
    return result


def generator(rng: object, where: str) -> np.random.Generator:
    """``rng`` if it is a numpy Generator: all randomness comes from generators owned by the caller."""
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(where, f"must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def float_array(value: object, where: str) -> np.ndarray:
    """``value`` as a float64 array whose every element is finite.

    The error names the first offending index, so a diverged model is traced to the entry that blew up.
    """
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, f"must be an array of real numbers ({exc})") from exc
    finite = np.isfinite(array)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ConfigError(where, f"must be finite, found {float(array[index])!r} at index {index}")
    return array
