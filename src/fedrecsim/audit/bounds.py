"""From a distinguisher's scores to an audited lower bound on epsilon (Jagielski et al. 2020, Nasr et al. 2021).

A mechanism M is (eps, delta)-DP for a neighbouring pair (D_in, D_out) only if, for every event E of its
output and both orderings (a, b) of the pair, ``P[E | a] <= e^eps P[E | b] + delta``, so

    eps >= log((P[E | a] - delta) / P[E | b]).

A distinguisher's threshold test is such an event: "guess in" when its score is at least t (or below t).
With ``P[guess in | in] = TPR = 1 - FNR`` and ``P[guess in | out] = FPR`` the two orderings give the
paper's ``log((1 - delta - FNR) / FPR)`` and its mirror ``log((1 - delta - FPR) / FNR)``.

The probabilities are estimated from trials, so each is replaced by its one-sided Clopper--Pearson bound:
the lower bound of ``P[E | a]`` and the upper bound of ``P[E | b]``, each at level ``alpha / 2``. By the
union bound both hold together with probability at least ``1 - alpha``, and then the audited value is
below the true eps: a statement at confidence ``1 - alpha`` (`Bound.confidence`).

Choosing the threshold, its direction and the ordering is itself a search that could find a lucky value,
so the choice is made on one half of the trials (the *training* half: the threshold whose Clopper--Pearson
bound is largest there) and the bound is computed once, on the other (*held-out*) half. The held-out
trials never influence the choice, and no correction over thresholds is needed.

A bound of 0 means the trials gave no evidence of leakage: that is not evidence of privacy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

Ordering = Literal["in/out", "out/in"]
Event = Literal[">=", "<"]


def cp_lower(successes: np.ndarray | int, trials: np.ndarray | int, alpha: float) -> np.ndarray:
    """The one-sided Clopper--Pearson lower bound at level ``alpha`` of a binomial proportion (0 at 0)."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k <= 0, 0.0, np.nan_to_num(bound, nan=0.0))


def cp_upper(successes: np.ndarray | int, trials: np.ndarray | int, alpha: float) -> np.ndarray:
    """The one-sided Clopper--Pearson upper bound at level ``alpha`` of a binomial proportion (1 at n)."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = stats.beta.ppf(1.0 - alpha, k + 1, n - k)
    return np.where(k >= n, 1.0, np.nan_to_num(bound, nan=1.0))


def epsilon_from(p_a: np.ndarray | float, p_b: np.ndarray | float, delta: float) -> np.ndarray:
    """``max(0, log((p_a - delta) / p_b))``, elementwise: 0 where ``p_a <= delta`` (no evidence)."""
    a = np.asarray(p_a, dtype=float) - delta
    b = np.asarray(p_b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.log(a / b)
    return np.where((a > 0) & np.isfinite(value), np.maximum(value, 0.0), np.where(a > 0, math.inf, 0.0))


@dataclass(frozen=True)
class Rule:
    """A threshold test: the event is ``score >= threshold`` or ``score < threshold`` (`event`), and the
    ordering says whether it is likelier with the target in (``in/out``) or out (``out/in``)."""

    threshold: float
    event: Event
    ordering: Ordering

    def fires(self, scores: np.ndarray) -> np.ndarray:
        return scores >= self.threshold if self.event == ">=" else scores < self.threshold

    def guesses_in(self, scores: np.ndarray) -> np.ndarray:
        """Whether the test guesses "target in" for each score."""
        fired = self.fires(scores)
        return fired if self.ordering == "in/out" else ~fired


@dataclass(frozen=True)
class Bound:
    """An audited lower bound on epsilon and how it was reached.

    Attributes:
        epsilon_lower: the bound; with probability at least ``confidence`` the true eps is at least this.
        confidence: ``1 - alpha``.
        delta: the delta the bound assumes (the claim's).
        rule: the threshold test chosen on the training half.
        tpr, fpr: the rule's held-out true- and false-positive rates ("guess in" with the target in / out).
        epsilon_point: ``log((TPR - delta)/FPR)`` (or its mirror, per the ordering) from the held-out rates
            themselves, without the confidence intervals: an estimate, not a bound.
        trials_in, trials_out: the held-out trials of each world.
        hits_in, hits_out: held-out trials of each world on which the rule's event occurred.
    """

    epsilon_lower: float
    confidence: float
    delta: float
    rule: Rule | None
    tpr: float
    fpr: float
    epsilon_point: float
    trials_in: int
    trials_out: int
    hits_in: int
    hits_out: int


def _counts(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each threshold: how many scores of each world are >= it."""
    sorted_in, sorted_out = np.sort(scores_in), np.sort(scores_out)
    at_least_in = sorted_in.size - np.searchsorted(sorted_in, thresholds, side="left")
    at_least_out = sorted_out.size - np.searchsorted(sorted_out, thresholds, side="left")
    return at_least_in, at_least_out


def _rule_bound(hits_a: np.ndarray, n_a: int, hits_b: np.ndarray, n_b: int, delta: float, alpha: float) -> np.ndarray:
    return epsilon_from(cp_lower(hits_a, n_a, alpha / 2), cp_upper(hits_b, n_b, alpha / 2), delta)


def choose_rule(scores_in: np.ndarray, scores_out: np.ndarray, delta: float, alpha: float) -> Rule | None:
    """The threshold test with the largest Clopper--Pearson bound on these (training) scores; None when no
    test gives a bound above 0."""
    scores_in, scores_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    thresholds = np.unique(np.concatenate([scores_in, scores_out]))
    if thresholds.size == 0:
        return None
    n_in, n_out = scores_in.size, scores_out.size
    ge_in, ge_out = _counts(scores_in, scores_out, thresholds)
    lt_in, lt_out = n_in - ge_in, n_out - ge_out
    candidates = (
        (">=", "in/out", _rule_bound(ge_in, n_in, ge_out, n_out, delta, alpha)),
        (">=", "out/in", _rule_bound(ge_out, n_out, ge_in, n_in, delta, alpha)),
        ("<", "in/out", _rule_bound(lt_in, n_in, lt_out, n_out, delta, alpha)),
        ("<", "out/in", _rule_bound(lt_out, n_out, lt_in, n_in, delta, alpha)),
    )
    best: tuple[float, Rule] | None = None
    for event, ordering, values in candidates:
        position = int(np.argmax(values))
        if values[position] > 0 and (best is None or values[position] > best[0]):
            best = (float(values[position]), Rule(float(thresholds[position]), event, ordering))  # type: ignore[arg-type]
    return None if best is None else best[1]


def evaluate(rule: Rule | None, scores_in: np.ndarray, scores_out: np.ndarray, delta: float, alpha: float) -> Bound:
    """The bound of ``rule`` on held-out scores, at confidence ``1 - alpha`` (module docstring)."""
    scores_in, scores_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    n_in, n_out = scores_in.size, scores_out.size
    if rule is None or n_in == 0 or n_out == 0:
        return Bound(0.0, 1.0 - alpha, delta, rule, 0.0, 0.0, 0.0, n_in, n_out, 0, 0)
    hits_in, hits_out = int(rule.fires(scores_in).sum()), int(rule.fires(scores_out).sum())
    if rule.ordering == "in/out":
        lower = _rule_bound(np.array(hits_in), n_in, np.array(hits_out), n_out, delta, alpha)
        point = epsilon_from(hits_in / n_in, hits_out / n_out, delta)
    else:
        lower = _rule_bound(np.array(hits_out), n_out, np.array(hits_in), n_in, delta, alpha)
        point = epsilon_from(hits_out / n_out, hits_in / n_in, delta)
    tpr = float(rule.guesses_in(scores_in).mean())
    fpr = float(rule.guesses_in(scores_out).mean())
    return Bound(float(lower), 1.0 - alpha, delta, rule, tpr, fpr, float(point), n_in, n_out, hits_in, hits_out)


def audit_scores(
    train_in: np.ndarray, train_out: np.ndarray, test_in: np.ndarray, test_out: np.ndarray, *, delta: float,
    confidence: float,
) -> Bound:
    """Choose a rule on the training scores and bound epsilon with it on the held-out scores.

    Higher or lower scores may mean "in": the rule's direction is chosen on the training half too.
    """
    alpha = 1.0 - confidence
    return evaluate(choose_rule(train_in, train_out, delta, alpha), test_in, test_out, delta, alpha)


def roc(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ROC curve of "guess in when score >= t" over every threshold: ``(fpr, tpr)``, from (0, 0) to (1, 1)."""
    scores_in, scores_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    thresholds = np.unique(np.concatenate([scores_in, scores_out]))[::-1]
    ge_in, ge_out = _counts(scores_in, scores_out, thresholds)
    tpr = np.concatenate([[0.0], ge_in / max(scores_in.size, 1), [1.0]])
    fpr = np.concatenate([[0.0], ge_out / max(scores_out.size, 1), [1.0]])
    return fpr, tpr


__all__ = ["Bound", "Rule", "audit_scores", "choose_rule", "cp_lower", "cp_upper", "epsilon_from", "evaluate", "roc"]
