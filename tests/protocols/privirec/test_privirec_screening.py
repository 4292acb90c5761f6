"""Float32 screening of PriviRec-k's scores (issue 32): the bound holds cell by cell, and the screened lists
and metrics are exactly those of the float64 block -- with exact ties at the k-th place, near-ties far
inside the bound, rows where everything ties, wide rows, and non-finite or huge factors.

The float64 path is the reference: `recommend` of a plain function (no ``screen``) over the same filters,
i.e. today's dgemm and `top_k`. Lists are compared whole (equal lists give bit-equal metrics).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from fedrecsim.data.ratings import Ratings
from fedrecsim.models import screening
from fedrecsim.models.gfcf import GFCFHyper, GraphFilters, LowRankScores, fit_gfcf, interaction_matrix
from fedrecsim.models.screening import ScaledBasis
from fedrecsim.protocols.privirec import evaluation
from fedrecsim.protocols.privirec.evaluation import evaluate, recommend, screened_top_k, top_k

K = 20


def _split(seed: int, n: int = 90, m: int = 160) -> tuple[Ratings, Ratings]:
    rng = np.random.default_rng(seed)
    dense = rng.random((n, m)) < rng.uniform(0.02, 0.3, m)
    for first in range(100, 150, 10):  # five groups of ten items sharing a column: exact ties wherever they rank
        dense[:, first : first + 10] = dense[:, [first]]
    dense[3] = False  # a user without training items: a row where everything ties (its test items below)
    in_test = dense & (rng.random(dense.shape) < 0.25)
    in_test[:, 100:150] = False  # the shared columns stay whole in training
    in_test[3, :4] = True
    dense[[5, 6], 100:110] = False
    in_test[[5, 6], 100] = True  # users 5, 6: one item of a shared column is a test item, its twins are not

    def ratings(mask: np.ndarray) -> Ratings:
        users, items = np.nonzero(mask)
        return Ratings(users, items, np.ones(users.size), n, m, (1.0, 1.0))

    return ratings(dense & ~in_test), ratings(in_test)


def _float64_path(block: LowRankScores):  # type: ignore[no-untyped-def]
    return lambda users: block(users)


def _rows(train: Ratings, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    index = train.by_user()
    lengths = index.indptr[users + 1] - index.indptr[users]
    return np.repeat(np.arange(users.size), lengths), index.items[index.positions(users)]


_NONE = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def _every_cell(side: ScaledBasis, left: np.ndarray) -> np.ndarray:
    """The b x m float32 approximations of every cell (a screen of depth m lists them all), item order."""
    m = side.basis.shape[0]
    screen = side.screen(left, _NONE, m)
    assert screen is not None and screen.rows.size == left.shape[0] * m
    approx = np.full((left.shape[0], m), np.nan, dtype=np.float32)
    approx[screen.rows, screen.items] = screen.approx
    return approx


@pytest.mark.parametrize("min_group", [1, 4, 10**9])
@pytest.mark.parametrize(("alpha", "ideal_k", "scorer"), [(0.5, 0, "gfcf"), (0.6, 3, "gfcf"), (1.0, 0, "gfcf"), (0.5, 0, "turbo")])
def test_screened_lists_and_metrics_equal_the_float64_path(
    monkeypatch: pytest.MonkeyPatch, min_group: int, alpha: float, ideal_k: int, scorer: str
) -> None:
    monkeypatch.setattr(screening, "MIN_GROUP", min_group)  # 1: every item in a group; 10^9: all in the tail
    monkeypatch.setattr(evaluation, "_CELLS_PER_BLOCK", 160 * 25)  # several blocks
    train, test = _split(7)
    R = interaction_matrix(train)
    filters = fit_gfcf(R, GFCFHyper(k=24, iterations=2, low_rank=True, ideal_k=ideal_k, alpha=alpha), np.random.default_rng(2))
    block = filters.gfcf_block(R, 0.3) if scorer == "gfcf" else filters.turbo_block(R, 2)
    assert isinstance(block, LowRankScores)
    users = np.flatnonzero(test.user_counts())
    screened, plain = recommend(block, train, users, K), recommend(_float64_path(block), train, users, K)
    np.testing.assert_array_equal(screened, plain)
    assert evaluate(block, train, test) == evaluate(_float64_path(block), train, test)


def test_blocks_are_bit_for_bit_the_scores_of_the_rows() -> None:
    train, _ = _split(3)
    R = interaction_matrix(train)
    users = np.arange(0, 90, 7)
    for low_rank in (True, False):
        filters = fit_gfcf(R, GFCFHyper(k=8, low_rank=low_rank, ideal_k=5, alpha=0.6), np.random.default_rng(1))
        np.testing.assert_array_equal(filters.gfcf_block(R, 0.2)(users), filters.gfcf_scores(R[users], 0.2))
        np.testing.assert_array_equal(filters.turbo_block(R, 3)(users), filters.turbo_scores(R[users], 3))
    with pytest.raises(ValueError, match="power"):
        fit_gfcf(R, GFCFHyper(k=8, low_rank=True), np.random.default_rng(1)).turbo_block(R, 2, 0.5)


def test_the_one_sparse_product_of_the_left_factor_is_bit_for_bit_the_two() -> None:
    rng = np.random.default_rng(9)
    train, _ = _split(4)
    filters = fit_gfcf(interaction_matrix(train), GFCFHyper(k=12, low_rank=True, ideal_k=5, alpha=0.7), rng)
    rows = sp.random(40, 160, density=0.2, random_state=3, format="csr") * 7.3  # weights other than 1
    two = np.hstack([(rows @ filters.basis) * filters.spectrum, 0.3 * (rows @ filters._ideal_rows)])
    np.testing.assert_array_equal(filters._gfcf_left(rows, 0.3), two)


def test_exact_ties_and_rows_that_all_tie_are_left_to_the_float64_block() -> None:
    train, test = _split(11)
    R = interaction_matrix(train)
    filters = fit_gfcf(R, GFCFHyper(k=24, low_rank=True), np.random.default_rng(5))
    block = filters.gfcf_block(R, 0.3)
    users = np.flatnonzero(test.user_counts())
    screen = block.screen(users, _rows(train, users), K)
    assert screen is not None
    _, unresolved = screened_top_k(screen, _rows(train, users), K)
    assert unresolved[users == 3].all()  # no training items: every score is 0
    ties = block(users)
    ties[_rows(train, users)] = -np.inf
    kth = -np.sort(-ties, axis=1)[:, K - 1 : K + 1]
    tied = kth[:, 0] == kth[:, 1]  # an exact tie at the k-th place (the items sharing a column)
    assert tied.sum() >= 2 and unresolved[tied].all()
    assert not unresolved.all()
    np.testing.assert_array_equal(recommend(block, train, users, K), recommend(_float64_path(block), train, users, K))


def _cancelling(seed: int, m: int = 60) -> tuple[ScaledBasis, np.ndarray]:
    """Rank 2, left [1, -1], item k = [X_k + d_k, X_k] with X_k ~ 1000: the float64 scores are d_k = k 1e-6,
    the float32 ones fl(X_k + d_k) - fl(X_k), multiples of 2^-14 scrambled by where X_k falls between two
    floats -- the float32 order is not the float64 order, ties and inversions far inside the bound."""
    rng = np.random.default_rng(seed)
    X = 1000.0 + rng.random(m) * 2.0**-12
    basis = np.stack([X + np.arange(m) * 1e-6, X], axis=1)
    return ScaledBasis(basis), np.array([[1.0, -1.0], [-1.0, 1.0], [0.5, -0.5]])


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_holds_on_every_cell_of_cancelling_scores(seed: int) -> None:
    side, left = _cancelling(seed)
    screen = side.screen(left, _NONE, 60)
    assert screen is not None
    exact = left @ side.right.T
    assert np.all(np.abs(_every_cell(side, left).astype(np.float64) - exact) <= screen.bound[:, None])


@pytest.mark.parametrize("seed", range(6))
def test_near_ties_far_inside_the_bound_are_ranked_exactly(seed: int) -> None:
    side, left = _cancelling(seed)
    exact = left @ side.right.T
    order32 = np.argsort(-_every_cell(side, left)[0], kind="stable")
    assert not np.array_equal(order32[:K], np.arange(59, 59 - K, -1))  # float32 alone errs
    excluded = (np.array([0, 2]), np.array([59, 7]))
    lists, unresolved = screened_top_k(side.screen(left, excluded, K), excluded, K)
    assert not unresolved.any()  # gaps of 1e-6 against an error of ~1e-13: decided without the float64 block
    np.testing.assert_array_equal(lists, top_k(exact, excluded, K))


def test_random_low_rank_bounds_hold() -> None:
    rng = np.random.default_rng(4)
    for _ in range(20):
        m, q, scaled = int(rng.integers(30, 300)), int(rng.integers(1, 40)), 0
        scaled = int(rng.integers(0, q + 1))
        scale = np.floor(rng.exponential(3.0, m)) ** 0.5
        side = ScaledBasis(rng.standard_normal((m, q)) * 10.0 ** rng.uniform(-3, 3), scale, scaled)
        left = rng.standard_normal((9, q + scaled)) * 10.0 ** rng.uniform(-3, 3)
        exact = left @ side.right.T
        screen = side.screen(left, _NONE, m)
        assert screen is not None
        assert np.all(np.abs(_every_cell(side, left).astype(np.float64) - exact) <= screen.bound[:, None])
        gathered = np.einsum("ij,kj->ik", left, side.right)
        assert np.all(np.abs(gathered - exact) <= screen.error[:, None])
        excluded = np.nonzero(rng.random(exact.shape) < 0.3)
        lists, unresolved = screened_top_k(side.screen(left, excluded, K), excluded, K)
        np.testing.assert_array_equal(lists[~unresolved], top_k(exact, excluded, K)[~unresolved])


def test_wide_rows_are_rescored_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation, "_WIDE", 3)
    side, left = _cancelling(0)
    exact = left @ side.right.T
    excluded = (np.array([1]), np.array([4]))
    lists, unresolved = screened_top_k(side.screen(left, excluded, K), excluded, K)
    assert not unresolved.any()
    np.testing.assert_array_equal(lists, top_k(exact, excluded, K))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e200])
def test_non_finite_or_huge_factors_are_not_screened_and_rank_as_before(bad: float) -> None:
    train, test = _split(5)
    R = interaction_matrix(train)
    fitted = fit_gfcf(R, GFCFHyper(k=12, low_rank=True), np.random.default_rng(3))
    basis = fitted.basis.copy()
    basis[17, 2] = bad
    filters = GraphFilters(fitted.degrees, basis, spectrum=fitted.spectrum)
    block = filters.gfcf_block(R, 0.3)
    users = np.flatnonzero(test.user_counts())
    assert block.screen(users, _rows(train, users), K) is None
    # Both rankings are the float64 dgemm over the bad factor: inf meets 0 (invalid) and 1e200 overflows, by design.
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(recommend(block, train, users, K), recommend(_float64_path(block), train, users, K))


def test_users_with_fewer_candidates_than_k_are_padded_as_before() -> None:
    side = ScaledBasis(np.random.default_rng(0).standard_normal((12, 3)))
    left = np.random.default_rng(1).standard_normal((4, 3))
    excluded = (np.repeat([0, 1], [12, 5]), np.r_[np.arange(12), np.arange(5)])
    lists, unresolved = screened_top_k(side.screen(left, excluded, K), excluded, K)
    assert not unresolved.any()
    np.testing.assert_array_equal(lists, top_k(left @ side.right.T, excluded, K))
    assert (lists[0] == -1).all() and (lists[1, 7:] == -1).all()


def test_an_exact_form_block_is_a_plain_function() -> None:
    train, _ = _split(2)
    R = sp.csr_matrix(interaction_matrix(train))
    filters = fit_gfcf(R, GFCFHyper(k=6), np.random.default_rng(0))
    assert not isinstance(filters.gfcf_block(R), evaluation.Screenable)
    assert isinstance(fit_gfcf(R, GFCFHyper(k=6, low_rank=True), np.random.default_rng(0)).gfcf_block(R), evaluation.Screenable)


@pytest.mark.parametrize(("tested", "decided"), [((), True), ((18, 19, 20, 21, 22), True), ((3, 20), False), ((22,), False)])
def test_a_tied_run_across_the_cut_is_decided_for_the_metrics_when_its_items_are_all_or_none_test_items(
    tested: tuple[int, ...], decided: bool
) -> None:
    values = 100.0 - np.arange(30.0)
    values[18:23] = 81.5  # items 18-22 tie across the 20th place
    side, left = ScaledBasis(values[:, None]), np.ones((1, 1))
    items = np.array(tested, dtype=np.int64)

    def member(rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        return np.isin(candidates, items)

    excluded = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    assert screened_top_k(side.screen(left, excluded, K), excluded, K)[1].all()  # the lists themselves: undecided
    lists, unresolved = screened_top_k(side.screen(left, excluded, K), excluded, K, member)
    assert unresolved[0] != decided
    if decided:
        reference = top_k(left @ side.right.T, excluded, K)
        np.testing.assert_array_equal(np.isin(lists, items), np.isin(reference, items))


def _ceilings(side: ScaledBasis, left: np.ndarray) -> np.ndarray:
    """The b x m upper bounds rho_i n_k the screen skips items by (item order)."""
    plan, reach = side._plan, side.row_reach(left)
    ceilings = np.empty((left.shape[0], plan.columns.size))
    for segment in plan.segments:
        rho = reach.tail if segment.scale is None else reach.group(segment.scale)
        ceilings[:, plan.columns[segment.start : segment.stop]] = rho[:, None] * plan.reach[None, segment.start : segment.stop]
    return ceilings


def _aligned(seed: int, magnitude: float, cancel: bool) -> tuple[ScaledBasis, np.ndarray]:
    """Items whose factor rows point along a row's own vector, so that Cauchy-Schwarz is tight: group items
    (scales shared by 3 items) along x_i = A1_i + c A2_i, tail items (scales of one item) along L_i itself
    (its A2 is c times A1's first q' columns). With ``cancel``, A1_i = -c A2_i + a 1e-12 remainder: x_i is
    tiny against A1 and A2, and its norm comes out of a cancelling sum."""
    rng = np.random.default_rng(seed)
    q, scaled, rows = 6, 4, 8
    scales = np.repeat(rng.uniform(0.5, 3.0, 4), 3)  # four groups of three
    tail = rng.uniform(0.5, 3.0, 5)
    left = rng.standard_normal((rows, q + scaled)) * magnitude
    basis = np.empty((scales.size + tail.size, q))
    for k, c in enumerate(scales):
        i = k % 4
        if cancel:
            left[i, :scaled] = -c * left[i, q:] * (1.0 + 1e-12 * rng.standard_normal(scaled))
        x = left[i, :q].copy()
        x[:scaled] += c * left[i, q:]
        x /= np.abs(x).max()
        basis[k] = x / np.linalg.norm(x) * 10.0 ** rng.uniform(-1, 1)
    for k, c in enumerate(tail):
        i = 4 + k % 4
        left[i, q:] = c * left[i, :scaled]
        basis[scales.size + k] = left[i, :q] / np.abs(left[i, :q]).max() * 10.0 ** rng.uniform(-1, 1)
    return ScaledBasis(basis, np.concatenate([scales, tail]), scaled), left


@pytest.mark.parametrize("cancel", [False, True])
@pytest.mark.parametrize("magnitude", [1e-170, 1e-3, 1.0, 1e3, 1e150])
@pytest.mark.parametrize("seed", range(8))
def test_the_reach_bounds_every_score_where_cauchy_schwarz_is_tight(
    monkeypatch: pytest.MonkeyPatch, seed: int, magnitude: float, cancel: bool
) -> None:
    monkeypatch.setattr(screening, "MIN_GROUP", 3)
    side, left = _aligned(seed, magnitude, cancel)
    ceilings = _ceilings(side, left)
    assert np.all(left @ side.right.T <= ceilings)  # the dgemm
    assert np.all(np.einsum("ij,kj->ik", left, side.right) <= ceilings)  # another order
    for i, k in zip(*np.nonzero(left @ side.right.T > 0.5 * ceilings), strict=True):  # the tight cells, exactly
        exact = sum(Fraction(a) * Fraction(b) for a, b in zip(left[i], side.right[k], strict=True))
        assert exact <= Fraction(ceilings[i, k])
    if magnitude == 1.0 and not cancel:
        assert np.max(left @ side.right.T / ceilings) > 1.0 - 1e-6  # tight: the bound has no slack to hide a fault


@pytest.mark.parametrize("head", [4, 16, 10**6])
@pytest.mark.parametrize(("alpha", "ideal_k", "scorer"), [(0.5, 0, "gfcf"), (0.6, 3, "gfcf"), (0.5, 0, "turbo")])
def test_skipped_items_never_change_the_lists(monkeypatch: pytest.MonkeyPatch, head: int, alpha: float, ideal_k: int, scorer: str) -> None:
    monkeypatch.setattr(screening, "HEAD", head)
    monkeypatch.setattr(screening, "MIN_GROUP", 2)
    train, test = _split(13, n=120, m=400)
    R = interaction_matrix(train)
    filters = fit_gfcf(R, GFCFHyper(k=16, iterations=2, low_rank=True, ideal_k=ideal_k, alpha=alpha), np.random.default_rng(4))
    block = filters.gfcf_block(R, 0.3) if scorer == "gfcf" else filters.turbo_block(R, 2)
    users = np.flatnonzero(test.user_counts())
    scored = users[users != 3]  # user 3 has no training item: all its scores are 0, so nothing is skipped
    screen = block.screen(scored, _rows(train, scored), K)
    assert screen is not None
    if head == 4:
        assert screen.scored < scored.size * 400  # items were skipped
    np.testing.assert_array_equal(recommend(block, train, users, K), recommend(_float64_path(block), train, users, K))
    assert evaluate(block, train, test) == evaluate(_float64_path(block), train, test)


def test_items_whose_reach_is_tight_are_scored_where_they_make_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the head (80 columns of 100 items of scale 2), a group of scale 0.5 whose items point along the
    rows' own vectors x_i = A1_i + 0.5 A2_i: their scores equal their reach, and they top every list, so
    the reach must not skip them (a reach shrunk by a constant factor would)."""
    monkeypatch.setattr(screening, "HEAD", 1)
    monkeypatch.setattr(screening, "MIN_GROUP", 8)
    rng = np.random.default_rng(3)
    q, rows = 8, 4
    left = np.abs(rng.standard_normal((rows, 2 * q)))  # positive scores: a high 20th place
    crowd = np.abs(rng.standard_normal((100, q))) * np.geomspace(0.3, 0.003, 100)[:, None]  # popular to rare
    x = left[:, :q] + 0.5 * left[:, q:]
    lengths = np.tile([10.0, 9.0], rows)[:, None] * np.linalg.norm(crowd, axis=1).max()
    aligned = np.repeat(x / np.linalg.norm(x, axis=1)[:, None], 2, axis=0) * lengths
    side = ScaledBasis(np.vstack([crowd, aligned]), np.r_[np.full(100, 2.0), np.full(8, 0.5)], q)
    exact = left @ side.right.T
    ceilings = _ceilings(side, left)
    assert np.all(exact[np.arange(rows), 100 + 2 * np.arange(rows)] > 0.9999 * ceilings[np.arange(rows), 100 + 2 * np.arange(rows)])
    excluded = _NONE
    screen = side.screen(left, excluded, K)
    assert screen.scored < rows * 108  # the crowd's last items are skipped
    lists, unresolved = screened_top_k(screen, excluded, K)
    reference = top_k(exact, excluded, K)
    assert np.isin(reference[:, :1], np.arange(100, 108)).all()  # each row's best is one of its aligned items
    np.testing.assert_array_equal(lists[~unresolved], reference[~unresolved])
    assert not unresolved.all()
