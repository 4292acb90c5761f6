"""The exponential mechanism and its one-shot Gumbel form (McSherry & Talwar 2007; Durfee & Rogers 2019).

The exponential mechanism with budget ``epsilon`` on a score ``q`` of sensitivity ``sensitivity``
outputs candidate ``i`` with probability proportional to ``exp(epsilon * q_i / (2 * sensitivity))``;
it is ``epsilon``-DP. Its Gumbel form adds i.i.d. ``Gumbel(0, b)`` noise, ``b = 2 * sensitivity /
epsilon``, to every score and takes the argmax: the same distribution (the Gumbel-max trick). Taking
the **top s** of one Gumbel-noised vector is distributed exactly as ``s`` successive exponential
mechanisms without replacement ("peeling"), each with the same ``b`` (Durfee & Rogers 2019, Lemma
4.2), so it spends ``s * epsilon`` under basic composition. `gumbel_top_s` and `peeling_selection`
are those two samplers; a chi-square test checks they agree.

Every function takes the caller's generator; nothing here owns randomness.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fedrecsim.errors import ConfigError


def gumbel_scale(epsilon: float, sensitivity: float) -> float:
    """The Gumbel scale ``b = 2 * sensitivity / epsilon`` of an ``epsilon``-DP exponential mechanism."""
    _positive("gumbel_scale", "epsilon", epsilon)
    _positive("gumbel_scale", "sensitivity", sensitivity)
    return 2.0 * sensitivity / epsilon


def exponential_probabilities(scores: npt.ArrayLike, scale: float) -> np.ndarray:
    """``P(i) = exp(scores_i / scale) / sum_j exp(scores_j / scale)``, computed stably (max subtracted)."""
    _positive("exponential_probabilities", "scale", scale)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ConfigError("exponential_probabilities.scores", "must be a non-empty 1-D array")
    logits = scores / scale
    logits -= logits.max()
    weights = np.exp(logits)
    return weights / weights.sum()


def exponential_mechanism(
    rng: np.random.Generator, scores: npt.ArrayLike, epsilon: float, sensitivity: float
) -> int:
    """One ``epsilon``-DP draw: index ``i`` with probability proportional to ``exp(epsilon q_i / (2 sensitivity))``.

    Args:
        rng: The caller's generator.
        scores: ``q``, higher is better (negate a loss).
        epsilon: The budget this draw spends.
        sensitivity: The largest change of any ``q_i`` between neighbouring data sets.
    """
    probabilities = exponential_probabilities(scores, gumbel_scale(epsilon, sensitivity))
    return int(rng.choice(probabilities.size, p=probabilities))


def gumbel_top_s(rng: np.random.Generator, utilities: npt.ArrayLike, s: int, scale: float) -> np.ndarray:
    """The indices of the ``s`` largest ``utilities + Gumbel(0, scale)``, best first.

    With ``scale = 2 * sensitivity / epsilon`` this is ``s`` peeled ``epsilon``-DP exponential
    mechanisms (module docstring).
    """
    utilities = np.asarray(utilities, dtype=np.float64)
    _check_s("gumbel_top_s", s, utilities.size)
    _positive("gumbel_top_s", "scale", scale)
    noisy = utilities + rng.gumbel(0.0, scale, size=utilities.size)
    top = np.argpartition(-noisy, s - 1)[:s] if s < utilities.size else np.arange(utilities.size)
    return top[np.argsort(-noisy[top], kind="stable")]


def peeling_selection(rng: np.random.Generator, utilities: npt.ArrayLike, s: int, scale: float) -> np.ndarray:
    """``s`` successive exponential mechanisms without replacement, each ``P(i) ~ exp(u_i / scale)``, in draw order."""
    utilities = np.asarray(utilities, dtype=np.float64)
    _check_s("peeling_selection", s, utilities.size)
    remaining = np.arange(utilities.size)
    chosen = np.empty(s, dtype=np.int64)
    for step in range(s):
        probabilities = exponential_probabilities(utilities[remaining], scale)
        pick = int(rng.choice(remaining.size, p=probabilities))
        chosen[step] = remaining[pick]
        remaining = np.delete(remaining, pick)
    return chosen


def _positive(function: str, name: str, value: float) -> None:
    if not (isinstance(value, (int, float, np.integer, np.floating)) and np.isfinite(value) and value > 0):
        raise ConfigError(f"{function}.{name}", f"must be a finite number > 0, got {value!r}")


def _check_s(function: str, s: int, size: int) -> None:
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= size:
        raise ConfigError(f"{function}.s", f"must be an integer in [1, {size}], got {s!r}")


__all__ = [
    "exponential_mechanism",
    "exponential_probabilities",
    "gumbel_scale",
    "gumbel_top_s",
    "peeling_selection",
]
