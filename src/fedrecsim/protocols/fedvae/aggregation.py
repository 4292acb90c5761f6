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
   same whatever layout the gradients arrived in -- dense or sparse, and whatever order they arrived
   in: `OrderedSum` builds it while they arrive, `average` from a list);
3. one Adam step (`fedrecsim.mechanisms.adam`) from ω_{t-1};
4. ω_t <- ω_t + gamma_t (ω_t - ω_{t-1}).

Steps 3 and 4 run in place (`descend`): the server's ω and Adam's moments are overwritten and the
average is used as scratch, with `adam_step`'s float32 operations in its order, so the numbers are the
pure formula's bit for bit and a round allocates no model-sized temporaries beyond one scratch vector
(and ω_{t-1}'s copy when gamma_t > 0). The average is of validated gradients, so it is finite, and
Adam's own finiteness check (a pass over P entries) is not repeated.

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

from ...mechanisms.adam import AdamHyper, AdamState
from ...mechanisms.krum import krum_select, pairwise_squared_distances
from ...network.party import Party

# Coordinates summed at a time: 65,536 float32 (256 KB), with the gradients' blocks, stay in a core's
# L2 cache. Gradients `OrderedSum` adds at a time: the partial sum is read and written once per group.
_BLOCK = 1 << 16
_GROUP = 16


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
        return unfiltered(n)
    f = math.floor(settings.f_share * n)
    if n - f - 2 < 1:
        return Selection(n, f, None)
    m = min(settings.m or n - f, n - f)
    started = perf_counter()
    kept = krum_select(pairwise_squared_distances(gradients), f, m)
    return Selection(n, f, kept, perf_counter() - started)


def _add_blocks(total: np.ndarray, gradients: Sequence[np.ndarray], start_empty: bool, block: int) -> None:
    """Add ``gradients`` into ``total`` one after the other, ``block`` coordinates at a time (every
    gradient's block, then the next block), so that the partial sum stays in cache while it is read and
    written; with ``start_empty`` the first gradient is copied in, not added (``0 + g`` would turn a
    ``-0.0`` into ``0.0``). Each coordinate is still summed in the order of ``gradients``."""
    for start in range(0, total.size, block):
        part = total[start : start + block]
        rest = gradients
        if start_empty:
            part[...] = gradients[0][start : start + block]
            rest = gradients[1:]
        for gradient in rest:
            part += gradient[start : start + block]


def average(gradients: np.ndarray | Sequence[np.ndarray], kept: np.ndarray, block: int = _BLOCK) -> np.ndarray:
    """The mean of ``gradients[kept]``, summed in the order of ``kept`` (module docstring, step 2)."""
    chosen = [gradients[int(position)] for position in kept]
    total = np.empty_like(chosen[0])
    _add_blocks(total, chosen, True, block)
    total /= total.dtype.type(kept.size)
    return total


class OrderedSum:
    """The sum of a round's accepted gradients in sorted party order, built while they arrive.

    ``order`` is the round's selected parties, sorted. Each is resolved once: `add` (its validated dense
    gradient) or `skip` (rejected); `mean` resolves the rest (missing at the deadline). A gradient is
    summed as soon as every party before it in ``order`` is resolved -- in a round whose replies arrive
    in party order (one delivery instant: the network delivers a bucket sorted by sender), at once -- and
    until then it waits. Summed gradients are dropped: the sum holds at most ``group`` of them ready plus
    the ones waiting for an earlier party, never the round's R. The ready ones are added ``group`` at a
    time block by block, as `average` adds, so the result is bit-for-bit `average` of the accepted
    gradients in party order: every coordinate is added up in that order, in the same float32 steps.
    """

    def __init__(self, order: Sequence[Party], group: int = _GROUP, block: int = _BLOCK) -> None:
        self._position = {party: position for position, party in enumerate(order)}
        self._resolved = [False] * len(order)
        self._waiting: dict[int, np.ndarray] = {}
        self._ready: list[np.ndarray] = []
        self._next = 0
        self._group = group
        self._block = block
        self._total: np.ndarray | None = None
        self.count = 0
        """Gradients added so far."""

    def add(self, party: Party, gradient: np.ndarray) -> None:
        """``party``'s validated dense gradient (read, never written; dropped once summed)."""
        position = self._position[party]
        self._waiting[position] = gradient
        self.count += 1
        self._resolve(position)

    def skip(self, party: Party) -> None:
        """``party`` contributes nothing (its gradient was rejected)."""
        self._resolve(self._position[party])

    def _resolve(self, position: int) -> None:
        self._resolved[position] = True
        resolved, waiting, ready = self._resolved, self._waiting, self._ready
        while self._next < len(resolved) and resolved[self._next]:
            gradient = waiting.pop(self._next, None)
            if gradient is not None:
                ready.append(gradient)
            self._next += 1
        if len(ready) >= self._group:
            self._flush()

    def _flush(self) -> None:
        ready = self._ready
        if not ready:
            return
        total, empty = self._total, self._total is None
        if total is None:
            total = self._total = np.empty_like(ready[0])
        _add_blocks(total, ready, empty, self._block)
        ready.clear()

    def mean(self) -> np.ndarray | None:
        """The mean of every gradient added (None if none was), the unresolved parties skipped; the sum
        is divided in place and handed over, so call it once, after the round's last `add`."""
        self._resolved = [True] * len(self._resolved)
        self._ready.extend(self._waiting[position] for position in sorted(self._waiting))
        self._waiting.clear()
        self._flush()
        total, self._total = self._total, None
        if total is not None:
            total /= total.dtype.type(self.count)
        return total


def unfiltered(n: int) -> Selection:
    """SecureFilter ``none`` on ``n`` gradients: every one is kept (the round applies nothing if n = 0)."""
    return Selection(n, 0, np.arange(n) if n else None)


def adam_in_place(omega: np.ndarray, gradient: np.ndarray, adam: AdamState, hyper: AdamHyper) -> AdamState:
    """One Adam step of ``omega`` along ``gradient``, in place: ``omega`` and ``adam``'s moments are
    overwritten, and ``gradient`` is used as scratch space (its values are lost). The float32 operations
    are `fedrecsim.mechanisms.adam.adam_step`'s, one by one in its order, so the result is bit-for-bit
    its result (tested); only the temporaries are gone. ``gradient`` is finite: the server validated
    every gradient it averaged."""
    dtype = omega.dtype.type
    t = adam.t + 1
    beta1, beta2 = dtype(hyper.beta1), dtype(hyper.beta2)
    m, v = adam.m, adam.v
    scratch = np.multiply(gradient, gradient)
    scratch *= 1 - beta2
    v *= beta2
    v += scratch
    np.multiply(gradient, 1 - beta1, out=scratch)
    m *= beta1
    m += scratch
    np.divide(m, dtype(1.0 - hyper.beta1**t), out=scratch)
    scratch *= dtype(hyper.eta)
    root = gradient
    np.divide(v, dtype(1.0 - hyper.beta2**t), out=root)
    np.sqrt(root, out=root)
    root += dtype(hyper.epsilon)
    scratch /= root
    omega -= scratch
    return AdamState(m, v, t)


@dataclass(frozen=True)
class Update:
    """The outcome of one GlobalUpdate: the new ω and Adam state, and what the filter kept."""

    omega: np.ndarray
    adam: AdamState
    selection: Selection

    @property
    def applied(self) -> bool:
        return self.selection.kept is not None


def descend(omega: np.ndarray, mean: np.ndarray | None, adam: AdamState, hyper: AdamHyper, selection: Selection,
            gamma_t: float) -> Update:
    """Steps 3 and 4 along ``mean``, the average of what ``selection`` kept, in place: ``omega`` (ω_{t-1})
    becomes ω_t, ``adam``'s moments are overwritten and ``mean`` is used up (`adam_in_place`). Nothing
    changes when the round cannot be filtered (``selection.kept`` is None)."""
    if selection.kept is None or mean is None:
        return Update(omega, adam, selection)
    previous = omega.copy() if gamma_t else None
    state = adam_in_place(omega, mean, adam, hyper)
    if previous is not None:
        np.subtract(omega, previous, out=previous)
        previous *= omega.dtype.type(gamma_t)
        omega += previous
    return Update(omega, state, selection)


def global_update(
    omega: np.ndarray,
    gradients: np.ndarray | Sequence[np.ndarray],
    adam: AdamState,
    hyper: AdamHyper,
    settings: FilterSettings,
    gamma_t: float,
) -> Update:
    """Algorithm 2 with eq. (4): filter, average, one Adam step, then the gamma_t extrapolation.

    ``omega`` (ω_{t-1}) and ``adam``'s moments are updated in place (`descend`); ``gradients`` are read only.
    """
    selection = secure_filter(gradients, settings)
    mean = None if selection.kept is None else average(gradients, selection.kept)
    return descend(omega, mean, adam, hyper, selection, gamma_t)


__all__ = [
    "FilterSettings", "OrderedSum", "Selection", "Update", "adam_in_place", "average", "descend", "global_update",
    "secure_filter", "unfiltered",
]
