"""Ribero et al.'s protocol piece by piece: the budget split and privacy report against the fractions
they are defined by, the two messages on the wire, the pipeline's pure functions, the silo and server
roles on a small hand-built network, and the driver's helpers (config, bounds, the factor model)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.sparse as sp
import trio

from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError, ProtocolViolation, WireError
from fedrecsim.mechanisms.private_kmeans import PrototypeBudget, PrototypeParams
from fedrecsim.models.nmf import NMFHyper, nmf_dense, nnls_users, observed_matrix
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import decode, encode
from fedrecsim.protocols.prototypes import pipeline
from fedrecsim.protocols.prototypes.accounting import budget_split, privacy_report
from fedrecsim.protocols.prototypes.messages import ItemFactors, Prototypes
from fedrecsim.protocols.prototypes.pipeline import (
    SiloData,
    item_factors,
    projection_dim,
    silo_data,
    silo_prototypes,
    user_factors,
)
from fedrecsim.protocols.prototypes.protocol import (
    FactorModel,
    PrototypesConfig,
    evaluate,
    PublicBounds,
    prototype_bound,
    public_bounds,
    shared_item_model,
    silo_params,
)
from fedrecsim.protocols.prototypes.roles import PrototypeServer, PrototypeSilo
from fedrecsim.scenario import DataConfig


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


# ------------------------------------------------------------------ accounting


@pytest.mark.parametrize("trials", [1, 2, 5])
def test_the_split_gives_each_part_its_fraction_and_the_recovery_the_rest(trials) -> None:
    budget = budget_split(2.0, trials, 0.1, 0.2, 0.3, 0.5, 0.3)
    selection = 0.6 if trials > 1 else 0.0
    assert budget.candidates == pytest.approx(0.2, rel=1e-15)
    assert budget.localswap == pytest.approx(0.4, rel=1e-15)
    assert budget.selection == pytest.approx(selection, rel=1e-15)
    assert budget.recovery == pytest.approx(2.0 - 0.2 - 0.4 - selection, rel=1e-15)
    assert (budget.support_share, budget.values_share) == (0.5, 0.3)
    total = budget.candidates + budget.localswap + budget.recovery + budget.selection
    assert total == pytest.approx(2.0, rel=1e-15)


def test_with_one_trial_the_selection_fraction_is_ignored_entirely() -> None:
    # 0.4 + 0.4 + 0.5 >= 1 would be refused with several trials.
    budget = budget_split(1.0, 1, 0.4, 0.4, 0.5, 0.45, 0.45)
    assert budget.selection == 0.0 and budget.recovery == pytest.approx(0.2)
    with pytest.raises(ConfigError, match="budget_selection"):
        budget_split(1.0, 2, 0.4, 0.4, 0.5, 0.45, 0.45)


@pytest.mark.parametrize(
    ("trials", "fractions", "message"),
    [
        (1, (0.5, 0.5, 0.1), "budget_candidates + budget_localswap = 1 leaves nothing for the sparse recovery; "
                             "they must add up to less than 1"),
        (2, (0.25, 0.25, 0.5), "budget_candidates + budget_localswap + budget_selection = 1 leaves nothing for the "
                               "sparse recovery; they must add up to less than 1"),
        (3, (0.5, 0.3, 0.7), "budget_candidates + budget_localswap + budget_selection = 1.5 leaves nothing for the "
                             "sparse recovery; they must add up to less than 1"),
    ],
)
def test_a_split_leaving_the_recovery_nothing_names_the_key_and_the_sum(trials, fractions, message) -> None:
    with pytest.raises(ConfigError, match=exactly(f"protocol.budget_candidates: {message}")):
        budget_split(1.0, trials, *fractions, 0.45, 0.45)


def test_recovery_shares_leaving_the_sizes_nothing_name_the_key() -> None:
    message = ("protocol.recovery_support: recovery_support + recovery_values = 1 leaves nothing for the cluster "
               "sizes; they must add up to less than 1")
    with pytest.raises(ConfigError, match=exactly(message)):
        budget_split(1.0, 1, 0.1, 0.1, 0.1, 0.75, 0.25)
    budget_split(1.0, 1, 0.1, 0.1, 0.1, 0.75, 0.24)  # just below: accepted


def test_the_privacy_report_splits_epsilon_into_its_parts() -> None:
    budget = PrototypeBudget(candidates=0.5, localswap=0.25, recovery=2.0, selection=0.25, support_share=0.5,
                             values_share=0.25)
    params = PrototypeParams(k=4, s=9, bound=2.0, projection_dim=3, trials=2, grids=5, swap_steps=7)
    report = privacy_report(3.0, budget, params, 6)
    assert report["epsilon"] == 3.0 and report["delta"] == 0.0
    assert report["split"] == {
        "candidates": 0.5, "localswap": 0.25, "recovery_support": 1.0, "recovery_values": 0.5,
        "recovery_sizes": 0.5, "selection": 0.25,
    }
    assert report["split_total"] == 3.0 == sum(report["split"].values())
    assert report["constants"] == {
        "k": 4, "support": 9, "value_bound": 2.0, "radius": 6.0, "projection_dim": 3, "trials": 2,
        "grids_per_trial": 5, "swap_steps_per_trial": 7,
    }
    assert "6 silos" in report["composition"] and "parallel" in report["composition"]
    assert "replaced" in report["neighbouring"] and "Alg. 2-3" in report["mechanism"]


# ------------------------------------------------------------------ messages


SILO = Party(Role.SILO, 0)


def test_both_messages_cross_the_wire_unchanged() -> None:
    prototypes = np.array([[1.5, -0.25, 0.0], [0.0, 3.0, -1.0]])  # noise may make entries negative
    envelope = decode(encode(SILO, SERVER, 1.0, Prototypes(prototypes)))
    assert envelope.kind == "prototypes.prototypes" and envelope.src == SILO
    np.testing.assert_array_equal(envelope.body.prototypes, prototypes)
    V = np.array([[0.0, 1.0], [2.5, 0.0], [0.0, 0.0]])
    envelope = decode(encode(SERVER, SILO, 2.0, ItemFactors(V)))
    assert envelope.kind == "prototypes.item_factors"
    np.testing.assert_array_equal(envelope.body.item_factors, V)
    decode(encode(SERVER, SILO, 2.0, ItemFactors(np.zeros((0, 0)))))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (Prototypes(np.array([[1.0, np.nan]])), "prototypes.prototypes.prototypes: encode: array holds NaN or Inf"),
        (Prototypes(np.array([[np.inf]])), "prototypes.prototypes.prototypes: encode: array holds NaN or Inf"),
        (Prototypes(np.zeros(3)), "prototypes.prototypes.prototypes: encode: expected 2 dimensions, got shape (3,)"),
        (ItemFactors(np.zeros((2, 2, 1))),
         "prototypes.item_factors.item_factors: encode: expected 2 dimensions, got shape (2, 2, 1)"),
        (ItemFactors(np.array([[1.0, -1e-9]])),
         "prototypes.item_factors: item factors of a non-negative factorization must be non-negative"),
    ],
)
def test_malformed_messages_are_refused_naming_the_field(body, message) -> None:
    with pytest.raises(WireError, match=exactly(message)):
        encode(SERVER, SILO, 0.0, body)


# ------------------------------------------------------------------ pipeline


def _train() -> Ratings:
    users = np.array([0, 0, 1, 2, 2, 3, 4, 4, 4])
    items = np.array([0, 3, 1, 2, 3, 0, 1, 2, 4])
    values = np.array([5.0, 0.0, 3.0, 1.0, 2.0, 4.0, 0.0, 2.0, 5.0])
    return Ratings(users, items, values, 5, 5, (0.0, 5.0))


def test_silo_data_groups_users_by_ascending_label_with_their_rows() -> None:
    train = _train()
    labels = np.array([7, 2, 7, 2, 7])
    silos = silo_data(train, labels)
    assert [silo.label for silo in silos] == [2, 7]
    np.testing.assert_array_equal(silos[0].users, [1, 3])
    np.testing.assert_array_equal(silos[1].users, [0, 2, 4])
    full = observed_matrix(train.users, train.items, train.values, (5, 5))
    for silo in silos:
        assert silo.rows.shape == (silo.users.size, 5)
        np.testing.assert_array_equal(silo.rows.toarray(), full[silo.users].toarray())
    assert silos[1].rows.nnz == 7  # the observed zeros of users 0 and 4 are kept
    assert isinstance(silos[0].label, int)


@pytest.mark.parametrize(
    ("configured", "m", "expected"),
    [(3, 10, 3), (16, 1, 16), (0, 0, 1), (0, 1, 1), (0, 7, 1), (0, 8, 1), (0, 54, 1), (0, 55, 2), (0, 403, 2), (0, 404, 3), (0, 10**15, 16)],
)
def test_projection_dimension_is_the_configured_one_or_half_ln_m(configured, m, expected) -> None:
    if not configured and m > 1:
        assert expected == min(16, max(1, math.floor(0.5 * math.log(m))))
    assert projection_dim(configured, m) == expected


def test_silo_prototypes_truncate_the_rows_before_algorithm_two(monkeypatch) -> None:
    seen = []

    def spy(rng, X, params, budget):
        seen.append(X)
        return "result"

    monkeypatch.setattr(pipeline, "private_prototypes", spy)
    rows = sp.csr_matrix(np.array([[9.0, 1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 7.0, 0.0, 0.0]]))
    params = PrototypeParams(k=1, s=2, bound=5.0, projection_dim=1, trials=1, grids=1, swap_steps=1)
    assert silo_prototypes(np.random.default_rng(0), rows, params, PrototypeBudget(1, 1, 1, 0)) == "result"
    (X,) = seen
    assert np.diff(X.indptr).tolist() == [2, 1]
    assert X.data.max() <= 5.0 and X.toarray()[1, 2] == 5.0
    assert rows.toarray()[0, 0] == 9.0  # the silo's own rows are untouched


def test_item_factors_clip_negative_prototypes_and_factorize_the_stack() -> None:
    first = np.array([[1.0, -2.0, 3.0], [0.5, 0.5, -0.1]])
    second = np.array([[-1.0, 4.0, 0.0]])
    hyper = NMFHyper(rank=2, lam=0.1, iterations=20)
    V = item_factors(np.random.default_rng(5), [first, second], hyper)
    stacked = np.array([[1.0, 0.0, 3.0], [0.5, 0.5, 0.0], [0.0, 4.0, 0.0]])
    _, expected = nmf_dense(np.random.default_rng(5), stacked, hyper)
    np.testing.assert_array_equal(V, expected)
    assert V.shape == (3, 2) and V.min() >= 0


def test_user_factors_are_the_per_user_nnls() -> None:
    rows = observed_matrix(np.array([0, 0, 1]), np.array([0, 2, 1]), np.array([3.0, 1.0, 2.0]), (2, 3))
    V = np.array([[1.0, 0.5], [0.2, 1.0], [0.3, 0.3]])
    np.testing.assert_array_equal(user_factors(rows, V, 0.7), nnls_users(rows, V, 0.7))


# ------------------------------------------------------------------ roles


def _network() -> Network:
    return Network(Links(0, LinkSpec(Constant(0.01))), Ledger())


PARAMS = PrototypeParams(k=2, s=3, bound=5.0, projection_dim=1, trials=1, grids=1, swap_steps=2)
BUDGET = budget_split(1.0, 1, 0.125, 0.125, 0.25, 0.45, 0.45)
HYPER = NMFHyper(rank=2, lam=0.1, iterations=10)


def _silo(network: Network, index: int, seed: int, n_items: int = 6) -> PrototypeSilo:
    rng = np.random.default_rng(seed)
    rows = sp.csr_matrix(rng.integers(0, 6, size=(8, n_items)).astype(float))
    data = SiloData(index, np.arange(8) + 8 * index, rows)
    party = Party(Role.SILO, index)
    network.attach(party)
    return PrototypeSilo(party, network, np.random.default_rng(100 + seed), data, PARAMS, BUDGET, 0.3)


async def test_two_rounds_silos_send_prototypes_and_fit_to_the_broadcast_v(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    silos = [_silo(network, index, index) for index in range(3)]
    server = PrototypeServer(SERVER, network, np.random.default_rng(7), HYPER)
    parties = [silo.party for silo in silos]
    async with network.open():
        results = [silo.send_prototypes() for silo in silos]
        for silo, result in zip(silos, results, strict=True):
            assert silo.result is result and result.prototypes.shape == (2, 6)
            assert np.all(np.count_nonzero(result.prototypes, axis=1) == 3)
        assert await server.learn(parties, trio.current_time() + 5.0) == []
        assert list(server.received) == parties
        for silo, party in zip(silos, parties, strict=True):
            np.testing.assert_array_equal(server.received[party], silo.result.prototypes)
        expected = item_factors(np.random.default_rng(7), [silo.result.prototypes for silo in silos], HYPER)
        np.testing.assert_array_equal(server.item_factors, expected)
        server.broadcast(parties)
        deadline = trio.current_time() + 5.0
        for silo in silos:
            assert silo.user_factors is None
            assert await silo.fit(deadline)
            np.testing.assert_array_equal(silo.user_factors, nnls_users(silo.data.rows, expected, 0.3))


async def test_a_silo_that_sends_nothing_is_missing_and_left_out_of_v(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    silos = [_silo(network, index, index) for index in range(3)]
    server = PrototypeServer(SERVER, network, np.random.default_rng(8), HYPER)
    async with network.open():
        silos[0].send_prototypes()
        silos[2].send_prototypes()
        start = trio.current_time()
        missing = await server.learn([silo.party for silo in silos], start + 3.0)
        assert missing == [silos[1].party]
        assert trio.current_time() == pytest.approx(start + 3.0)
        assert list(server.received) == [silos[0].party, silos[2].party]
        expected = item_factors(np.random.default_rng(8), [silos[0].result.prototypes, silos[2].result.prototypes], HYPER)
        np.testing.assert_array_equal(server.item_factors, expected)


async def test_without_prototypes_there_is_no_v_and_nothing_is_broadcast(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    silo = _silo(network, 0, 0)
    server = PrototypeServer(SERVER, network, np.random.default_rng(9), HYPER)
    async with network.open():
        assert await server.learn([silo.party], trio.current_time() + 1.0) == [silo.party]
        assert server.item_factors is None and server.received == {}
        server.broadcast([silo.party])
        start = trio.current_time()
        assert await silo.fit(start + 2.0) is False
        assert trio.current_time() == pytest.approx(start + 2.0)
        assert silo.user_factors is None
    assert network.ledger.party(SERVER)["sent_msgs"] == 0


async def test_a_silo_refuses_an_item_matrix_without_one_row_per_item(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    silo = _silo(network, 4, 1)
    async with network.open():
        network.send(SERVER, silo.party, ItemFactors(np.ones((5, 2))))
        message = "silo:4 expected an item matrix with 6 rows, received shape (5, 2)"
        with pytest.raises(ProtocolViolation, match=exactly(message)):
            await silo.fit(trio.current_time() + 1.0)
        assert silo.user_factors is None


async def test_the_server_refuses_prototypes_over_different_item_counts(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    silos = [_silo(network, 0, 0), _silo(network, 1, 1, n_items=7)]
    server = PrototypeServer(SERVER, network, np.random.default_rng(10), HYPER)
    async with network.open():
        for silo in silos:
            silo.send_prototypes()
        message = "server:0 received prototypes over different numbers of items (silo:0: (2, 6), silo:1: (2, 7))"
        with pytest.raises(ProtocolViolation, match=exactly(message)):
            await server.learn([silo.party for silo in silos], trio.current_time() + 1.0)


def test_a_server_that_has_not_learnt_has_received_and_rejected_nothing() -> None:
    server = PrototypeServer(SERVER, _network(), np.random.default_rng(11), HYPER)
    assert (server.received, server.rejected, server.item_factors) == ({}, [], None)


async def test_the_server_accepts_entries_up_to_max_abs_and_rejects_larger_ones(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    silos = [_silo(network, index, index) for index in range(3)]
    server = PrototypeServer(SERVER, network, np.random.default_rng(12), HYPER, shape=(2, 6), max_abs=5.0)
    at_bound = np.array([[5.0, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, -5.0, 0.0, 2.0, 0.0, 0.0]])
    beyond = at_bound.copy()
    beyond[1, 3] = -5.5
    async with network.open():
        for silo, prototypes in zip(silos, [at_bound, beyond, at_bound.T], strict=True):
            network.send(silo.party, SERVER, Prototypes(prototypes))
        assert await server.learn([silo.party for silo in silos], trio.current_time() + 1.0) == []
    assert list(server.received) == [silos[0].party]
    assert server.rejected == [silos[1].party, silos[2].party]
    assert [row.problem for row in network.ledger.rejections] == [
        "server:0 expected a valid prototypes.prototypes from silo:1: entries finite and at most 5 in magnitude, "
        "received 5.5",
        "server:0 expected a valid prototypes.prototypes from silo:2: prototypes of shape (2, 6), received (6, 2)",
    ]


# ------------------------------------------------------------------ driver helpers


def test_the_config_checks_its_budget_split_at_construction() -> None:
    config = PrototypesConfig(epsilon=2.0, trials=2)
    assert config.budget() == budget_split(2.0, 2, 0.125, 0.125, 0.25, 0.45, 0.45)
    with pytest.raises(ConfigError, match="protocol.budget_candidates"):
        PrototypesConfig(budget_candidates=0.6, budget_localswap=0.5)
    with pytest.raises(ConfigError, match="protocol.recovery_support"):
        PrototypesConfig(recovery_support=0.6, recovery_values=0.5)


def test_silo_params_take_the_config_and_the_silo_size() -> None:
    config = PrototypesConfig(k=3, support=7, trials=2, candidate_grids=4, swap_steps=9)
    assert silo_params(config, 404, 5.0) == PrototypeParams(
        k=3, s=7, bound=5.0, projection_dim=3, trials=2, grids=4, swap_steps=9
    )
    assert silo_params(PrototypesConfig(projection_dim=5), 403, 1.0).projection_dim == 5


def _data(source: str = "synthetic", rating_range: tuple[float, float] | None = None, binarize: bool = False) -> DataConfig:
    return DataConfig(source=source, rating_range=rating_range, binarize=binarize)


def test_the_value_bound_is_the_configured_one_or_the_top_of_the_declared_scale() -> None:
    train = _train()
    assert public_bounds(PrototypesConfig(), _data(), train) == PublicBounds(5.0, (0.0, 5.0))
    assert public_bounds(PrototypesConfig(value_bound=3.5), _data(), train) == PublicBounds(3.5, (0.0, 5.0))
    declared = _data("npz", (0.0, 5.0))
    assert public_bounds(PrototypesConfig(), declared, train) == PublicBounds(5.0, (0.0, 5.0))
    signed = Ratings(np.array([0]), np.array([0]), np.array([1.0]), 1, 1, (-1.0, 1.0))
    message = "data: prototypes factorizes non-negative data; the data's scale is [-1, 1]"
    with pytest.raises(ConfigError, match=exactly(message)):
        public_bounds(PrototypesConfig(), _data(), signed)


@pytest.mark.parametrize(
    ("source", "remedy"),
    [
        ("npz", "set data.rating_range = [min, max] (the public scale) or protocol.value_bound"),
        ("lastfm", "set protocol.value_bound (larger play counts are clipped to it) or data.binarize = true"),
    ],
)
def test_data_whose_scale_is_its_own_extremes_needs_a_public_bound(source, remedy) -> None:
    """npz without data.rating_range (and Last.fm counts) take their scale from the data's smallest and largest
    value: a bound from it is refused; protocol.value_bound is used whatever the data's maximum, and the
    predictions are then clipped to [0, value_bound]; binarized data has the public scale [0, 1]."""
    message = (
        f"protocol.value_bound: data.source = {source!r} has no public scale: its default is the data's own smallest "
        f"and largest value, and noise calibrated to the data's maximum is not epsilon-DP; {remedy}"
    )
    with pytest.raises(ConfigError, match=exactly(message)):
        public_bounds(PrototypesConfig(), _data(source), _train())
    assert public_bounds(PrototypesConfig(value_bound=4.0), _data(source), _train()) == PublicBounds(4.0, (0.0, 4.0))
    binary = _train().binarize()
    assert public_bounds(PrototypesConfig(), _data(source, binarize=True), binary) == PublicBounds(1.0, (0.0, 1.0))


def test_the_factor_model_scores_each_user_with_its_silos_item_matrix() -> None:
    model = FactorModel(5, 2)
    U_a, V_a = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    U_b, V_b = np.array([[1.0, 1.0]]), np.array([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    model.add(np.array([0, 3]), U_a, V_a)
    model.add(np.array([2]), U_b, V_b)
    users = np.array([3, 1, 2, 0])
    expected = np.stack([U_a[1] @ V_a.T, np.zeros(3), U_b[0] @ V_b.T, U_a[0] @ V_a.T])  # user 1: no silo
    np.testing.assert_array_equal(model.scores(users), expected)
    items = np.array([2, 0, 1, 0])
    np.testing.assert_array_equal(model.predict(users, items), expected[np.arange(4), items])
    assert FactorModel(3, 2).scores(np.array([0, 1])).shape == (2, 0)


def test_shared_item_model_fits_every_silo_to_the_same_v() -> None:
    train = _train()
    silos = silo_data(train, np.array([0, 1, 0, 1, 1]))
    V = np.array([[1.0, 0.1], [0.2, 1.0], [0.5, 0.5], [1.0, 1.0], [0.0, 2.0]])
    model = shared_item_model(silos, V, 0.2, 5)
    for silo in silos:
        np.testing.assert_array_equal(model.U[silo.users], nnls_users(silo.rows, V, 0.2))
    np.testing.assert_allclose(model.scores(np.arange(5)), model.U @ V.T)


def test_evaluate_reports_rmse_rank_and_map_with_the_suffix() -> None:
    train = _train()
    test = Ratings(np.array([1, 3]), np.array([2, 4]), np.array([4.0, 2.0]), 5, 5, (0.0, 5.0))
    scores = np.tile(np.arange(5, dtype=float), (5, 1))
    metrics = evaluate(
        lambda users: scores[users], lambda users, items: np.full(users.size, 3.0), train, test, 2, "_x", scale=(0.0, 5.0)
    )
    assert set(metrics) == {"test_rmse_x", "test_rmse_clipped_x", "mean_rank_x", "map@2_x"}
    assert metrics["test_rmse_x"] == pytest.approx(math.sqrt((1 + 1) / 2))
    assert metrics["test_rmse_clipped_x"] == metrics["test_rmse_x"]  # 3 lies in the scale
    # Predictions of 7 and -1 are clipped to the given scale [1, 2.5], not to the data's [0, 5]: errors 1.5 and 1.
    high_low = evaluate(lambda users: scores[users], lambda users, items: np.array([7.0, -1.0]), train, test, 2, scale=(1.0, 2.5))
    assert high_low["test_rmse"] == pytest.approx(math.sqrt((9 + 9) / 2))
    assert high_low["test_rmse_clipped"] == pytest.approx(math.sqrt((1.5**2 + 1) / 2))
    # User 1 (train item 1): candidates 0, 2, 3, 4; item 2 has two above -> 2/3. User 3 (train 0): item 4
    # is the top -> 0. Weighted (4 * 2/3 + 2 * 0) / 6.
    assert metrics["mean_rank_x"] == pytest.approx(4 / 9)
    empty = Ratings(np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([]), 5, 5, (0.0, 5.0))
    none = evaluate(lambda users: scores[users], lambda users, items: np.zeros(users.size), train, empty, 2, scale=(0.0, 5.0))
    assert all(math.isnan(value) for value in none.values()) and set(none) == {"test_rmse", "test_rmse_clipped", "mean_rank", "map@2"}


def test_the_prototype_bound_is_every_user_at_the_value_bound_plus_fifty_laplace_scales() -> None:
    config = PrototypesConfig(epsilon=2.0, trials=2, support=7)
    # Recovery: 2 * (1 - 0.125 - 0.125 - 0.25) = 1.0, over 2 trials and halved for a record moving between
    # clusters: 0.25 per cluster, of which 0.45 for the values. Laplace scale s * bound / eps_values.
    values_scale = 7 * 3.0 / (0.25 * 0.45)
    expected = 11 * 3.0 + 50 * values_scale
    assert prototype_bound(config, config.budget(), 3.0, 11) == pytest.approx(expected, rel=1e-12)
