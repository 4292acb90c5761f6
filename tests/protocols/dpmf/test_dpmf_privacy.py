"""What each party sees: the third party's view is uniform, the recommender's holds no per-user value,
the difference attack works on the naive variant only, and the noise the parties build is Laplace."""

from __future__ import annotations

import numpy as np
from scipy import stats

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.mechanisms import Ring
from fedrecsim.models.mf import MFHyper, user_step
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.protocols.dpmf.central import project_unit_ball
from fedrecsim.protocols.dpmf.ringops import from_words

D = 6
RING = Ring(64, 32)


def _top_bits_chi2(elements: np.ndarray, bits: int = 4) -> float:
    """p-value of a chi-square test that the top ``bits`` bits of 64-bit ring elements are uniform."""
    counts = np.bincount((elements.ravel() >> np.uint64(64 - bits)).astype(np.int64), minlength=2**bits)
    return float(stats.chisquare(counts).pvalue)


def test_everything_the_third_party_receives_is_uniform(tiny_s3_churn) -> None:
    result = fedrecsim.run(tiny_s3_churn, record_views=[THIRD_PARTY])
    view = result.views[THIRD_PARTY]
    kinds = {envelope.kind for envelope in view}
    assert kinds == {"dpmf.roster", "dpmf.presharing_share", "dpmf.contribution"}
    masked = [
        from_words(RING, envelope.body.phi if envelope.kind == "dpmf.contribution" else envelope.body.tau, D, "view")
        for envelope in view if envelope.kind != "dpmf.roster"
    ]
    elements = np.concatenate(masked)
    assert elements.size > 5000
    # Fixed seed; uniform values fail this 16-bin test at 1e-3 with probability 1e-3.
    assert _top_bits_chi2(elements) > 1e-3
    # The same test rejects the unmasked sums (gradients and noise near zero), so it can fail.
    plain = np.concatenate([RING.encode(sums)[0] for _, _, sums, _ in result.outcome.state["recent_aggregates"]])
    assert plain.size > 300 and _top_bits_chi2(plain) < 1e-6


def test_the_recommender_sees_item_sets_and_per_item_sums_only(tiny_s3_churn) -> None:
    result = fedrecsim.run(tiny_s3_churn, record_views=[SERVER])
    view = result.views[SERVER]
    from_users = {envelope.kind for envelope in view if envelope.src.role is Role.USER}
    assert from_users <= {"dpmf.item_request", "core.join", "core.leave"}
    sums = [envelope for envelope in view if envelope.kind in ("dpmf.aggregate", "dpmf.presharing_aggregate")]
    assert sums and all(envelope.src == THIRD_PARTY for envelope in sums)
    # The known leak: each requesting user's rated-item set, exactly.
    train, _ = prepare_data(fedrecsim.parse_scenario(tiny_s3_churn).data, tiny_s3_churn["run"]["seed"])
    requests = {envelope.src: envelope.body.items for envelope in view if envelope.kind == "dpmf.item_request"}
    assert requests
    for party, items in requests.items():
        np.testing.assert_array_equal(items, train.user_items(party.index))
    assert any("rated-item set" in leak for leak in result.result["privacy"]["known_leaks"])


def _replayed_gradients(result: fedrecsim.RunResult, party: Party, ratings: np.ndarray) -> dict[int, np.ndarray]:
    """The gradient rows a user computed in each round, recomputed from what it received."""
    u = result.outcome.state["initial_user_factors"][party.index].copy()
    gradients = {}
    for envelope in result.views[party]:
        if envelope.kind != "dpmf.item_vectors":
            continue
        vectors = RING.decode(from_words(RING, envelope.body.vectors, D, "view"))
        new_u, gradients[envelope.body.round] = user_step(u, vectors, ratings, MFHyper(d=D))
        u = project_unit_ball(new_u)
    return gradients


def test_the_difference_attack_recovers_gradients_from_the_naive_variant_only(tiny_dpmf) -> None:
    tiny_dpmf["run"]["rounds"] = 2
    parties = [Party(Role.USER, index) for index in range(30)]
    train, _ = prepare_data(fedrecsim.parse_scenario(tiny_dpmf).data, tiny_dpmf["run"]["seed"])
    true = {}

    # Naive: the recommender holds grad + eta-piece per user; eq. (11) cancels the piece exactly.
    tiny_dpmf["protocol"]["variant"] = "naive"
    naive = fedrecsim.run(tiny_dpmf, record_views=[SERVER, *parties])
    for party in parties:
        true[party] = _replayed_gradients(naive, party, train.user_ratings(party.index)[1])
        sent = {
            envelope.sent_at: from_words(RING, envelope.body.values, D, "view")
            for envelope in naive.views[SERVER] if envelope.kind == "dpmf.naive_contribution" and envelope.src == party
        }
        first, second = (sent[time] for time in sorted(sent))
        difference = RING.sub(second, first)
        expected = RING.sub(RING.encode(true[party][2])[0], RING.encode(true[party][1])[0])
        np.testing.assert_array_equal(difference, expected)

    # Protected: the recommender's own unmasked per-item sums, differenced, are off by rho~(2) - rho~(1).
    tiny_dpmf["protocol"]["variant"] = "protected"
    protected = fedrecsim.run(tiny_dpmf, record_views=parties)
    (round_1, items_1, sums_1, _), (round_2, items_2, sums_2, _) = protected.outcome.state["recent_aggregates"]
    assert (round_1, round_2) == (1, 2) and np.array_equal(items_1, items_2)
    gradient_sums = {t: np.zeros((train.n_items, D)) for t in (1, 2)}
    for party in parties:
        replayed = _replayed_gradients(protected, party, train.user_ratings(party.index)[1])
        for t in (1, 2):
            gradient_sums[t][train.user_items(party.index)] += replayed[t]
    residual = (sums_2 - sums_1) - (gradient_sums[2][items_1] - gradient_sums[1][items_1])
    scale = protected.result["privacy"]["laplace_scale"]
    # rho~(2) - rho~(1): a difference of two independent Laplace(b), standard deviation 2b.
    assert 1.4 * scale < residual.std() < 2.6 * scale


def test_the_noise_the_parties_build_is_laplace_of_lemma_1(tiny_dpmf) -> None:
    """Theorem 2 at the protocol level: eta_j of S2 and S3, and rho~_j(t), as they sit in the aggregates.

    The scale is 2 Delta sqrt(d) / eps with Delta the scenario's rating range, computed here -- never the
    run's own reported scale. S3 serves K = 20 of 60 users, so k'_j < k_j for most items: rho~ must be
    drawn for the k'_j users really served.
    """
    tiny_dpmf["data"] = {"source": "synthetic", "users": 60, "items": 150, "ratings": 2400}
    tiny_dpmf["run"]["rounds"] = 1
    tiny_dpmf["protocol"]["max_users"] = 20
    train, _ = prepare_data(fedrecsim.parse_scenario(tiny_dpmf).data, tiny_dpmf["run"]["seed"])
    low, high = train.rating_range
    assert high - low == 4.0, "the synthetic ratings are on a 1..5 scale"
    scale = 2.0 * (high - low) * np.sqrt(D) / tiny_dpmf["protocol"]["epsilon"]
    rated = train.item_counts() > 0
    for scenario in ("S2", "S3"):
        tiny_dpmf["protocol"]["scenario"] = scenario
        result = fedrecsim.run(tiny_dpmf)
        state = result.outcome.state
        # S2: the sum of every rater's piece; S3: tau^ - alpha, pre-shared by k = 10 users per item.
        eta = state["eta"][rated] if scenario == "S2" else state["eta"]
        assert eta.size >= 800
        # Fixed seeds; KS at 1e-3 rejects a true Laplace(0, b) sample with probability 1e-3.
        assert stats.kstest(eta.ravel(), stats.laplace(scale=scale).cdf).pvalue > 1e-3, scenario
        rho_items, rho = state["rho_last"]
        assert rho.size >= 300
        if scenario == "S3":
            served = np.isin(train.users, state["contributors"][0])
            served_raters = np.bincount(train.items[served], minlength=train.n_items)[rho_items]
            assert np.mean(served_raters < train.item_counts()[rho_items]) > 0.8, "k'_j < k_j for most items"
        assert stats.kstest(rho.ravel(), stats.laplace(scale=scale).cdf).pvalue > 1e-3, scenario
        # The tests have power: the same samples are not Laplace of 1.5 times the scale.
        assert stats.kstest(rho.ravel(), stats.laplace(scale=1.5 * scale).cdf).pvalue < 1e-3, scenario
        assert stats.kstest(eta.ravel(), stats.laplace(scale=1.5 * scale).cdf).pvalue < 1e-3, scenario


def test_the_third_party_view_of_s2_is_uniform_and_unmasked_values_are_not(tiny_dpmf, monkeypatch) -> None:
    """S2: every contribution the third party receives is uniform in the ring; with psi = 0 it is not."""
    tiny_dpmf["run"]["rounds"] = 4

    def top_bits_p(result: fedrecsim.RunResult) -> float:
        view = [envelope for envelope in result.views[THIRD_PARTY] if envelope.kind == "dpmf.contribution"]
        elements = np.concatenate([from_words(RING, envelope.body.phi, D, "view") for envelope in view])
        assert elements.size > 5000
        return _top_bits_chi2(elements)

    # Fixed seed; uniform values fail this 16-bin test at 1e-3 with probability 1e-3.
    assert top_bits_p(fedrecsim.run(tiny_dpmf, record_views=[THIRD_PARTY])) > 1e-3
    # The control: psi = 0 (in S2 the recommender's masks are the only uniform ring draws) must be rejected.
    monkeypatch.setattr(Ring, "uniform", lambda self, rng, shape: np.zeros(shape, dtype=self.dtype))
    assert top_bits_p(fedrecsim.run(tiny_dpmf, record_views=[THIRD_PARTY])) < 1e-6


def test_the_privacy_report_says_the_recommender_knows_h(tiny_dpmf) -> None:
    for scenario in ("S1", "S2", "S3"):
        tiny_dpmf["protocol"]["scenario"] = scenario
        privacy = fedrecsim.run(tiny_dpmf).result["privacy"]
        leaks = [leak for leak in privacy["known_leaks"] if "H_j" in leak]
        if scenario == "S1":
            assert not leaks
            continue
        assert any("rated-item set" in leak for leak in privacy["known_leaks"])
        (leak,) = leaks
        assert "Gaussian" in leak and "eps-DP against the recommender does not hold" in leak
        assert privacy["eps_dp_against_recommender"] is False
