"""DP-MF's numerical helpers against the paper's formulas, recomputed here in numpy / scipy.

- `central.refit_items`: the exact minimizer of objective (6) with U fixed, solved item by item in the test
  (normalized: mu n_j; raw sums: mu), items nobody rated keep their profile;
- `noise.central_noise`: Theorem 1's density p(eta) ~ exp(-eps ||eta|| / (2 Delta)) (so ||eta|| ~ Gamma(d,
  2 Delta / eps)) or Lemma 1's iid Laplace(2 Delta sqrt(d) / eps), by Kolmogorov-Smirnov tests on fixed seeds;
- `noise.PublicCoin`: H_j(t) ~ Exp(1), drawn from the run's public stream (Stream.PROTOCOL, sub-stream 1,
  iteration t) so every party derives it alone, one matrix per (seed, t), handed out read-only;
- `headroom.frac_bits_for` at the boundaries of the ring's range, and `aggregate_headroom` from its formula;
- the privacy report's eps, Delta, b and the ring report of a run, from the scenario's numbers;
- S2's per-round rows (served, contributors, items updated) from the data and their bytes from the transcript,
  and S3's communication figures (the worst iteration beside Hua et al.'s claims).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.ratings import Ratings
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.models.mf import MFHyper
from fedrecsim.protocols.dpmf.central import refit_items
from fedrecsim.protocols.dpmf.headroom import ITEM_NORM_BOUND, TAIL_PROBABILITY, Headroom, aggregate_headroom, check_ring, frac_bits_for
from fedrecsim.protocols.dpmf.noise import PublicCoin, central_noise
from fedrecsim.seeding import Stream, generator
from fedrecsim.summary import summary_text

# A KS test on a fixed seed rejects the true distribution at this level with probability 1e-3.
KS_LEVEL = 1e-3


def _ratings(seed: int = 3, n_users: int = 12, n_items: int = 9, d: int = 4) -> tuple[Ratings, np.ndarray, np.ndarray]:
    """Random ratings on 1..5 where item 0 has one rater, items 4 and n_items - 1 have none; U in the unit ball."""
    rng = np.random.default_rng(seed)
    pairs = [(u, i) for u in range(n_users) for i in range(1, n_items - 1) if i != 4 and rng.random() < 0.6]
    pairs.append((5, 0))
    users, items = np.array(pairs).T
    values = rng.integers(1, 6, size=users.size).astype(float)
    ratings = Ratings(users, items, values, n_users, n_items, (1.0, 5.0))
    U = rng.standard_normal((n_users, d))
    U /= np.maximum(1.0, np.linalg.norm(U, axis=1))[:, None]
    V = rng.standard_normal((n_items, d))
    return ratings, U, V


def _minimizer_of_objective_6(U: np.ndarray, V: np.ndarray, ratings: Ratings, eta: np.ndarray, mu: float, normalize: bool) -> np.ndarray:
    """Per item j: argmin_v sum_i (r_ij - u_i.v)^2 + mu w_j ||v||^2 + eta_j.v, w_j = n_j (normalized) or 1
    (and 1 for an unrated item, whose minimizer is -eta_j / (2 mu)), i.e. (U_j^T U_j + mu w_j I) v = U_j^T r_j -
    eta_j / 2."""
    expected = np.empty_like(V)
    d = V.shape[1]
    for j in range(V.shape[0]):
        mine = ratings.items == j
        rows = U[ratings.users[mine]]
        weight = mine.sum() if normalize and mine.any() else 1.0
        expected[j] = np.linalg.solve(rows.T @ rows + mu * weight * np.eye(d), rows.T @ ratings.values[mine] - eta[j] / 2)
    return expected


@pytest.mark.parametrize("normalize", [True, False])
def test_refit_items_is_the_exact_minimizer_of_objective_6(normalize: bool) -> None:
    ratings, U, V = _ratings()
    eta = np.random.default_rng(11).laplace(0.0, 3.0, size=V.shape)
    hyper = MFHyper(d=4, mu=0.05, normalize=normalize)
    refit = refit_items(U, V, ratings, eta, hyper)
    expected = _minimizer_of_objective_6(U, V, ratings, eta, 0.05, normalize)
    np.testing.assert_allclose(refit, expected, rtol=1e-10, atol=1e-12)
    # Unrated items (4 and the last) are published as -eta_j / (2 mu), not as their starting profile, which
    # would tell an unrated item from a rated one without noise (the audit's finding, issue 31).
    np.testing.assert_allclose(refit[[4, 8]], -eta[[4, 8]] / (2 * 0.05), rtol=1e-12)
    assert refit is not V and not np.shares_memory(refit, V)
    # The gradient of (6) vanishes at the refit for every rated item.
    errors = np.einsum("ij,ij->i", U[ratings.users], refit[ratings.items]) - ratings.values
    gradient = np.zeros_like(V)
    np.add.at(gradient, ratings.items, 2 * U[ratings.users] * errors[:, None])
    counts = np.bincount(ratings.items, minlength=V.shape[0])
    gradient += 2 * 0.05 * (counts if normalize else np.ones_like(counts))[:, None] * refit + eta
    rated = counts > 0
    assert np.abs(gradient[rated]).max() < 1e-9


def test_refit_items_weighs_mu_by_the_raters_only_when_normalized() -> None:
    """With a large mu the two regularizers differ visibly on an item with many raters."""
    ratings, U, V = _ratings()
    eta = np.zeros_like(V)
    normalized = refit_items(U, V, ratings, eta, MFHyper(d=4, mu=1.0, normalize=True))
    raw = refit_items(U, V, ratings, eta, MFHyper(d=4, mu=1.0, normalize=False))
    busy = int(np.argmax(np.bincount(ratings.items)))
    assert np.linalg.norm(normalized[busy]) < 0.9 * np.linalg.norm(raw[busy])


def test_theorem1_noise_has_gamma_norms_and_uniform_directions() -> None:
    d, epsilon, delta = 5, 0.5, 4.0
    eta = central_noise(np.random.default_rng(2015), "theorem1", 4000, d, epsilon, delta)
    assert eta.shape == (4000, d)
    norms = np.linalg.norm(eta, axis=1)
    # Theorem 1: p(eta) ~ exp(-eps ||eta|| / (2 Delta)) in R^d, so ||eta|| ~ Gamma(d, scale 2 Delta / eps).
    assert stats.kstest(norms, stats.gamma(a=d, scale=2 * delta / epsilon).cdf).pvalue > KS_LEVEL
    # A direction uniform on the sphere: its first coordinate squared is Beta(1/2, (d - 1)/2).
    assert stats.kstest((eta[:, 0] / norms) ** 2, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > KS_LEVEL
    # Power: Lemma 1's Laplace elements are rejected on the same sample.
    assert stats.kstest(eta.ravel(), stats.laplace(scale=2 * delta * math.sqrt(d) / epsilon).cdf).pvalue < 1e-6


def test_laplace_noise_has_lemma1_iid_laplace_elements() -> None:
    d, epsilon, delta = 5, 0.5, 4.0
    eta = central_noise(np.random.default_rng(2015), "laplace", 4000, d, epsilon, delta)
    assert eta.shape == (4000, d)
    b = 2 * delta * math.sqrt(d) / epsilon
    assert stats.kstest(eta.ravel(), stats.laplace(scale=b).cdf).pvalue > KS_LEVEL
    # Power: Theorem 1's Gamma norms are rejected on the same sample.
    assert stats.kstest(np.linalg.norm(eta, axis=1), stats.gamma(a=d, scale=2 * delta / epsilon).cdf).pvalue < 1e-6


def test_the_public_coin_is_exp1_from_the_runs_public_stream_per_iteration() -> None:
    """H_j(t) for t = 0, 1, 2 is the Exp(1) matrix of the public stream (Stream.PROTOCOL, 1, t) of the seed."""
    coin = PublicCoin(7, 40, 5)
    for round_index in range(3):
        expected = generator(7, Stream.PROTOCOL, 1, round_index).standard_exponential((40, 5))
        np.testing.assert_array_equal(coin.h(round_index), expected)
    assert stats.kstest(coin.h(3).ravel(), stats.expon.cdf).pvalue > KS_LEVEL
    assert not np.array_equal(PublicCoin(8, 40, 5).h(0), coin.h(0))


def test_the_public_coin_hands_out_one_read_only_matrix_per_iteration() -> None:
    coin = PublicCoin(7, 3, 2)
    first = coin.h(1)
    assert coin.h(1) is first
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 0.0
    second = coin.h(2)
    assert not np.array_equal(second, first)
    np.testing.assert_array_equal(coin.h(1), first)
    np.testing.assert_array_equal(PublicCoin(7, 3, 2).h(2), second)


def _ring_max_abs(bits: int, frac_bits: int) -> float:
    """(2^(bits-1) - 1) / 2^frac_bits, the largest positive fixed-point value, as a float not above it."""
    largest = 2 ** (bits - 1) - 1
    value = float(largest)
    if int(value) > largest:
        value = math.nextafter(value, 0.0)
    return value / 2.0**frac_bits


@pytest.mark.parametrize("bits", [32, 64])
def test_frac_bits_for_is_the_most_fractional_bits_whose_range_holds_the_bound(bits: int) -> None:
    top = bits - 2  # the ring needs a sign bit and one integer bit
    # Exactly at a ring's range, that ring holds it (|x| <= max_abs).
    assert frac_bits_for(bits, _ring_max_abs(bits, top)) == top
    assert frac_bits_for(bits, _ring_max_abs(bits, 1)) == 1
    assert frac_bits_for(bits, _ring_max_abs(bits, 7)) == 7
    # Tiny bounds: every fractional bit the ring may have.
    assert frac_bits_for(bits, 1e-9) == top
    # Just above a range: one bit fewer; above the 1-bit ring's range: none.
    assert frac_bits_for(bits, math.nextafter(_ring_max_abs(bits, 7), math.inf)) == 6
    assert frac_bits_for(bits, math.nextafter(_ring_max_abs(bits, 1), math.inf)) == 0
    # Between: floor(log2((2^(bits-1) - 1) / B)).
    for bound in (3.0, 1000.0, 2.5e5, 1e8):
        expected = min(top, math.floor(math.log2((2 ** (bits - 1) - 1) / bound)))
        assert frac_bits_for(bits, bound) == expected
        assert Ring(bits, expected).max_abs >= bound
        if expected < top:
            assert Ring(bits, expected + 1).max_abs < bound


def test_check_ring_accepts_a_ring_exactly_at_the_bound_and_names_the_rings_that_hold_a_larger_one() -> None:
    ring = Ring(32, 16)
    check_ring(ring, Headroom(_ring_max_abs(32, 16), 0.0, 0.0, 1.0), "protocol.ring_bits", "ctx")  # |x| <= max_abs fits
    # Just above: refused; 32-bit rings up to 15 fractional bits and 64-bit ones up to 48 hold it.
    with pytest.raises(fedrecsim.ConfigError) as raised:
        check_ring(ring, Headroom(math.nextafter(_ring_max_abs(32, 16), math.inf), 1.0, 2.0, 1.0), "protocol.frac_bits", "the figures")
    assert raised.value.key_path == "protocol.frac_bits"
    message = str(raised.value)
    assert "(exceeded with probability <= 1e-12 per aggregate; the figures)" in message
    assert message.endswith("; use ring_bits = 32 with frac_bits <= 15 or ring_bits = 64 with frac_bits <= 48")
    # Beyond a 32-bit ring with one fractional bit: only 64-bit rings.
    with pytest.raises(fedrecsim.ConfigError) as raised:
        check_ring(ring, Headroom(2.0**40, 1.0, 2.0, 1.0), "protocol.ring_bits", "ctx")
    assert str(raised.value).endswith("; use ring_bits = 64 with frac_bits <= 22")
    # Beyond every ring: the advice is to raise epsilon.
    with pytest.raises(fedrecsim.ConfigError) as raised:
        check_ring(Ring(64, 32), Headroom(1e19, 1.0, 2.0, 1.0), "protocol.ring_bits", "ctx")
    assert str(raised.value).endswith("; no 32- or 64-bit ring holds that; raise epsilon")


@pytest.mark.parametrize("scenario, weighted, terms, weight", [
    ("S2", False, 25, 1.0),  # S2: n_max gradient terms, eta once
    ("S3", True, 25, 25.0),  # S3 normalized: w <= n_max
    ("S3", False, 7, 1.0),  # S3 raw sums: min(K, n_max) terms
])
def test_aggregate_headroom_follows_its_formula(scenario: str, weighted: bool, terms: int, weight: float) -> None:
    b, d = 3.5, 6
    headroom = aggregate_headroom(
        scale=b, d=d, rating_range=(-10.0, 5.0), max_raters=25, max_users=7, weighted=weighted, scenario=scenario,
    )
    gradient = terms * 2 * (10.0 + 64.0)
    noise = (weight + 1) * b * math.log(2 * d / 1e-12)
    assert headroom.gradient_term == pytest.approx(gradient, rel=1e-12)
    assert headroom.noise_term == pytest.approx(noise, rel=1e-12)
    assert headroom.bound == pytest.approx(gradient + noise, rel=1e-12)
    assert headroom.weight_max == weight and headroom.tail == 1e-12 == TAIL_PROBABILITY
    assert ITEM_NORM_BOUND == 64.0


_TINY = {
    "run": {"protocol": "dpmf", "name": "tiny-dpmf-numerics", "seed": 5, "rounds": 2, "round_timeout_s": 10.0},
    "data": {"source": "synthetic", "users": 20, "items": 30, "ratings": 300},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "availability": {"model": "always"},
    "protocol": {"scenario": "S1", "d": 6, "epsilon": 0.8},
}


@pytest.mark.parametrize("noise", ["theorem1", "laplace"])
def test_s1_privacy_report_numbers_come_from_the_config(noise: str) -> None:
    scenario = copy.deepcopy(_TINY)
    scenario["protocol"]["noise"] = noise
    result = fedrecsim.run(scenario)
    privacy = result.result["privacy"]
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, 5)
    low, high = train.rating_range
    delta = high - low
    assert privacy["scenario"] == "S1"
    assert privacy["epsilon"] == 0.8
    assert privacy["sensitivity"] == delta
    assert privacy["laplace_scale"] == pytest.approx(2 * delta * math.sqrt(6) / 0.8, rel=1e-12)
    assert privacy["mechanism"] == ("theorem1" if noise == "theorem1" else "laplace (Lemma 1)")
    assert privacy["noise_construction"] == "central draw"
    assert privacy["user_profiles_in_unit_ball"] is True
    assert privacy["known_leaks"] == ["the trusted recommender holds every rating and U (the premise of S1)"]
    assert "eps_dp_against_recommender" not in privacy and "ring" not in privacy
    # eps is spent once, at the publication after the last round.
    spent = privacy["epsilon_spent"]
    assert spent["total"] == 0.8 and spent["at_round"] == 2
    assert spent["composition"].startswith("none") and spent["against"] == "whoever sees V without H"
    if noise == "theorem1":
        assert privacy["theorem1_norm_gamma"] == {"shape": 6, "scale": pytest.approx(2 * delta / 0.8, rel=1e-12)}
    else:
        assert "theorem1_norm_gamma" not in privacy


_H_LEAK_WORDS = ("Gaussian", "eps-DP against the recommender does not hold")


@pytest.mark.parametrize("protocol, construction", [
    ({"scenario": "S2"}, "Theorem 2 pieces (eq. (12))"),
    # K does not bound S2's gradient terms: every set-up user is served.
    ({"scenario": "S2", "variant": "naive", "max_users": 3}, "Theorem 2 pieces (eq. (12))"),
    ({"scenario": "S3", "k_presharing": 4, "max_users": 12}, "weighted"),
    # S3 with raw sums is the paper's literal S3: S2's construction, unweighted; min(K, n_max) gradient terms.
    ({"scenario": "S3", "k_presharing": 4, "max_users": 3, "normalize": False}, "Theorem 2 pieces (eq. (12))"),
])
def test_s2_s3_privacy_and_ring_reports_come_from_the_config_and_the_headroom_formula(protocol: dict, construction: str) -> None:
    scenario = copy.deepcopy(_TINY)
    scenario["protocol"].update(protocol)
    scenario["run"]["rounds"] = 2
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, 5)
    low, high = train.rating_range
    delta, d, epsilon = high - low, 6, 0.8
    privacy = fedrecsim.run(scenario).result["privacy"]
    b = 2 * delta * math.sqrt(d) / epsilon
    assert privacy["scenario"] == protocol["scenario"] and privacy["epsilon"] == epsilon and privacy["sensitivity"] == delta
    assert privacy["laplace_scale"] == pytest.approx(b, rel=1e-12)
    assert privacy["mechanism"] == "laplace (Lemma 1)" and "theorem1_norm_gamma" not in privacy
    if construction == "weighted":
        assert privacy["noise_construction"].startswith("Theorem 2 pieces (eq. (12)); users weight grad + rho~ by k_j / k'_j")
    else:
        assert privacy["noise_construction"] == construction
    assert privacy["eps_dp_against_recommender"] is False
    leaks = privacy["known_leaks"]
    assert len(leaks) == (4 if protocol.get("variant") == "naive" else 3)
    assert "rated-item set" in leaks[0] and "rated-item set" in leaks[1] and all(word in leaks[2] for word in _H_LEAK_WORDS)
    if protocol.get("variant") == "naive":
        assert leaks[3].startswith("naive variant: per-user gradients reach the recommender unmasked")
    # eps is spent once, when eta is fixed before iteration 1.
    spent = privacy["epsilon_spent"]
    assert spent["total"] == epsilon and spent["at_round"] == 0
    assert spent["against"] == "whoever sees V without H; not the recommender (known_leaks)"
    # The ring: the default 64-bit ring with 32 fractional bits, and the bound B of `headroom`'s docstring.
    n_max = int(np.bincount(train.items).max())
    weighted = protocol["scenario"] == "S3" and protocol.get("normalize", True)
    weight_max = float(n_max) if weighted else 1.0
    terms = min(protocol["max_users"], n_max) if protocol["scenario"] == "S3" and not weighted else n_max
    gradient = terms * 2 * (max(abs(low), abs(high)) + 64.0)
    noise = (weight_max + 1) * b * math.log(2 * d / 1e-12)
    ring = privacy["ring"]
    assert ring == {
        "bits": 64, "frac_bits": 32, "frac_bits_from": "default for a 64-bit ring", "max_abs": _ring_max_abs(64, 32),
        "needed_abs": pytest.approx(gradient + noise, rel=1e-12),
        "tail_probability_per_aggregate": 1e-12,
        "noise_term": pytest.approx(noise, rel=1e-12),
        "gradient_term": pytest.approx(gradient, rel=1e-12),
        "item_norm_bound": 64.0,
        "weight_max": weight_max,
    }


@pytest.mark.parametrize("ring, key", [({"ring_bits": 32}, "protocol.ring_bits"), ({"ring_bits": 32, "frac_bits": 16}, "protocol.frac_bits")])
def test_a_ring_below_the_headroom_is_refused_naming_the_key_the_user_set(ring: dict, key: str) -> None:
    scenario = copy.deepcopy(_TINY)
    scenario["protocol"].update({"scenario": "S2", "epsilon": 0.01, **ring})
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, 5)
    low, high = train.rating_range
    b = 2 * (high - low) * math.sqrt(6) / 0.01
    n_max = int(np.bincount(train.items).max())
    bound = n_max * 2 * (max(abs(low), abs(high)) + 64.0) + 2 * b * math.log(12 / 1e-12)
    assert bound > _ring_max_abs(32, 16)
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as raised:
        fedrecsim.run(scenario)
    error = raised.value
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    assert isinstance(error, fedrecsim.ConfigError) and error.key_path == key
    message = str(error)
    assert f"eps = 0.01, Delta = {high - low:g}, d = 6, K = 100, weight <= 1" in message
    assert f"ring_bits = 32 with frac_bits <= {frac_bits_for(32, bound)}" in message


def _first_per_party(transcript: list, kind: str, party_of) -> dict:  # type: ignore[no-untyped-def]
    """The sizes of each party's messages of ``kind``, in delivery order."""
    sizes: dict = {}
    for row in transcript:
        if row.kind == kind:
            sizes.setdefault(party_of(row), []).append(row.nbytes)
    return sizes


def test_s2_round_rows_count_the_served_and_their_bytes_from_the_transcript() -> None:
    """Always online, no loss: every rater is served and contributes each round; the bytes are the messages'."""
    scenario = copy.deepcopy(_TINY)
    scenario["protocol"]["scenario"] = "S2"
    scenario["run"]["rounds"] = 3
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, 5)
    result = fedrecsim.run(scenario, transcript=True)
    raters = int((np.bincount(train.users, minlength=train.n_users) > 0).sum())
    rated_items = int(np.unique(train.items).size)
    transcript = result.ledger.transcript
    vectors = _first_per_party(transcript, "dpmf.item_vectors", lambda row: row.dst)
    contributions = _first_per_party(transcript, "dpmf.contribution", lambda row: row.src)
    requests = _first_per_party(transcript, "dpmf.item_request", lambda row: row.src)
    aggregates = [row.nbytes for row in transcript if row.kind == "dpmf.aggregate"]
    assert len(vectors) == len(contributions) == raters and len(aggregates) == 3
    # Explicit masks (the default, the paper's): each user's item vectors come with a ring mask per element,
    # so a user downloads at least two 8-byte words per element of its rated items' vectors.
    rated_by = np.bincount(train.users, minlength=train.n_users)
    for party, sizes in vectors.items():
        assert min(sizes) >= 2 * 8 * 6 * rated_by[party.index]
    for r, row in enumerate(result.rounds):
        assert {key: row[key] for key in ("round", "selected", "participants", "missing", "items_updated", "eta_skipped")} == {
            "round": r + 1, "selected": raters, "participants": raters, "missing": 0, "items_updated": rated_items, "eta_skipped": 0,
        }
        # A served user receives its item vectors and sends its contribution and its next item request.
        assert row["user_down_max_b"] == max(sizes[r] for sizes in vectors.values())
        assert row["user_up_max_b"] == max(contributions[party][r] + requests[party][r + 1] for party in contributions)
        assert row["tp_sent_b"] == aggregates[r]
    # S2 has no communication figures, only the accuracy claim (`claims`, tested in test_dpmf_claims.py).
    assert [figure["unit"] for figure in result.result["paper_figures"]] == ["rating", "rating"]
    assert [len(served) for served in result.outcome.state["contributors"]] == [raters] * 3


def _s3_with_churn() -> dict:
    """S3 with churn, slow links against a 2 s round and one pre-sharing attempt per item: users go missing
    and some items are skipped until their eta_j is whole."""
    scenario = copy.deepcopy(_TINY)
    scenario["run"].update({"rounds": 4, "round_timeout_s": 2.0})
    scenario["network"] = {"latency": {"model": "lognormal", "median_s": 0.4, "sigma": 1.0}}
    scenario["availability"] = {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.6}
    scenario["protocol"].update({
        "scenario": "S3", "max_users": 8, "k_presharing": 4, "sharers": "per_item", "presharing_attempts": 1, "frac_bits": 24,
    })
    return scenario


def test_s3_communication_figures_are_the_worst_iteration_beside_the_paper_claims() -> None:
    """`_s3_with_churn`: users go missing and some items are skipped until their eta_j is whole."""
    scenario = _s3_with_churn()
    result = fedrecsim.run(scenario)
    rows = result.rounds
    for row in rows:
        assert row["selected"] <= 8 and row["missing"] == row["selected"] - row["participants"]
    contributors = result.outcome.state["contributors"]
    assert [row["participants"] for row in rows] == [len(served) for served in contributors]
    assert sum(row["missing"] for row in rows) > 0
    # Of the items the contributors rated, those whose eta_j is not whole yet are skipped, the rest updated.
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, 5)
    for row, served in zip(rows, contributors):
        rated = np.unique(train.items[np.isin(train.users, served)]).size
        assert row["items_updated"] + row["eta_skipped"] == rated
    assert sum(row["eta_skipped"] for row in rows) > 0
    setting = "ring Z_2^64 with 24 fractional bits, explicit masks"
    # The communication figures; the accuracy claim's follow them (`claims`, tested in test_dpmf_claims.py).
    figures = [figure for figure in result.result["paper_figures"] if figure["unit"] == "B"]
    # The heaviest served user (beside the paper's population) and the third party's worst iteration are
    # the maxima over the iterations.
    assert [(figure["heaviest"], figure["unit"], figure["setting"]) for figure in figures[:2]] == [
        (max(row[name] for row in rows), "B", setting) for name in ("user_down_max_b", "user_up_max_b")
    ]
    assert (figures[2]["measured_max"], figures[2]["setting"]) == (
        max(row["tp_sent_b"] for row in rows), f"{setting}; up to {max(row['selected'] for row in rows)} served users per iteration"
    )
    assert figures[2]["measured"] == pytest.approx(sum(row["tp_sent_b"] for row in rows) / len(rows))
    assert [figure["paper"] for figure in figures] == [
        "at most 12 KB for a user with at most 20 rated items (32-bit values)",
        "at most 5 KB to the third party for a user with at most 20 rated items (32-bit values)",
        "under 3 MB for 1,000 online users over at most 10,000 items (32-bit values)",
    ]
    assert [figure["quantity"] for figure in figures] == [
        "user download per iteration (all it received)",
        "user upload per iteration (its contribution to the third party and its item request to the recommender)",
        "third party to recommender per iteration",
    ]
    # The worst iteration is neither the first nor the last: the figures take the maximum.
    assert rows[0]["tp_sent_b"] < figures[2]["measured_max"] > rows[-1]["tp_sent_b"]


def test_the_summary_says_which_window_each_user_figure_counts_so_a_larger_largest_is_no_contradiction() -> None:
    """The paper's population is counted over the whole round and the heaviest user only until the aggregate:
    with churn and pre-sharing a user of at most 20 items can exceed the heaviest, and the printed text must
    say why (a user read "largest 992 B" beside "heaviest served user 965 B" as a contradiction)."""
    result = fedrecsim.run(_s3_with_churn())
    figures = [figure for figure in result.result["paper_figures"] if figure["unit"] == "B"][:2]
    # The case the wording is for: every user has at most 20 items, yet the largest exceeds the heaviest.
    assert result.outcome.state["user_factors"].shape[0] == 20 and all(figure["population_size"] for figure in figures)
    assert all(figure["measured_max"] > figure["heaviest"] for figure in figures)
    lines = summary_text(result).splitlines()
    for figure in figures:
        at = lines.index(f"  {figure['quantity']}")
        population, largest, heaviest = lines[at + 2], lines[at + 3], lines[at + 4]
        assert "each counted over its whole round until the next round starts" in population
        assert f"largest {figure['measured_max']:,.0f} B" in largest
        assert heaviest.endswith(f": {figure['heaviest']:,.0f} B ({figure['heaviest'] / 1024:,.1f} KiB)")
        assert "from its serving until the aggregate arrived" in heaviest
        assert "the largest above counts the whole round" in heaviest and "so it can be larger" in heaviest


def test_s3_rounds_with_nobody_online_serve_nobody_and_count_zero_bytes_for_users() -> None:
    scenario = copy.deepcopy(_TINY)
    scenario["protocol"].update({"scenario": "S3", "max_users": 8, "k_presharing": 4})
    scenario["availability"] = {"model": "bernoulli", "p_join": 0.0, "p_leave": 0.0, "initial_online": 0.0}
    result = fedrecsim.run(scenario, transcript=True)
    aggregates = [row.nbytes for row in result.ledger.transcript if row.kind == "dpmf.aggregate"]
    assert len(aggregates) == 2
    for r, row in enumerate(result.rounds):
        assert {key: row[key] for key in ("round", "selected", "participants", "missing", "items_updated", "eta_skipped")} == {
            "round": r + 1, "selected": 0, "participants": 0, "missing": 0, "items_updated": 0, "eta_skipped": 0,
        }
        assert (row["user_down_max_b"], row["user_up_max_b"], row["tp_sent_b"]) == (0.0, 0.0, aggregates[r])
    assert result.result["privacy"]["eta"]["items_noised"] == 0


def test_a_round_without_the_third_partys_aggregate_counts_every_served_user_missing() -> None:
    """The third party crashes before its round-2 aggregate: rounds 2 and 3 update nothing."""
    scenario = copy.deepcopy(_TINY)
    scenario["protocol"]["scenario"] = "S2"
    scenario["run"]["rounds"] = 3
    scenario["faults"] = {"crash": [{"party": "third_party:0", "kind": "dpmf.aggregate", "round": 2}]}
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, 5)
    raters = int((np.bincount(train.users, minlength=train.n_users) > 0).sum())
    rows = fedrecsim.run(scenario).rounds
    counted = [{key: row[key] for key in ("selected", "participants", "missing", "items_updated", "eta_skipped", "tp_sent_b")} for row in rows]
    assert counted[0]["participants"] == raters and counted[0]["items_updated"] == np.unique(train.items).size
    for row in counted[1:]:
        assert row == {"selected": raters, "participants": 0, "missing": raters, "items_updated": 0, "eta_skipped": 0, "tp_sent_b": 0.0}
