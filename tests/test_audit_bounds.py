"""The audited lower bound (`fedrecsim.audit.bounds`) on mechanisms whose epsilon is known exactly.

Randomized response at eps outputs the true bit with probability e^eps / (1 + e^eps); the Laplace mechanism
releases the count (0 without the target, 1 with it) plus Laplace(1 / eps) noise. Both are eps-DP and no
better: the audit may approach eps, and must not exceed it but with the confidence level's probability.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedrecsim.audit.bounds import Rule, audit_scores, choose_rule, cp_lower, cp_upper, evaluate, roc

CONFIDENCE = 0.95
AUDITS = 50
TRIALS = 1000  # per world, half of them held out


def rr(rng: np.random.Generator, truth: int, eps: float, n: int) -> np.ndarray:
    keep = rng.random(n) < math.exp(eps) / (1 + math.exp(eps))
    return np.where(keep, truth, 1 - truth).astype(float)


def laplace(rng: np.random.Generator, truth: int, eps: float, n: int) -> np.ndarray:
    return truth + rng.laplace(0.0, 1.0 / eps, n)


def one_audit(mechanism, eps: float, seed: int, trials: int = TRIALS, claimed_delta: float = 0.0) -> float:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    scores_in, scores_out = mechanism(rng, 1, eps, trials), mechanism(rng, 0, eps, trials)
    half = trials // 2
    bound = audit_scores(scores_in[:half], scores_out[:half], scores_in[half:], scores_out[half:],
                         delta=claimed_delta, confidence=CONFIDENCE)
    return bound.epsilon_lower


def test_clopper_pearson_is_the_exact_binomial_interval() -> None:
    for successes, trials in ((0, 10), (3, 10), (10, 10), (137, 500)):
        exact = stats.binomtest(successes, trials).proportion_ci(confidence_level=0.9, method="exact")
        assert cp_lower(successes, trials, 0.05) == pytest.approx(exact.low, abs=1e-12)
        assert cp_upper(successes, trials, 0.05) == pytest.approx(exact.high, abs=1e-12)


@pytest.mark.parametrize("mechanism", [rr, laplace], ids=["randomized_response", "laplace"])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_the_bound_exceeds_the_true_epsilon_at_most_at_the_confidence_levels_rate(mechanism, eps: float) -> None:  # type: ignore[no-untyped-def]
    """50 audits at seeds 0..49: at 95% confidence the expected number above the true eps is at most 2.5;
    allowed: 7 (a binomial(50, 0.05) exceeds 7 with probability 0.4%)."""
    bounds = [one_audit(mechanism, eps, seed) for seed in range(AUDITS)]
    above = sum(bound > eps for bound in bounds)
    assert above <= stats.binom.ppf(0.996, AUDITS, 1 - CONFIDENCE)


@pytest.mark.parametrize(("mechanism", "eps", "factor"), [
    (rr, 1.0, 0.7), (rr, 2.0, 0.7), (laplace, 1.0, 0.6), (laplace, 2.0, 0.6),
])
def test_with_enough_trials_the_bound_comes_within_a_factor_of_the_true_epsilon(mechanism, eps: float, factor: float) -> None:  # type: ignore[no-untyped-def]
    """At 1,000 trials per world the median bound of 50 audits is at least ``factor`` x eps (measured:
    docs/audit.md)."""
    bounds = [one_audit(mechanism, eps, seed) for seed in range(AUDITS)]
    assert np.median(bounds) >= factor * eps


def test_a_mechanism_noisier_than_it_claims_is_caught() -> None:
    """Randomized response run at eps = 2 but claimed at 1: the audit's bound is above the claim."""
    bounds = [one_audit(rr, 2.0, seed) for seed in range(10)]
    assert min(bounds) > 1.0


def test_the_claimed_delta_lowers_the_bound() -> None:
    assert one_audit(rr, 2.0, 0, claimed_delta=0.1) < one_audit(rr, 2.0, 0)


def test_indistinguishable_worlds_give_no_evidence() -> None:
    """The same distribution in both worlds: the bound is 0 in all but (at most) the confidence level's share."""
    rng = np.random.default_rng(5)
    bounds = []
    for _ in range(AUDITS):
        a, b = rng.normal(size=200), rng.normal(size=200)
        bounds.append(audit_scores(a[:100], b[:100], a[100:], b[100:], delta=0.0, confidence=CONFIDENCE).epsilon_lower)
    assert sum(bound > 0 for bound in bounds) <= stats.binom.ppf(0.996, AUDITS, 1 - CONFIDENCE)


def test_the_rule_learned_on_the_training_half_is_judged_on_the_held_out_half() -> None:
    """Training scores that separate perfectly, held-out scores that do not: the bound is the held-out one (0)."""
    rng = np.random.default_rng(1)
    train_in, train_out = np.ones(100), np.zeros(100)
    held_in, held_out = rng.random(100), rng.random(100)
    bound = audit_scores(train_in, train_out, held_in, held_out, delta=0.0, confidence=CONFIDENCE)
    assert bound.rule is not None and bound.epsilon_lower == 0.0
    assert audit_scores(train_in, train_out, train_in, train_out, delta=0.0, confidence=CONFIDENCE).epsilon_lower > 3


def test_either_direction_and_ordering_is_found() -> None:
    """A score that is low with the target in is as good as one that is high."""
    rng = np.random.default_rng(2)
    high = audit_scores(*(rr(rng, t, 2.0, 500) for t in (1, 0, 1, 0)), delta=0.0, confidence=CONFIDENCE)
    low = audit_scores(*(-rr(rng, t, 2.0, 500) for t in (1, 0, 1, 0)), delta=0.0, confidence=CONFIDENCE)
    assert high.epsilon_lower > 1.0 and low.epsilon_lower > 1.0
    assert high.rule.guesses_in(np.array([1.0, 0.0])).tolist() == [True, False]
    assert low.rule.guesses_in(np.array([-1.0, 0.0])).tolist() == [True, False]


def test_the_held_out_rates_are_the_rules() -> None:
    rule = Rule(0.5, ">=", "in/out")
    bound = evaluate(rule, np.array([1.0, 1.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0, 0.0]), 0.0, 0.05)
    assert (bound.tpr, bound.fpr, bound.hits_in, bound.hits_out) == (0.75, 0.25, 3, 1)
    assert bound.epsilon_point == pytest.approx(math.log(3))
    expected = math.log(cp_lower(3, 4, 0.025) / cp_upper(1, 4, 0.025))
    assert bound.epsilon_lower == pytest.approx(max(expected, 0.0))


def test_no_rule_when_training_shows_nothing() -> None:
    assert choose_rule(np.zeros(10), np.zeros(10), 0.0, 0.05) is None


def test_roc_runs_from_corner_to_corner() -> None:
    fpr, tpr = roc(np.array([2.0, 3.0]), np.array([1.0, 2.0]))
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
