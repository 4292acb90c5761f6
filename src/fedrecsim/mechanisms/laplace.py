"""Noise for Hua et al.'s objective-perturbation DP-MF (IJCAI 2015, Sec. 4).

Hua et al. perturb the MF objective with one noise vector eta_j in R^d per item j (eq. (6)). Three
ways to draw it appear in the paper, one function each here:

* `theorem1_noise` -- the trusted-recommender noise of Theorem 1, density ∝ exp(-ε‖η‖/(2Δ)).
* `laplace_noise` -- iid Laplace(0, 2Δ√d/ε) per element, which also gives ε-DP (Lemma 1).
* `exponential_h` + `laplace_piece` -- the distributed version (Theorem 2, eq. (12)): the recommender
  publishes H ~ Exp(1) per element and each of the k raters of item j adds a piece
  scale·sqrt(2H)·C with C ~ N(0, 1/k); the k pieces sum to scale·sqrt(2H)·N(0, 1), which is
  Laplace(0, scale) by Theorem 2. With scale = `laplace_scale` the sum is Lemma 1's noise.

Note that the pieces of eq. (12) sum to Lemma 1's per-element Laplace noise, not to Theorem 1's
norm-based density, although the paper says the sum "satisfies (10)"; Lemma 1 is what makes the
distributed noise ε-DP.

Throughout, ``delta`` is Hua et al.'s sensitivity Δ = max_r − min_r (the rating range), not the δ
of (ε, δ)-DP.
"""

from __future__ import annotations

import math

import numpy as np

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks


def laplace_scale(d: int, epsilon: float, delta: float) -> float:
    """The Laplace scale of Lemma 1: b = 2Δ√d / ε.

    Args:
        d: Latent dimension, >= 1.
        epsilon: Privacy budget ε > 0.
        delta: Sensitivity Δ = max_r − min_r > 0 (the rating range, not a DP delta).

    Raises:
        ConfigError: A parameter is out of range.
    """
    dim = _checks.integer(d, "laplace_scale(d)", 1)
    eps = _checks.positive(epsilon, "laplace_scale(epsilon)")
    sensitivity = _checks.positive(delta, "laplace_scale(delta)")
    return 2.0 * sensitivity * math.sqrt(dim) / eps


def theorem1_noise(
    rng: np.random.Generator, n: int, d: int, epsilon: float, delta: float
) -> np.ndarray:
    """n noise vectors with density p(η) ∝ exp(−ε‖η‖ / (2Δ)) on R^d (Hua et al., Theorem 1).

    The density depends on η only through its Euclidean norm, so η = r·u with u uniform on the unit
    sphere and r with density ∝ r^(d−1)·exp(−εr/(2Δ)), i.e. r ~ Gamma(shape=d, scale=2Δ/ε).
    Draw order (part of reproducibility): an (n, d) block of standard normals for the directions,
    then n gamma radii.

    Args:
        rng: The caller's generator.
        n: Number of vectors (one per item), >= 0.
        d: Dimension, >= 1.
        epsilon: Privacy budget ε > 0.
        delta: Sensitivity Δ = max_r − min_r > 0.

    Returns:
        float64[n, d], row i is η_i; ``‖η_i‖`` is exactly the gamma radius.

    Raises:
        ConfigError: A parameter is out of range.
    """
    _checks.generator(rng, "theorem1_noise(rng)")
    count = _checks.integer(n, "theorem1_noise(n)", 0)
    dim = _checks.integer(d, "theorem1_noise(d)", 1)
    eps = _checks.positive(epsilon, "theorem1_noise(epsilon)")
    sensitivity = _checks.positive(delta, "theorem1_noise(delta)")
    directions = rng.standard_normal((count, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radii = rng.gamma(shape=dim, scale=2.0 * sensitivity / eps, size=count)
    directions *= radii[:, np.newaxis]
    return directions


def laplace_noise(
    rng: np.random.Generator, n: int, d: int, epsilon: float, delta: float
) -> np.ndarray:
    """n noise vectors with iid Laplace(0, 2Δ√d/ε) elements (Hua et al., Lemma 1).

    Args:
        rng: The caller's generator.
        n: Number of vectors, >= 0.
        d: Dimension, >= 1.
        epsilon: Privacy budget ε > 0.
        delta: Sensitivity Δ = max_r − min_r > 0.

    Returns:
        float64[n, d].

    Raises:
        ConfigError: A parameter is out of range.
    """
    _checks.generator(rng, "laplace_noise(rng)")
    count = _checks.integer(n, "laplace_noise(n)", 0)
    dim = _checks.integer(d, "laplace_noise(d)", 1)
    scale = laplace_scale(dim, epsilon, delta)
    return rng.laplace(0.0, scale, size=(count, dim))


def exponential_h(rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
    """The recommender's shared H ~ Exponential(1), one per noise element (Hua et al., Theorem 2).

    Every piece of the same noise element must use the same H; only then do the pieces sum to a
    Laplace variable.

    Args:
        rng: The caller's (the recommender's) generator.
        shape: Shape of H, typically (d,) per item or (m, d) for all items.

    Returns:
        float64 array of the given shape, iid Exp(1).
    """
    _checks.generator(rng, "exponential_h(rng)")
    return rng.standard_exponential(shape)


def laplace_piece(
    rng: np.random.Generator,
    h: object,
    k: int,
    scale: float,
    n_pieces: int | None = None,
) -> np.ndarray:
    """One rater's noise piece, scale·sqrt(2h)·C with C ~ N(0, 1/k) (Hua et al., eq. (12)).

    Invariant: the sum of k independent pieces drawn with the same h is scale·sqrt(2h)·N(0, 1),
    which is Laplace(0, scale) when h ~ Exp(1) (Theorem 2). A single piece alone is not Laplace;
    pieces drawn with different h do not sum to Laplace either.

    Args:
        rng: The caller's (the rater's) generator; C is private to the rater.
        h: Shared H values, any shape S, finite and >= 0.
        k: Number of raters that will sum their pieces, >= 1.
        scale: Target Laplace scale b > 0, for Lemma 1 `laplace_scale` (d, epsilon, delta).
        n_pieces: If given, draw that many independent pieces at once (all sharing ``h``).

    Returns:
        float64 of shape S, or (n_pieces, *S) when ``n_pieces`` is given.

    Raises:
        ConfigError: ``h`` is negative or not finite, or a parameter is out of range.
    """
    _checks.generator(rng, "laplace_piece(rng)")
    shared = _checks.float_array(h, "laplace_piece(h)")
    if (shared < 0.0).any():
        index = tuple(int(i) for i in np.argwhere(shared < 0.0)[0])
        raise ConfigError(
            "laplace_piece(h)",
            f"must be >= 0 (an Exp(1) draw), got {float(shared[index])!r} at index {index}",
        )
    raters = _checks.integer(k, "laplace_piece(k)", 1)
    b = _checks.positive(scale, "laplace_piece(scale)")
    shape = shared.shape if n_pieces is None else (
        _checks.integer(n_pieces, "laplace_piece(n_pieces)", 0),
        *shared.shape,
    )
    c = rng.standard_normal(shape)
    # N(0, 1/k) has standard deviation 1/sqrt(k); folding it into the scalar saves one array pass.
    return (b / math.sqrt(raters)) * np.sqrt(2.0 * shared) * c
