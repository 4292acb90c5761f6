"""GlobalUpdate (Polato, Algorithm 2) with FedVAE_dec's step (eq. (4)): the server's maths, actor-free.

Given the gradients a round accepted, in sorted party order:

1. SecureFilter: Krum / Multi-Krum (`fedrecsim.mechanisms.krum`) with ``f = floor(krum_f n)`` of the
   ``n`` gradients assumed byzantine, keeping ``m = krum_m`` of them (``0``, the default: ``n - f``,
   so that step 2 averages every gradient but the f of highest Krum score; ``1``: single Krum, one
   gradient; a larger ``m`` is capped at ``n - f``, the most Multi-Krum can keep); or every gradient
   (``none``). Its wall time -- the O(n^2 P) Gram matrix of the n gradients of P entries, and the
   scores -- is measured (`Selection.seconds`, by `perf_counter`): at ML-1M's size it is most of a
   round, and a run reports its sum apart from the deterministic results;
2. the average of the kept gradients, summed one after the other in party order (so the sum is the
   same whatever layout the gradients arrived in -- dense or sparse);
3. one Adam step (`fedrecsim.mechanisms.adam`) from ω_{t-1};
4. ω_t <- ω_t + gamma_t (ω_t - ω_{t-1}).

A round applies no update (ω and Adam's state, its step count included, are unchanged) and says so
when it accepted no gradient or, with Krum, fewer than Krum needs to score one (``n - f - 2 < 1``,
i.e. n < 3): averaging them unfiltered would hand a single attacker the model, which is what the
filter is there to prevent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Literal

import numpy as np

from ...mechanisms.adam import AdamHyper, AdamState, adam_step
from ...mechanisms.krum import krum_select, pairwise_squared_distances

# Coordinates summed at a time by `average`: 16,384 float32 (64 KB) stay in a core's cache.
_BLOCK = 1 << 14


@dataclass(frozen=True)
class FilterSettings:
    """SecureFilter's configuration: ``kind`` krum or none, ``f_share`` (krum_f) and ``m`` (krum_m)."""

    kind: Literal["krum", "none"]
    f_share: float = 0.0
    m: int = 1


@dataclass(frozen=True)
class Selection:
    """What SecureFilter kept of ``n`` gradients: ``kept`` (ascending positions), ``f`` assumed byzantine;
    ``kept`` is None when the round cannot be filtered. ``seconds``: the wall time Krum took (distances
    and scores; 0 without Krum) -- a measurement, not a function of the gradients."""

    n: int
    f: int
    kept: np.ndarray | None
    seconds: float = 0.0


def secure_filter(gradients: np.ndarray | Sequence[np.ndarray], settings: FilterSettings) -> Selection:
    """SecureFilter: the positions of the gradients (rows of an array, or a sequence) to average
    (module docstring, step 1)."""
    n = len(gradients)
    if settings.kind == "none":
        return Selection(n, 0, np.arange(n) if n else None)
    f = math.floor(settings.f_share * n)
    if n - f - 2 < 1:
        return Selection(n, f, None)
    m = min(settings.m or n - f, n - f)
    started = perf_counter()
    kept = krum_select(pairwise_squared_distances(gradients), f, m)
    return Selection(n, f, kept, perf_counter() - started)


def average(gradients: np.ndarray | Sequence[np.ndarray], kept: np.ndarray, block: int = _BLOCK) -> np.ndarray:
    """The mean of ``gradients[kept]``, summed in the order of ``kept`` (module docstring, step 2).

    The sum runs over ``block`` coordinates at a time (every gradient's block, then the next block), so
    the partial sum stays in cache; each coordinate is still added up in the order of ``kept``.
    """
    chosen = [gradients[int(position)] for position in kept]
    total = np.empty_like(chosen[0])
    for start in range(0, total.size, block):
        part = total[start : start + block]
        part[...] = chosen[0][start : start + block]
        for gradient in chosen[1:]:
            part += gradient[start : start + block]
    total /= total.dtype.type(kept.size)
    return total


@dataclass(frozen=True)
class Update:
    """The outcome of one GlobalUpdate: the new ω and Adam state, and what the filter kept."""

    omega: np.ndarray
    adam: AdamState
    selection: Selection

    @property
    def applied(self) -> bool:
        return self.selection.kept is not None


def global_update(
    omega: np.ndarray,
    gradients: np.ndarray | Sequence[np.ndarray],
    adam: AdamState,
    hyper: AdamHyper,
    settings: FilterSettings,
    gamma_t: float,
) -> Update:
    """Algorithm 2 with eq. (4): filter, average, one Adam step, then the gamma_t extrapolation.

    ``omega`` is ω_{t-1} and is not modified.
    """
    selection = secure_filter(gradients, settings)
    if selection.kept is None:
        return Update(omega, adam, selection)
    stepped, state = adam_step(omega, average(gradients, selection.kept), adam, hyper)
    if gamma_t:
        stepped = stepped + omega.dtype.type(gamma_t) * (stepped - omega)
    return Update(stepped, state, selection)


__all__ = ["FilterSettings", "Selection", "Update", "average", "global_update", "secure_filter"]
