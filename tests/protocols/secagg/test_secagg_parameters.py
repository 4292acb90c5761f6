"""The SecAgg+ graph's failure bounds and the parameter finder (fedrecsim.protocols.secagg.parameters, issue 30),
checked against the bounds computed here with exact integers from their formulas (Bell et al. 2020's E1-E3 for
the randomly relabelled Harary graph; the module docstring derives them):

- P1 = (n - c) sum_{x >= t} C(c, x) C(n - 1 - c, k - x) / C(n - 1, k)            (an honest user exposed)
- P2 = n (n - 2h - 1) / 2 * C(n - 2h - 2, r - 2h) / C(n, r), h = k // 2, r = c + d  (honest survivors split)
- P3 = n sum_{x >= k - t + 1} C(d, x) C(n - 1 - d, k - x) / C(n - 1, k)          (a secret without t shares)

with c = floor(gamma n) and d = floor(delta n); security P1 + P2, correctness P3; for odd k with odd n, P1
draws k + 1 neighbours. The E2 formula itself is checked against every removal on a small ring.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.errors import ConfigError
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.secagg import SecAggParams, graph
from fedrecsim.protocols.secagg.parameters import find_parameters, security_level
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

ML_1M_USERS = 6040
SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "secagg_small.toml"


def _hypergeometric_tail(n: int, marked: int, draws: int, at_least: int) -> Fraction:
    """Pr[H(n - 1, marked, draws) >= at_least], exactly."""
    top = sum(math.comb(marked, x) * math.comb(n - 1 - marked, draws - x) for x in range(max(at_least, 0), draws + 1))
    return Fraction(top, math.comb(n - 1, draws))


def _log2(p: Fraction) -> float:
    return -math.inf if p == 0 else math.log2(p.numerator) - math.log2(p.denominator)


def bounds(n: int, k: int, t: int, gamma: float, delta: float) -> tuple[float, float]:
    """log2 of the security (P1 + P2) and correctness (P3) failure bounds, from the formulas above."""
    c, d = math.floor(round(gamma * n, 9)), math.floor(round(delta * n, 9))
    widest = k + 1 if k % 2 and n % 2 and k < n - 1 else k
    p1 = (n - c) * _hypergeometric_tail(n, c, widest, t)
    h, r = k // 2, c + d
    p2 = Fraction(0) if k >= n - 1 or r < 2 * h else Fraction(
        n * (n - 2 * h - 1) * math.comb(n - 2 * h - 2, r - 2 * h), 2 * math.comb(n, r)
    )
    p3 = n * _hypergeometric_tail(n, d, k, k - t + 1)
    return min(0.0, _log2(p1 + p2)), min(0.0, _log2(p3))


def _meets(n: int, k: int, t: int, gamma: float, delta: float, sigma: float, eta: float) -> bool:
    security, correctness = bounds(n, k, t, gamma, delta)
    return security <= -sigma and correctness <= -eta


CASES = [(1000, 0.01, 0.01), (ML_1M_USERS, 0.05, 0.05), (29858, 0.1, 0.1), (5000, 0.02, 0.08), (300, 0.1, 0.0)]


@pytest.mark.parametrize(("n", "gamma", "delta"), CASES)
def test_the_finder_meets_the_bounds_and_one_neighbour_fewer_does_not(n: int, gamma: float, delta: float) -> None:
    found = find_parameters(n, gamma, delta)
    assert 2 <= found.k < n - 1 and 1 <= found.t <= found.k
    assert _meets(n, found.k, found.t, gamma, delta, 40, 20)
    # Minimal: with k - 1 neighbours no threshold meets both bounds.
    assert not any(_meets(n, found.k - 1, t, gamma, delta, 40, 20) for t in range(1, found.k))
    # Its t is the largest that keeps the correctness bound: one more share breaks it.
    assert bounds(n, found.k, found.t + 1, gamma, delta)[1] > -20
    # The achieved levels it reports are the bounds.
    security, correctness = bounds(n, found.k, found.t, gamma, delta)
    assert found.security_log2 == pytest.approx(security, abs=1e-6)
    assert found.correctness_log2 == pytest.approx(correctness, abs=1e-6)


def test_the_issue_figure_the_default_degree_on_ml_1m_at_five_percent_is_about_two_to_the_minus_26() -> None:
    params = SecAggParams(graph="sparse", population=ML_1M_USERS)
    k, t = params.degree(ML_1M_USERS), params.threshold_for(ML_1M_USERS)
    assert (k, t) == (26, 14)  # 2 ceil(log2 6040) and floor(0.5 * 27) + 1
    security, correctness = bounds(ML_1M_USERS, k, t, 0.05, 0.05)
    assert -26.1 < security < -25.9 and -21.6 < correctness < -21.4  # short of 2^-40 (and still above 2^-20)
    level = params.security(ML_1M_USERS, k, t)
    assert (level.security_log2, level.correctness_log2) == (pytest.approx(security, abs=1e-6), pytest.approx(correctness, abs=1e-6))
    assert not level.meets(40, 20)
    # What a few percent does: at 1 % the same graph is far beyond 2^-40.
    assert bounds(ML_1M_USERS, k, t, 0.01, 0.01)[0] < -59


@pytest.mark.parametrize(("n", "k", "t", "gamma", "delta"), [
    (1001, 15, 8, 0.03, 0.05), (64, 10, 4, 0.2, 0.1), (50, 49, 10, 0.1, 0.1), (50, 49, 5, 0.1, 0.1), (20, 4, 2, 0.05, 0.05),
])
def test_security_level_is_the_formula_for_odd_degrees_complete_graphs_and_impossible_failures(
    n: int, k: int, t: int, gamma: float, delta: float
) -> None:
    level = security_level(n, k, t, gamma, delta)
    security, correctness = bounds(n, k, t, gamma, delta)
    for got, want in ((level.security_log2, security), (level.correctness_log2, correctness)):
        assert got == want if want == -math.inf else got == pytest.approx(want, abs=1e-6)
    report = level.report()
    assert report["security_failure_log2"] == (None if security == -math.inf else pytest.approx(security, abs=1e-3))


def test_the_disconnection_formula_bounds_every_removal_on_a_small_ring() -> None:
    """E2 exactly: every set of r removed users of a ring of n, k = 4 (h = 2) and k = 6 (h = 3); the bound
    is at least the exact probability, and the event is 'two runs of h or more removed'."""
    n = 13
    users = [Party(Role.USER, index) for index in range(n)]
    for k, r in ((4, 5), (4, 6), (6, 7)):
        neighbours = graph.harary(users, k, np.random.default_rng(k))
        split = 0
        subsets = list(itertools.combinations(range(n), r))
        for removed in subsets:
            alive = [party for party in users if party.index not in removed]
            seen, stack = {alive[0]}, [alive[0]]
            while stack:
                for other in neighbours[stack.pop()]:
                    if other.index not in removed and other not in seen:
                        seen.add(other)
                        stack.append(other)
            split += len(seen) < len(alive)
        exact = Fraction(split, len(subsets))
        h = k // 2
        bound = Fraction(n * (n - 2 * h - 1) * math.comb(n - 2 * h - 2, r - 2 * h), 2 * math.comb(n, r))
        assert 0 < exact <= bound, (k, r, exact, bound)
        level = security_level(n, k, k + 1, r / n, 0.0)  # t = k + 1: E1 impossible, the bound is E2's alone
        assert level.disconnection_log2 == pytest.approx(min(0.0, _log2(bound)), abs=1e-9)


def test_more_bits_or_more_collusion_need_more_neighbours() -> None:
    by_bits = [find_parameters(ML_1M_USERS, 0.05, 0.05, bits).k for bits in (20, 30, 40, 50, 60)]
    assert by_bits == sorted(by_bits) and by_bits[0] < by_bits[-1]
    by_gamma = [find_parameters(ML_1M_USERS, gamma, 0.05).k for gamma in (0.0, 0.01, 0.05, 0.1, 0.2)]
    assert by_gamma == sorted(by_gamma) and len(set(by_gamma)) == len(by_gamma)
    by_eta = [find_parameters(ML_1M_USERS, 0.05, 0.05, 40, eta).k for eta in (10, 20, 30)]
    assert by_eta == sorted(by_eta) and by_eta[0] < by_eta[-1]


def test_impossible_inputs_say_what() -> None:
    with pytest.raises(ValueError, match="fewer than 2 honest survivors"):
        find_parameters(100, 0.5, 0.5)
    with pytest.raises(ValueError, match="at least 3 users"):
        find_parameters(2, 0.0, 0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        security_level(100, 10, 5, 1.0, 0.0)
    with pytest.raises(ValueError, match="1 <= t <= k \\+ 1"):
        security_level(100, 10, 12, 0.1, 0.1)
    with pytest.raises(ValueError, match="bits must be > 0"):
        find_parameters(100, 0.1, 0.1, 0)
    # gamma + delta near 1 (18 + 18 of 40) still has a graph: k = 38 (all but the user opposite), where two
    # runs of 19 removed cannot fit in 36 and t = 20 lies between 18 corrupted and 38 - 18 surviving neighbours.
    crowded = find_parameters(40, 0.45, 0.45)
    assert (crowded.k, crowded.t) == (38, 20) and crowded.security_log2 == crowded.correctness_log2 == -math.inf
    assert _meets(40, 38, 20, 0.45, 0.45, 40, 20) and not any(_meets(40, 37, t, 0.45, 0.45, 40, 20) for t in range(1, 38))


def test_secure_sizing_fixes_k_and_t_for_every_session_and_users_accept_them() -> None:
    params = SecAggParams(graph="sparse", population=ML_1M_USERS, sizing="secure")
    found = find_parameters(ML_1M_USERS, 0.05, 0.05)
    assert params.degree(ML_1M_USERS) == params.degree(3000) == found.k and params.threshold_for(3000) == found.t
    assert params.degree(20) == 19 and params.threshold_of_degree(19) == min(20, found.t)  # small sessions: complete
    assert params.setup_problem(0, list(range(1, found.k + 1)), found.t) is None
    assert params.setup_problem(0, list(range(1, found.k + 1)), found.t - 1) is not None
    # Its own targets: 50 bits needs more neighbours than 40.
    assert SecAggParams(graph="sparse", population=ML_1M_USERS, sizing="secure", security_bits=50).degree(ML_1M_USERS) > found.k


@pytest.mark.parametrize(("overrides", "key", "words"), [
    (['protocol.sizing="secure"'], "protocol.sizing", "graph = 'sparse'"),
    (['protocol.sizing="secure"', 'protocol.graph="sparse"', "protocol.neighbours=6"], "protocol.neighbours", "leave neighbours = 0"),
    (['protocol.sizing="secure"', 'protocol.graph="sparse"', "protocol.corrupt_fraction=0.5", "protocol.dropout_fraction=0.5"],
     "protocol.corrupt_fraction", "honest survivors"),
])
def test_a_scenario_the_finder_cannot_serve_is_refused_naming_the_key(overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        fedrecsim.run(parse_scenario(apply_overrides(read_tables(SCENARIO), ["run.rounds=1", *overrides])))
    assert raised.value.key_path == key and words in str(raised.value)


def test_a_run_reports_its_graphs_failure_bounds_and_warns_when_they_miss_the_targets() -> None:
    base = ["run.rounds=1", "protocol.length=8", "availability.dropout=0.0", 'protocol.graph="sparse"']
    # 20 users, log2 rule: k = 10, t = 6; with 30 % colluding (6 users) an honest user can be exposed.
    loose = fedrecsim.run(parse_scenario(apply_overrides(read_tables(SCENARIO), [*base, "protocol.corrupt_fraction=0.3"])))
    report = loose.result["privacy"]["graph_failure"]
    security, correctness = bounds(20, 10, 6, 0.3, 0.05)
    assert (report["degree"], report["threshold"], report["users"]) == (10, 6, 20)
    assert report["security_failure_log2"] == pytest.approx(security, abs=1e-3) and security > -40
    assert report["meets_targets"] is False
    assert any("misses the targets" in warning for warning in loose.result["warnings"])
    # The finder's k and t for the same 20 users meet them: the run uses them and says so, without a warning.
    safe = fedrecsim.run(parse_scenario(apply_overrides(
        read_tables(SCENARIO), [*base, "protocol.corrupt_fraction=0.3", 'protocol.sizing="secure"']
    )))
    found = find_parameters(20, 0.3, 0.05)
    report = safe.result["privacy"]["graph_failure"]
    assert (report["degree"], report["threshold"]) == (min(found.k, 19), found.t) and report["meets_targets"] is True
    assert _meets(20, min(found.k, 19), found.t, 0.3, 0.05, 40, 20)
    assert not any("misses the targets" in warning for warning in safe.result["warnings"])
    assert safe.result["metrics"]["final"]["wrong_words"] == 0
    # Sized for 5 % dropouts, a scenario that drops 30 % is told its sessions may abort.
    crowded = fedrecsim.run(parse_scenario(apply_overrides(
        read_tables(SCENARIO), [*base[:2], 'protocol.graph="sparse"', 'protocol.sizing="secure"', "availability.dropout=0.3"]
    )))
    assert any("exceeds protocol.dropout_fraction = 0.05" in warning for warning in crowded.result["warnings"])


def test_privirec_reports_its_sessions_graph_bounds_through_the_same_function() -> None:
    table = {
        "run": {"protocol": "privirec", "seed": 4, "rounds": 1},
        "data": {"source": "synthetic", "feedback": "implicit", "users": 60, "items": 40, "ratings": 900,
                 "split": "per_user", "test_fraction": 0.2},
        "protocol": {"k": 8, "secagg": "ideal", "graph": "sparse", "neighbours": 6, "threshold": 0.5, "baseline": False},
    }
    result = fedrecsim.run(table)
    secure = result.result["privacy"]["secure_aggregation"]
    report = secure["graph_failure"]
    n = report["users"]
    assert (report["degree"], report["threshold"]) == (secure["degree"], secure["threshold"]) == (6, 4)
    security, correctness = bounds(n, 6, 4, 0.05, 0.05)
    assert n == 60 and -40 < security < -10 and -40 < correctness < -2  # 3 + 3 of 60: both can happen
    for got, want in ((report["security_failure_log2"], security), (report["correctness_failure_log2"], correctness)):
        assert got == (None if want == -math.inf else pytest.approx(want, abs=1e-3))
