"""Shamir t-of-n secret sharing over the prime field GF(p), p = 2^256 + 297.

A secret s (an integer below p: here a 32-byte seed or X25519 private key read big-endian) becomes the
constant term of a random polynomial f of degree t - 1 with coefficients uniform in GF(p); the share of
the party with x-coordinate x is (x, f(x)). Any t shares determine f, hence s = f(0), by Lagrange
interpolation; any t - 1 shares are jointly uniform and say nothing about s.

Invariants: x-coordinates are distinct integers in [1, p); every share value is an integer in [0, p) and
travels as `SHARE_BYTES` big-endian bytes. p is the smallest prime above 2^256, so every 32-byte secret
is a field element without reduction (Bonawitz et al. 2017 leave the field open; any prime above the
secret space serves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

#: The field's prime: the smallest prime above 2^256 (tests check its primality).
PRIME = (1 << 256) + 297

#: Bytes of one share value on the wire (p > 2^256 needs 257 bits).
SHARE_BYTES = 33

_COEFFICIENT_BYTES = 33
_COEFFICIENT_MASK = (1 << 257) - 1


class ShamirError(ValueError):
    """Shares that cannot reconstruct a secret: too few, a repeated x-coordinate, or out of the field."""


def _coefficient(rng: np.random.Generator) -> int:
    """A uniform element of GF(p), by rejection from 257 random bits (accepts with probability > 1/2)."""
    while True:
        value = int.from_bytes(rng.bytes(_COEFFICIENT_BYTES), "big") & _COEFFICIENT_MASK
        if value < PRIME:
            return value


def split(secret: int, threshold: int, xs: Sequence[int], rng: np.random.Generator) -> dict[int, int]:
    """Share ``secret`` t-of-``len(xs)``: the value f(x) of a random degree t - 1 polynomial for each x.

    Args:
        secret: an integer in [0, p).
        threshold: t, the number of shares that reconstruct; 1 <= t <= len(xs).
        xs: the distinct x-coordinates of the shareholders, each in [1, p).
        rng: the owner's generator (the polynomial's t - 1 random coefficients).

    Returns:
        ``{x: f(x)}`` for every x in ``xs``.

    Raises:
        ShamirError: a secret outside the field, a threshold outside [1, len(xs)], repeated or invalid xs.
    """
    if not 0 <= secret < PRIME:
        raise ShamirError("the secret must lie in [0, p)")
    _check_xs(xs)
    if not 1 <= threshold <= len(xs):
        raise ShamirError(f"threshold {threshold} must lie in [1, {len(xs)}] for {len(xs)} shareholders")
    coefficients = [secret] + [_coefficient(rng) for _ in range(threshold - 1)]
    shares = {}
    for x in xs:
        value = 0
        for coefficient in reversed(coefficients):  # Horner
            value = (value * x + coefficient) % PRIME
        shares[x] = value
    return shares


def interpolate_at_zero(shares: Mapping[int, int]) -> int:
    """f(0) of the polynomial of degree ``len(shares) - 1`` through the given points (Lagrange).

    With at least t shares of one secret this is the secret; with fewer it is a field element unrelated
    to it (`reconstruct` refuses that case).

    Raises:
        ShamirError: no shares, a repeated or invalid x-coordinate, or a value outside the field.
    """
    if not shares:
        raise ShamirError("no shares to interpolate")
    xs = list(shares)
    _check_xs(xs)
    if any(not 0 <= value < PRIME for value in shares.values()):
        raise ShamirError("a share value lies outside [0, p)")
    total = 0
    for x_j, y_j in shares.items():
        numerator, denominator = 1, 1
        for x_m in xs:
            if x_m != x_j:
                numerator = numerator * x_m % PRIME
                denominator = denominator * (x_m - x_j) % PRIME
        total = (total + y_j * numerator * pow(denominator, -1, PRIME)) % PRIME
    return total


def reconstruct(shares: Mapping[int, int], threshold: int) -> int:
    """The secret behind at least ``threshold`` shares of one t-of-n sharing.

    Uses exactly the first ``threshold`` shares in ascending x order (more add nothing for honest
    shareholders, and a fixed choice keeps the result independent of arrival order).

    Raises:
        ShamirError: fewer than ``threshold`` shares, or invalid shares (`interpolate_at_zero`).
    """
    if len(shares) < threshold:
        raise ShamirError(f"{len(shares)} shares cannot reconstruct a {threshold}-of-n secret")
    chosen = sorted(shares)[:threshold]
    return interpolate_at_zero({x: shares[x] for x in chosen})


def to_bytes(value: int) -> bytes:
    """A field element as `SHARE_BYTES` big-endian bytes."""
    return value.to_bytes(SHARE_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """The field element in `SHARE_BYTES` big-endian bytes.

    Raises:
        ShamirError: not `SHARE_BYTES` long, or a value outside the field.
    """
    if len(data) != SHARE_BYTES:
        raise ShamirError(f"a share is {SHARE_BYTES} bytes, got {len(data)}")
    value = int.from_bytes(data, "big")
    if value >= PRIME:
        raise ShamirError("a share value lies outside [0, p)")
    return value


def _check_xs(xs: Sequence[int]) -> None:
    if len(set(xs)) != len(xs):
        raise ShamirError("x-coordinates must be distinct")
    if any(not 1 <= x < PRIME for x in xs):
        raise ShamirError("x-coordinates must lie in [1, p)")


__all__ = ["PRIME", "SHARE_BYTES", "ShamirError", "from_bytes", "interpolate_at_zero", "reconstruct", "split", "to_bytes"]
