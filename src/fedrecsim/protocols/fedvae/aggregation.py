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

Steps 3 and 4 run in place (`descend`), a block at a time: the server's ω and Adam's moments are
overwritten and the average is used as scratch, with `adam_step`'s float32 operations in its order, so
the numbers are the pure formula's bit for bit and a round allocates no model-sized temporary (two
block-sized scratch vectors; ω_{t-1} is kept a block at a time when gamma_t > 0). The average is of
validated gradients, so it is finite, and Adam's own finiteness check (a pass over P entries) is not
repeated.

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
from .validation import BLOCK, LIMIT, square, within_bound

# Gradients `OrderedSum` adds at a time: the partial sum is read and written once per group. Coordinates
# summed at a time: `validation.BLOCK` (with the gradients' blocks, it stays in a core's L2 cache).
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


class _Entry:
    """A gradient on its way into a sum: its ``party``, its ``values`` (read, never written), and the
    number of its leading ``blocks`` already checked, whose squares add up to ``squared``
    (`validation.within_bound`); all of them for a gradient validated before it came."""

    __slots__ = ("blocks", "party", "squared", "values")

    def __init__(self, party: Party | None, values: np.ndarray, blocks: int) -> None:
        self.party = party
        self.values = values
        self.blocks = blocks
        self.squared = 0.0


def _blocks(values: np.ndarray, block: int) -> int:
    return -(-values.size // block)


def _add_checked(source: np.ndarray | None, target: np.ndarray, entries: Sequence[_Entry], block: int) -> int | None:
    """``target`` <- ``source`` plus the gradients of ``entries``, added one after the other in their
    order, ``block`` coordinates at a time (every entry's block, then the next block), so that the partial
    sum stays in cache while it is read and written. Without a ``source`` the first gradient is copied,
    not added (``0 + g`` would turn a ``-0.0`` into ``0.0``). Each coordinate is summed in the order of
    ``entries``, in the same float32 additions whatever ``block``.

    Each block of an entry that is not yet checked is checked as it is read, before it is added: its
    square is added to the entry's (`validation.within_bound`, block by block). The position of the first
    entry refused is returned at once, ``target`` then half written and ``source`` untouched; None when
    every entry passed."""
    with np.errstate(over="ignore", invalid="ignore"):
        for index, start in enumerate(range(0, target.size, block)):
            stop = start + block
            part = target[start:stop]
            for position, entry in enumerate(entries):
                piece = entry.values[start:stop]
                if entry.blocks == index:
                    entry.squared += square(piece)
                    entry.blocks = index + 1
                    if not entry.squared <= LIMIT:
                        return position
                if position:
                    part += piece
                elif source is None:
                    part[...] = piece
                else:
                    np.add(source[start:stop], piece, out=part)
    return None


def average(gradients: np.ndarray | Sequence[np.ndarray], kept: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """The mean of ``gradients[kept]`` (validated), summed in the order of ``kept`` (module docstring,
    step 2)."""
    chosen = [gradients[int(position)] for position in kept]
    total = np.empty_like(chosen[0])
    _add_checked(None, total, [_Entry(None, values, _blocks(values, block)) for values in chosen], block)
    total /= total.dtype.type(kept.size)
    return total


class OrderedSum:
    """The sum of a round's accepted gradients in sorted party order, built while they arrive; a gradient
    not yet checked is checked in the same pass that adds it.

    ``order`` is the round's selected parties, sorted. Each is resolved once: `add` (its dense gradient,
    validated, or with ``checked=False`` only its length) or `skip` (rejected); ``settle(final=True)``
    resolves the rest (missing at the deadline). A gradient is summed as soon as every party before it in
    ``order`` is resolved -- in a round whose replies arrive in party order (one delivery instant: the
    network delivers a bucket sorted by sender), at once -- and until then it waits. Summed gradients are
    dropped: the sum holds at most ``group`` of them ready plus the ones waiting for an earlier party, never
    the round's R. The ready ones are added ``group`` at a time block by block, as `average` adds, so the
    result is bit-for-bit `average` of the accepted gradients in party order: every coordinate is added up
    in that order, in the same float32 steps.

    An unchecked gradient is read once, not once for its check and once for its sum: each of its blocks
    is checked as it is read, before it is added (`validation.within_bound`'s verdict, block by block). A
    group is added into a second buffer from the sum so far, and the two swap only when the whole group
    passed: a gradient refused at its last block leaves no trace -- the group is added again without it,
    from the untouched sum (the blocks the others passed are not checked again), so each refusal costs at
    most one more pass over its group. A refused gradient is not counted, and `settle` hands it over.

    `settle` (``final`` False) gives the verdict on every gradient added since its last call before the
    caller waits for later ones (`fedrecsim.actors.actor.Actor.gather`): the unchecked ones not yet summed
    -- their group is not complete -- are checked on their own then and summed with their group later,
    read twice as before.
    """

    def __init__(self, order: Sequence[Party], group: int = _GROUP, block: int = BLOCK) -> None:
        self._position = {party: position for position, party in enumerate(order)}
        self._resolved = [False] * len(order)
        self._waiting: dict[int, _Entry] = {}
        self._ready: list[_Entry] = []
        self._next = 0
        self._group = group
        self._block = block
        self._total: np.ndarray | None = None
        self._spare: np.ndarray | None = None
        self._refused: list[tuple[Party, np.ndarray]] = []
        self._final = False
        self.count = 0
        """Gradients in the sum, or on their way into it, so far."""

    def add(self, party: Party, gradient: np.ndarray, *, checked: bool = True) -> None:
        """``party``'s dense gradient of the right length (read, never written; dropped once summed):
        validated (``checked``), or to be checked as it is summed."""
        position = self._position[party]
        self._waiting[position] = _Entry(party, gradient, _blocks(gradient, self._block) if checked else 0)
        self.count += 1
        self._resolve(position)

    def skip(self, party: Party) -> None:
        """``party`` contributes nothing (its gradient was rejected)."""
        self._resolve(self._position[party])

    def settle(self, final: bool) -> list[tuple[Party, np.ndarray]]:
        """The gradients refused since the last call, as ``(party, gradient)``, each left out of the sum
        (class docstring). ``final``: no gradient comes any more -- every party not resolved is skipped and
        everything waiting is summed now."""
        if final:
            self._final = True
            self._resolved = [True] * len(self._resolved)
            self._ready.extend(self._waiting[position] for position in sorted(self._waiting))
            self._waiting.clear()
            self._next = len(self._resolved)
            self._flush()
        else:
            self._check_apart()
        refused, self._refused = self._refused, []
        return refused

    def _check_apart(self) -> None:
        """Check each gradient not yet summed on its own (`validation.within_bound`); refuse those it fails."""
        block = self._block
        for entry in [*self._ready, *self._waiting.values()]:
            blocks = _blocks(entry.values, block)
            if entry.blocks < blocks:
                if within_bound(entry.values, block):
                    entry.blocks = blocks
                else:
                    self._refuse(entry)
        self._ready = [entry for entry in self._ready if entry.blocks == _blocks(entry.values, block)]

    def _refuse(self, entry: _Entry) -> None:
        self._refused.append((entry.party, entry.values))  # type: ignore[arg-type]
        self._waiting.pop(self._position[entry.party], None)  # type: ignore[index]
        self.count -= 1

    def _resolve(self, position: int) -> None:
        self._resolved[position] = True
        resolved, waiting, ready = self._resolved, self._waiting, self._ready
        while self._next < len(resolved) and resolved[self._next]:
            entry = waiting.pop(self._next, None)
            if entry is not None:
                ready.append(entry)
            self._next += 1
        if len(ready) >= self._group:
            self._flush()

    def _flush(self) -> None:
        """Add the ready gradients to the sum (class docstring); a refused one is left out and the rest
        added again from the untouched sum."""
        ready = self._ready
        while ready:
            target = self._spare
            if target is None:
                target = np.empty_like(ready[0].values)
            refused = _add_checked(self._total, target, ready, self._block)
            if refused is None:
                self._total, self._spare = target, self._total
                ready.clear()
                return
            self._spare = target
            self._refuse(ready.pop(refused))

    def mean(self) -> np.ndarray | None:
        """The mean of the gradients summed (None if none was); the sum is divided in place and handed
        over, so call it once, after ``settle(final=True)``."""
        if not self._final:
            raise RuntimeError("OrderedSum.mean before settle(final=True): gradients may still be unchecked")
        total, self._total, self._spare = self._total, None, None
        if total is not None:
            total /= total.dtype.type(self.count)
        return total


def unfiltered(n: int) -> Selection:
    """SecureFilter ``none`` on ``n`` gradients: every one is kept (the round applies nothing if n = 0)."""
    return Selection(n, 0, np.arange(n) if n else None)


def adam_in_place(
    omega: np.ndarray, gradient: np.ndarray, adam: AdamState, hyper: AdamHyper, gamma_t: float = 0.0, block: int = BLOCK
) -> AdamState:
    """One Adam step of ``omega`` along ``gradient``, in place, then eq. (4)'s ``ω_t + gamma_t (ω_t -
    ω_{t-1})`` if ``gamma_t``: ``omega`` and ``adam``'s moments are overwritten, and ``gradient`` is used
    as scratch space (its values are lost). The float32 operations are `fedrecsim.mechanisms.adam.
    adam_step`'s (and eq. (4)'s), one by one in its order, so the result is bit-for-bit its result
    (tested); only the temporaries are gone. They run ``block`` entries at a time, every operation on a
    block before the next block, so that the five vectors' blocks stay in cache between operations:
    each vector is read and written once, not once per operation. ``gradient`` is finite: the server
    validated every gradient it averaged."""
    dtype = omega.dtype.type
    t = adam.t + 1
    beta1, beta2 = dtype(hyper.beta1), dtype(hyper.beta2)
    rest1, rest2 = 1 - beta1, 1 - beta2
    bias1, bias2 = dtype(1.0 - hyper.beta1**t), dtype(1.0 - hyper.beta2**t)
    eta, epsilon, gamma = dtype(hyper.eta), dtype(hyper.epsilon), dtype(gamma_t)
    scratch = np.empty(min(block, omega.size), dtype=omega.dtype)
    previous = np.empty_like(scratch) if gamma_t else None
    for start in range(0, omega.size, block):
        stop = start + block
        g, m, v, w = gradient[start:stop], adam.m[start:stop], adam.v[start:stop], omega[start:stop]
        step = scratch[: w.size]
        np.multiply(g, g, out=step)
        step *= rest2
        v *= beta2
        v += step
        np.multiply(g, rest1, out=step)
        m *= beta1
        m += step
        np.divide(m, bias1, out=step)
        step *= eta
        root = g
        np.divide(v, bias2, out=root)
        np.sqrt(root, out=root)
        root += epsilon
        step /= root
        if previous is None:
            w -= step
            continue
        before = previous[: w.size]
        before[...] = w
        w -= step
        np.subtract(w, before, out=before)
        before *= gamma
        w += before
    return AdamState(adam.m, adam.v, t)


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
    return Update(omega, adam_in_place(omega, mean, adam, hyper, gamma_t), selection)


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
