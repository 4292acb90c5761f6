"""PriviRec's configuration helpers (`fedrecsim.protocols.privirec.protocol`) and local index maths, unit by
unit: the start's stream, the centralized reference's hyper-parameters, the secure-aggregation mode and
parameters, the score functions and the score gap."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError
from fedrecsim.models.gfcf import GFCFHyper, GraphFilters
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.evaluation import evaluate, lightgcn_metrics, recommend, top_k
from fedrecsim.protocols.privirec.protocol import (
    PriviRecConfig,
    hyper,
    max_gap,
    score_function,
    secagg_mode,
    secagg_params,
    start_rng,
)
from fedrecsim.seeding import Stream, generator


def test_the_start_is_drawn_from_the_runs_protocol_stream_zero() -> None:
    assert start_rng(4).random(3).tolist() == generator(4, Stream.PROTOCOL, 0).random(3).tolist()
    assert start_rng(4).random() != start_rng(5).random()


def test_the_centralized_reference_has_the_runs_hyper_parameters() -> None:
    config = PriviRecConfig(variant="privirec_k", k=7, oversample=3, ideal_k=5, gamma=0.8)
    assert hyper(config, 5) == GFCFHyper(k=7, gamma=0.8, iterations=5, oversample=3, low_rank=True, ideal_k=5)
    # ideal_k's default, GF-CF's k1 = 256, is capped at k; alpha is the config's.
    assert hyper(PriviRecConfig(k=4), 1) == GFCFHyper(k=4, gamma=0.3, iterations=1, low_rank=False, ideal_k=4)
    assert hyper(PriviRecConfig(k=300, alpha=0.6), 1) == GFCFHyper(k=300, iterations=1, ideal_k=256, alpha=0.6)
    assert hyper(PriviRecConfig(k=30, ideal_k=0), 1).ideal_k == 30


def test_auto_mode_is_real_up_to_the_configured_item_count() -> None:
    config = PriviRecConfig(secagg="auto", real_max_items=50)
    assert (secagg_mode(config, 50), secagg_mode(config, 51)) == ("real", "ideal")
    assert secagg_mode(PriviRecConfig(secagg="ideal"), 3) == "ideal"
    assert secagg_mode(PriviRecConfig(secagg="real"), 10_000) == "real"


def test_the_secure_aggregation_parameters_follow_the_configuration() -> None:
    config = PriviRecConfig(bits=32, frac_bits=12, graph="complete", neighbours=5, threshold=0.25, stage_timeout_s=3.5,
                            secagg="auto", real_max_items=10)
    params = secagg_params(config, 11, 40)
    assert (params.ring.bits, params.ring.frac_bits) == (32, 12)
    assert (params.graph, params.neighbours, params.threshold, params.stage_timeout_s) == ("complete", 5, 0.25, 3.5)
    assert (params.population, params.min_users) == (40, 0)  # the users check their setups against the data's users
    assert secagg_params(PriviRecConfig(min_users=7), 5, 40).session_floor() == 7
    assert params.ideal and not secagg_params(config, 10, 40).ideal
    assert secagg_params(PriviRecConfig(bits=32, frac_bits=30), 5, 40).ring.frac_bits == 30  # < bits - 1 is allowed
    with pytest.raises(ConfigError) as raised:
        secagg_params(PriviRecConfig(bits=64, frac_bits=63), 5, 40)
    assert raised.value.key_path == "protocol.frac_bits" and "must be < bits - 1 = 63, got 63" in str(raised.value)


def _filters(seed: int = 0, m: int = 9, k: int = 3) -> tuple[GraphFilters, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    R = sp.csr_matrix((rng.random((6, m)) < 0.4).astype(float))
    degrees = np.asarray(R.sum(axis=0)).ravel()
    basis = np.linalg.qr(rng.standard_normal((m, k)))[0]
    item_item = rng.random((m, m))
    return GraphFilters(degrees, basis, item_item=(item_item + item_item.T) / 4), R


def test_the_score_functions_use_the_configured_gamma_filter_and_power() -> None:
    filters, R = _filters()
    users = np.array([4, 1])
    ours = score_function(filters, PriviRecConfig(gamma=0.9), R)(users)
    np.testing.assert_array_equal(ours, filters.gfcf_scores(R[users], 0.9))
    assert not np.allclose(ours, filters.gfcf_scores(R[users], 0.3))
    config = PriviRecConfig(scorer="turbo_cf", turbo_filter=3, turbo_power=0.5)
    turbo = score_function(filters, config, R)(users)
    np.testing.assert_array_equal(turbo, filters.turbo_scores(R[users], 3, 0.5))
    for other in (filters.turbo_scores(R[users], 2, 0.5), filters.turbo_scores(R[users], 3, 1.0),
                  filters.turbo_scores(R[users], 1, 1.0)):
        assert not np.allclose(turbo, other)


def test_the_score_gap_is_the_largest_absolute_difference_over_every_user() -> None:
    rng = np.random.default_rng(2)
    one, other = rng.random((7, 4)), rng.random((7, 4))
    other[6, 2] = one[6, 2] + 5.0  # the last user, the last block
    calls = []

    def scores(matrix):  # type: ignore[no-untyped-def]
        def block(users: np.ndarray) -> np.ndarray:
            calls.append(users.tolist())
            return matrix[users]
        return block

    assert max_gap(scores(one), scores(other), 7, 4) == pytest.approx(5.0)
    assert calls == [list(range(7))] * 2
    assert max_gap(scores(one), scores(one - 0.25), 7, 4) == pytest.approx(0.25)
    assert max_gap(scores(one), scores(one), 0, 4) == 0.0


def test_upper_positions_are_exact_int64_for_any_integer_index_arrays() -> None:
    """m = 100 000 items: row * m overflows 32 bits, and uint64 mixed with int64 would turn float."""
    m = 100_000
    rows = np.array([0, 50_000, m - 1], dtype=np.int32)
    columns = np.array([5, 70_000, m - 1], dtype=np.uint64)
    positions = local.upper_positions(rows, columns, m)
    assert positions.dtype == np.int64
    expected = [r * m - r * (r - 1) // 2 + (c - r) for r, c in ((0, 5), (50_000, 70_000), (m - 1, m - 1))]
    assert positions.tolist() == expected
    assert positions[-1] == local.upper_length(m) - 1


def test_recommended_lists_are_int64_item_indices() -> None:
    train = Ratings(np.array([0, 1]), np.array([0, 1]), np.ones(2), 3, 4, (1.0, 1.0))
    lists = recommend(lambda users: np.tile([4.0, 3.0, 2.0, 1.0], (users.size, 1)), train, np.array([2, 0]), 3)
    assert lists.dtype == np.int64 and lists.tolist() == [[0, 1, 2], [1, 2, 3]]


def test_top_k_of_one_row_of_integer_scores_and_of_no_items() -> None:
    nothing = (np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    best = top_k(np.array([[3, 9, 9, 1]]), (np.array([0]), np.array([2])), 1)  # integers; item 2 excluded
    assert best.dtype == np.int64 and best.tolist() == [[1]]
    assert top_k(np.array([[3, 9, 9, 1]]), nothing, 2).tolist() == [[1, 2]]
    assert top_k(np.zeros((2, 0)), nothing, 3).tolist() == [[-1, -1, -1]] * 2  # no items: all padding
    assert top_k(np.zeros((0, 4)), nothing, 2).shape == (0, 2)


def test_evaluation_is_at_20_by_default_and_at_any_k_asked() -> None:
    rng = np.random.default_rng(4)
    n, m = 12, 30
    cells = rng.permutation(n * m)[:150]
    ratings = Ratings(cells // m, cells % m, np.ones(150), n, m, (1.0, 1.0))
    train = Ratings(ratings.users[:110], ratings.items[:110], np.ones(110), n, m, (1.0, 1.0))
    test = Ratings(ratings.users[110:], ratings.items[110:], np.ones(40), n, m, (1.0, 1.0))
    scores = rng.random((n, m))
    assert set(evaluate(lambda users: scores[users], train, test)) == {"recall@20", "ndcg@20"}
    at_3 = evaluate(lambda users: scores[users], train, test, 3)
    users = np.flatnonzero(test.user_counts())
    assert at_3 == lightgcn_metrics(recommend(lambda u: scores[u], train, users, 3), users, test, 3)
    assert set(at_3) == {"recall@3", "ndcg@3"} and at_3 != {"recall@3": 0.0, "ndcg@3": 0.0}
    twenty = recommend(lambda u: scores[u], train, users, 20)
    assert lightgcn_metrics(twenty, users, test) == lightgcn_metrics(twenty, users, test, 20)
    with pytest.raises(ValueError, match="^every evaluated user needs at least one test item$"):
        lightgcn_metrics(twenty, np.arange(n), test)


def test_the_score_gap_is_taken_in_blocks_of_about_four_million_cells() -> None:
    """The blocks: (1 << 22) // m users at a time, at least one; a block of no items has a gap of 0."""
    seen: list[list[int]] = []

    def one(users: np.ndarray) -> np.ndarray:
        seen.append([int(users[0]), int(users[-1]), users.size])
        return users[:, None] / 8.0

    def zeros(users: np.ndarray) -> np.ndarray:
        return np.zeros((users.size, 1))

    assert max_gap(one, zeros, 5, 1 << 21) == 0.5  # two users a block: user 4's 4/8 is in the last one
    assert seen == [[0, 1, 2], [2, 3, 2], [4, 4, 1]]
    seen.clear()
    max_gap(one, zeros, (1 << 22) + 1, 1)  # one item: (1 << 22) users a block
    assert [size for _, _, size in seen] == [1 << 22, 1]
    assert max_gap(lambda users: np.zeros((users.size, 0)), lambda users: np.zeros((users.size, 0)), 3, 0) == 0.0
