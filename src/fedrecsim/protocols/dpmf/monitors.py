"""The simulator's checks of DP-MF's ground truth, every iteration (the simulator is omniscient).

The parties never read each other's state; the `Verifier` does, after each iteration, to check what the
paper promises and to measure what it does not:

- ``eta_invariant``: for every updated item, the noise left in the recommender's unmasked aggregate
  (A_j minus the ring sum of the contributors' grad + rho~) equals eta_j exactly in the ring -- S2: the
  sum of the raters' fixed pieces; S3: tau^_j - alpha_j (itself checked, after the initialization, to be
  the sum of the pre-shared pieces). One check per updated item.
- ``eta_pieces``: every updated item's eta_j holds all the pieces it was drawn for: S3, the k pieces of the
  pre-sharing attempt whose tau^_j the recommender kept (the ground truth: the shares the third party
  summed in the attempt its alpha_j belongs to); S2, the fixed pieces of all k_j raters of the noise
  setup. An item used with fewer has eta of scale b sqrt(pieces / k) instead of b. One check per updated
  item per iteration.
- ``masks_cancel``: the aggregate minus the contributors' masks psi (plus alpha_j in S3) equals the ring
  sum of exactly what the contributors added (grad + noise piece + rho~). One check per aggregated item.
- ``rho_shortfall``: for every updated item, the n_j the recommender's divisor is built from (n_j, or
  k_j n_j / k'_j in S3, see `recommender`) is the number of rho~ pieces really in the sum (the
  contributors that rated the item), and no more than the k'_j it asked for -- the accounting the dropout
  recovery rests on. The shortfall itself -- items whose rho~ came from fewer users than were served, so that its scale is
  only b sqrt(n_j / k'_j) -- is not a violation but a measured consequence of mid-round dropout: it is
  reported in this monitor's detail, per round (``rho_short``, ``rho_scale_min``) and under ``privacy``.
- ``ring_overflow``: every value encoded into the ring (noise pieces, gradients, the item vectors) and
  every aggregate must fit the signed range; each value that did not is a violation (it was clamped or,
  for an aggregate, would have wrapped).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

import numpy as np

from ...invariants import InvariantMonitor
from ...network.party import Party
from .public import PublicParameters
from .recommender import Recommender, Served, Update
from .ringops import Grouping, sum_by_item
from .third_party import Aggregator
from .user import PrivateUser

#: What `Verifier.after_round` reads of each contributor: its last contribution's round and records.
_RECORDS = attrgetter("last_round", "items", "last_signal", "last_plain", "last_real", "last_rho", "last_overflow")

_NOTES_KEPT = 3


class TallyMonitor(InvariantMonitor):
    """An invariant verified many values at once: `tally` adds checks and violations in bulk."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(name, description)
        self._notes: list[str] = []

    def tally(self, checked: int, violations: int, detail: str) -> None:
        self.checked += int(checked)
        self.violations += int(violations)
        if violations and len(self._notes) < _NOTES_KEPT:
            self._notes.append(detail)

    def report(self) -> dict[str, Any]:
        report = super().report()
        if self.violations:
            report["detail"] = "; ".join(self._notes)
        return report


class ShortfallMonitor(TallyMonitor):
    """``rho_shortfall``: the accounting check of the module docstring, and the shortfall it measures."""

    def __init__(self, scale: float) -> None:
        super().__init__(
            "rho_shortfall",
            "every updated item is divided by the number of rho~ pieces really in its sum",
        )
        self.scale = scale
        self.updates = 0
        self.short = 0
        self.min_scale = math.inf

    def measure(self, short: int, updates: int, min_scale: float) -> None:
        self.updates += updates
        self.short += short
        self.min_scale = min(self.min_scale, min_scale)

    def summary(self) -> dict[str, float]:
        return {
            "item_updates": self.updates,
            "short_updates": self.short,
            "short_fraction": self.short / self.updates if self.updates else 0.0,
            "target_scale": self.scale,
            "min_effective_scale": self.min_scale if self.updates else self.scale,
        }

    def report(self) -> dict[str, Any]:
        report = super().report()
        if not self.violations:
            summary = self.summary()
            report["detail"] = (
                f"{self.description}; {summary['short_updates']} of {summary['item_updates']} item updates had "
                f"fewer rho~ pieces than users served (min effective Laplace scale "
                f"{summary['min_effective_scale']:.4g} of {self.scale:.4g})"
            )
        return report


class Verifier:
    """Reads every party's state after each step of a run and tallies the five monitors.

    Args:
        public: the run's public parameters.
        users: every user actor of the run, by party.
        recommender, aggregator: the server and the third party.
    """

    def __init__(self, public: PublicParameters, users: Mapping[Party, PrivateUser], recommender: Recommender, aggregator: Aggregator | None) -> None:
        self.public = public
        self.users = users
        self.recommender = recommender
        self.aggregator = aggregator
        self.eta = TallyMonitor("eta_invariant", "the noise in every unmasked aggregate is exactly eta_j")
        self.pieces = TallyMonitor("eta_pieces", "every updated item's eta_j holds all k pieces it was drawn for")
        # S3 ground truth per item: pieces in eta_j and the k they were drawn for (0, 0: never pre-shared).
        self._pieces = np.zeros(public.n_items, dtype=np.int64)
        self._k = np.zeros(public.n_items, dtype=np.int64)
        self.masks = TallyMonitor("masks_cancel", "removing the contributors' masks leaves exactly their sum")
        self.rho = ShortfallMonitor(public.scale)
        self.overflow = TallyMonitor("ring_overflow", "every encoded value and every aggregate fits the ring")
        self._eta_truth: np.ndarray | None = None
        self._eta_sources = -1
        self._tallied: set[Party] = set()
        self._vector_values = 0
        self._setup_values = 0
        self._setup_overflow = 0
        self._vector_overflow = 0
        self.eta_abs_sum = 0.0
        self.eta_values = 0
        self.rho_abs_sum = 0.0
        self.rho_values = 0
        self.last_rho: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def monitors(self) -> list[InvariantMonitor]:
        return [self.eta, self.pieces, self.masks, self.rho, self.overflow]

    # ------------------------------------------------------------------ ground truth of eta

    def _alpha(self, items: np.ndarray) -> np.ndarray:
        if self.aggregator is None or self.aggregator.alpha is None:
            return np.zeros((items.size, self.public.d), dtype=self.public.ring.dtype)
        return self.aggregator.alpha[items]

    def eta_truth(self, items: np.ndarray) -> np.ndarray:
        """eta_j (ring) as the parties hold it: S3 tau^_j - alpha_j; S2 the sum of the raters' pieces."""
        ring = self.public.ring
        if self.public.scenario == "S3":
            return ring.sub(self.recommender.tau_hat[items], self._alpha(items))
        holders = [user for user in self.users.values() if user.eta is not None]
        if len(holders) != self._eta_sources:
            rows_items = np.concatenate([user.items for user in holders]) if holders else np.empty(0, dtype=np.int64)
            rows = np.concatenate([user.eta for user in holders]) if holders else np.empty((0, self.public.d), dtype=ring.dtype)
            present, sums = sum_by_item(ring, rows_items, rows, self.public.n_items)
            truth = np.zeros((self.public.n_items, self.public.d), dtype=ring.dtype)
            truth[present] = sums
            self._eta_truth, self._eta_sources = truth, len(holders)
            fresh = [user for user in holders if user.party not in self._tallied]
            self._tallied.update(user.party for user in fresh)
            self.overflow.tally(sum(u.setup_values for u in fresh), sum(u.setup_overflow for u in fresh), "S2 eta-pieces did not fit")
        return self._eta_truth[items]  # type: ignore[index]

    def after_presharing(self, accepted: np.ndarray) -> None:
        """S3, after a pre-sharing attempt: the ground truth of the items it covered, and the kept tau^ checked.

        The items the third party's alpha_j now belongs to this attempt get their true piece count and k
        (from the sharers' own records of what they drew, for the shares the third party summed). For the
        ``accepted`` items, tau^_j - alpha_j must be the ring sum of exactly those pieces (one
        ``eta_invariant`` check per item; an item counts as a violation only if its own sum differs).
        """
        if self.aggregator is None:
            return
        ring, n_items, d = self.public.ring, self.public.n_items, self.public.d
        attempt = self.recommender.attempt
        covered = np.flatnonzero(self.aggregator.alpha_attempt == attempt)
        shares = [self.users[party].shared[attempt] for party in self.aggregator.presharers.get(attempt, ())]
        items = np.concatenate([items for items, _, _ in shares]) if shares else np.empty(0, dtype=np.int64)
        rows = np.concatenate([rows for _, rows, _ in shares]) if shares else np.empty((0, d), dtype=ring.dtype)
        drawn_for = np.concatenate([k for _, _, k in shares]) if shares else np.empty(0, dtype=np.int64)
        present, sums = sum_by_item(ring, items, rows, n_items)
        self._pieces[covered] = np.bincount(items, minlength=n_items)[covered]
        self._k[covered] = 0
        np.maximum.at(self._k, items, drawn_for)
        truth = np.zeros((n_items, d), dtype=ring.dtype)
        truth[present] = sums
        wrong = np.count_nonzero(np.any(self.eta_truth(accepted) != truth[accepted], axis=1))
        self.eta.tally(accepted.size, wrong, f"attempt {attempt}: {wrong} items' tau^ - alpha is not the sum of their pre-shared pieces")
        values = sum(user.setup_values for user in self.users.values())
        overflow = sum(user.setup_overflow for user in self.users.values())
        self.overflow.tally(values - self._setup_values, overflow - self._setup_overflow, f"attempt {attempt}: pre-shared eta-pieces did not fit")
        self._setup_values, self._setup_overflow = values, overflow

    # ------------------------------------------------------------------ each iteration

    def after_round(self, served: Served, update: Update | None) -> dict[str, float]:
        """Check one iteration; returns its per-round measurements (``rho_short``, ``rho_scale_min``)."""
        ring = self.public.ring
        values = self.recommender.vector_values - self._vector_values
        overflow = self.recommender.vector_overflow - self._vector_overflow
        self._vector_values, self._vector_overflow = self.recommender.vector_values, self.recommender.vector_overflow
        self.overflow.tally(values, overflow, f"round {served.round}: {overflow} item-vector values did not fit")
        if update is None:
            return {}
        where = f"round {update.round}"
        contributors = [self.users[party] for party in update.contributors]
        if not contributors:
            return {"rho_short": 0.0}
        # Every contributor's records in one pass over them, each field then concatenated in contributor order.
        rounds, items, signals, plains, reals, rhos, overflows = zip(*map(_RECORDS, contributors))
        stale = [str(user.party) for user, last in zip(contributors, rounds) if last != update.round]
        if stale:
            self.masks.tally(update.items.size, update.items.size, f"{where}: reported contributors {stale[:3]} did not contribute")
            return {}
        grouping = Grouping(np.concatenate(items), self.public.n_items)
        present = grouping.present
        if not np.array_equal(present, update.items):
            self.masks.tally(update.items.size, update.items.size, f"{where}: aggregated items differ from the contributors'")
            return {}
        signal = np.concatenate(signals)
        signal_sums = grouping.sum(signal, ring.dtype)
        plain_sums = grouping.sum(np.concatenate(plains), ring.dtype)
        self.overflow.tally(signal.size, sum(overflows), f"{where}: contributions did not fit")
        expected = ring.sub(plain_sums, self._alpha(present))
        self.masks.tally(present.size, np.count_nonzero(np.any(update.before_addback != expected, axis=1)), f"{where}: masks did not cancel")
        # The aggregated items that were updated; usually all of them, and then the arrays are read whole
        # instead of copied through an all-True mask.
        keep: np.ndarray | slice = np.isin(present, update.updated, kind="table")
        if keep.all():
            keep = slice(None)
        used = present[keep]
        truth = self.eta_truth(used)
        noise = ring.sub(update.unmasked[keep], signal_sums[keep])
        self.eta.tally(truth.shape[0], np.count_nonzero(np.any(noise != truth, axis=1)), f"{where}: the noise left is not eta_j")
        pieces = grouping.counts
        if self.public.scenario == "S3":
            eta_pieces, drawn_for = self._pieces[used], self._k[used]
        else:
            # S2: the pieces in the sum are the contributors'; they were drawn for the k_j raters set up.
            eta_pieces, drawn_for = pieces[keep], self.recommender.eta_pieces[used]
        short = np.count_nonzero((eta_pieces < drawn_for) | (drawn_for == 0))
        self.pieces.tally(used.size, short, f"{where}: {short} items updated with fewer eta pieces than k (min {eta_pieces.min() if used.size else 0})")
        real_sums = grouping.sum(np.concatenate(reals))[keep]
        rho_sums = grouping.sum(np.concatenate(rhos))[keep]
        return self._rho(served, update, keep, pieces[keep], real_sums, rho_sums, ring.decode(truth), where)

    def _rho(
        self, served: Served, update: Update, keep: np.ndarray | slice, pieces: np.ndarray, real_sums: np.ndarray,
        rho_sums: np.ndarray, eta: np.ndarray, where: str,
    ) -> dict[str, float]:
        """The rho~ accounting, the aggregate range check, and the shortfall measurement, per updated item."""
        ring = self.public.ring
        beyond = np.count_nonzero(~ring.fits(real_sums + eta))
        self.overflow.tally(real_sums.size, beyond, f"{where}: {beyond} aggregate values exceed the ring's range and wrapped")
        counts = update.counts[keep]
        raters = served.raters[update.items[keep]]
        weights = served.known_raters[update.items[keep]] / raters if served.known_raters is not None else 1.0
        # The divisor counts the rho~ pieces really in the sum, and no more were drawn than asked.
        wrong = np.count_nonzero((counts != pieces) | (counts > raters) | ~np.isclose(update.divisors[keep], pieces * weights, rtol=1e-12, atol=0))
        self.rho.tally(counts.size, wrong, f"{where}: {wrong} items divided by another count than their rho~ pieces")
        effective = self.public.scale * np.sqrt(counts / raters)
        short = int(np.count_nonzero(counts < raters))
        self.rho.measure(short, counts.size, float(effective.min()) if counts.size else math.inf)
        if self.public.protected:
            self.rho_abs_sum += float(np.abs(rho_sums).sum())
            self.rho_values += rho_sums.size
            self.last_rho = (update.items[keep], rho_sums)
        self.eta_abs_sum += float(np.abs(eta).sum())
        self.eta_values += eta.size
        return {
            "rho_short": short / counts.size if counts.size else 0.0,
            "rho_scale_min": float(effective.min()) if counts.size else self.public.scale,
        }


__all__ = ["ShortfallMonitor", "TallyMonitor", "Verifier"]
