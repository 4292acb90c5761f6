"""Recall@K and NDCG@K as LightGCN evaluates them (He et al. 2020, and GF-CF, BSPM and PriviRec after it).

Every user with at least one test item is evaluated; its training items are never recommended; its top K
items come from ranking all other items by score, ties to the lower item index (as
`fedrecsim.data.metrics`). ``recall@K = hits / |test items|`` -- LightGCN's normalisation, not Mult-VAE's
min(K, |test|) of `fedrecsim.data.metrics.recall_at_k` -- and ``ndcg@K = DCG@K / IDCG@K`` with IDCG@K over
min(K, |test items|) hits, identical to `fedrecsim.data.metrics.ndcg_at_k`.

The scores come as a function of a block of user indices, so no n x m matrix is ever held: a user's
scores depend only on its own row and the broadcast filters, and blocks of users are scored together.
The function returns a new array each call, which `recommend` then owns: it marks the training cells in
it instead of copying 128 MiB a block.

Screening (issue 32). A score function that also has ``screen`` (`Screenable`: PriviRec-k's
`fedrecsim.models.gfcf.LowRankScores`) is ranked without its float64 block: ``screen(users, excluded, k)``
gives the cells that can reach their row's top k (every cell not excluded whose float64 score s is at least
the row's k-th largest) with float32 approximations a and a per-row bound E (|a - s| <= E_i,
`fedrecsim.models.screening`, which proves the other cells out without scoring most of them), and the
float64 factors. Per row, with tau the k-th largest a among those cells (-inf if fewer):

1. candidates: the cells with a >= tau - 2 E. Every item whose s reaches the row's k-th largest s, t, is
   one: k cells have a >= tau, so s >= tau - E for each, so t >= tau - E; an item with s >= t is a cell
   and has a >= s - E >= tau - 2 E.
2. the candidates are re-scored in float64, a row's by one matrix-vector product of their gathered factor
   rows, v, within the screen's ``error`` eps of s (not bit-equal to the dgemm: another summation order).
3. sorted by (v descending, item ascending), the row's list is the first k -- provided every gap between
   neighbours among the first k + 1 exceeds 2 eps: then s orders them the same, strictly (no two tie), and
   every candidate after the k-th has s below the k-th's, so the list is exactly the one the float64 block
   gives, tie rule and all. A row with a smaller gap (a tie or a near-tie of s) is *unresolved*.

`evaluate` needs only each place's hit, not the list: it also decides a row whose undecided runs of
candidates hold test items only or none (`screened_top_k`), which saves the float64 block for items that
are interchangeable there (at Gowalla's shape, items sharing their whole training column).

A row with more than `_WIDE` candidates is re-scored whole instead (its left factor times every item, one
product). Unresolved rows, and blocks for which ``screen`` gives None (non-finite factors, float32 overflow
possible), are ranked from the float64 block of the same users, as without screening. So `recommend`'s
lists, and the metrics, are bit for bit those of the float64 path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from ...data.ratings import Ratings
from ...models.screening import Screen

ScoreBlock = Callable[[np.ndarray], np.ndarray]


@runtime_checkable
class Screenable(Protocol):
    """A `ScoreBlock` with a float32 screen of its scores (module docstring)."""

    def __call__(self, users: np.ndarray) -> np.ndarray: ...

    def screen(self, users: np.ndarray, excluded: tuple[np.ndarray, np.ndarray], depth: int) -> Screen | None: ...


#: Cells (users x items) scored at once: 2^24, 128 MiB of float64 per array the score function makes. The
#: scores are dense products of a block's rows with m x k bases, and OpenBLAS's threads spend ten times the
#: CPU on them when a block has ~100 rows (2^22 cells at Gowalla's 40,981 items: 30 ms a user against 4 ms
#: at 409 rows, issue 32).
_CELLS_PER_BLOCK = 1 << 24

#: `top_k` cuts a row into at least this many chunks per place of its list: 16 x 20 chunks of 128 cells at
#: Gowalla's 40,981 items, of which a row's top 20 reach ~20, so ~6 % of its cells are compared.
_CHUNKS_PER_PLACE = 16

#: A screened row with more candidates than this is re-scored whole (one product with every item) rather
#: than by gathering each candidate's factor row. Gowalla's rows have 20-23 (issue 32).
_WIDE = 1024


def top_k(scores: np.ndarray, excluded: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """The k best items of each row of ``scores`` (b x m) with the cells ``excluded`` (rows, items) removed,
    best first, ties to the lower item index; rows with fewer than k candidates are padded with -1.

    A -inf or NaN score is no candidate (as an excluded cell); a +inf score takes its place in the order
    but is not recommended (its slot holds -1).

    No row is sorted, partitioned or even compared whole: a row's m cells are cut into chunks of equal
    width, `_CHUNKS_PER_PLACE` k of them or, in a narrower row, one per cell (the last cells, if any, one
    narrower chunk), so at least k chunks, and the k-th
    largest of the chunks' maxima is a lower bound of the row's k-th largest score -- k distinct cells reach
    it -- so the cells at or above it hold the row's top k, ties included. Only chunks whose maximum reaches
    the bound can hold such a cell; only their cells are compared with it, and only the cells at or above it
    are ordered by (score descending, item ascending).
    """
    return _top_k_overwriting(np.array(scores, dtype=np.float64), excluded, k)


def _top_k_overwriting(block: np.ndarray, excluded: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """`top_k` of the float64 ``block``, which it overwrites (-inf at the excluded cells and NaNs)."""
    block[excluded] = -np.inf
    b, m = block.shape
    depth = min(k, m)
    result = np.full((b, k), -1, dtype=np.int64)
    if depth == 0 or b == 0:
        return result
    width = max(1, m // (_CHUNKS_PER_PLACE * depth))
    maxima = _chunk_maxima(block, width)
    if np.isnan(maxima).any():
        block[np.isnan(block)] = -np.inf
        maxima = _chunk_maxima(block, width)
    bound = -np.partition(-maxima, depth - 1, axis=1)[:, depth - 1]
    rows, items, values = _cells_reaching(block, maxima, bound, width)
    order = np.lexsort((items, -values, rows))
    rows, items, values = rows[order], items[order], values[order]
    starts = np.searchsorted(rows, np.arange(b))
    rank = np.arange(rows.size) - starts[rows]
    keep = (rank < depth) & np.isfinite(values)
    result[rows[keep], rank[keep]] = items[keep]
    return result


def _chunk_maxima(block: np.ndarray, width: int) -> np.ndarray:
    """The maxima (b x c) of each row's chunks of ``width`` cells, the remainder of the row one more
    (narrower) chunk; NaN where a chunk holds a NaN."""
    b, m = block.shape
    whole = m // width * width
    maxima = block[:, :whole].reshape(b, whole // width, width).max(axis=2)
    if whole < m:
        maxima = np.concatenate([maxima, block[:, whole:].max(axis=1, keepdims=True)], axis=1)
    return maxima


def _cells_reaching(
    block: np.ndarray, maxima: np.ndarray, bound: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, items, values) of the cells of ``block`` at or above their row's ``bound``, rows ascending:
    read from the chunks of ``width`` cells (``maxima``, `_chunk_maxima`) whose maximum reaches the bound,
    the only ones that hold such cells."""
    m = block.shape[1]
    chunk_rows, chunks = np.nonzero(maxima >= bound[:, None])
    cells = chunks[:, None] * width + np.arange(width)
    inside = cells < m
    values = block[chunk_rows[:, None], np.minimum(cells, m - 1)]
    keep = inside & (values >= bound[chunk_rows, None])
    return np.broadcast_to(chunk_rows[:, None], cells.shape)[keep], cells[keep], values[keep]


def recommend(score_block: ScoreBlock, train: Ratings, users: np.ndarray, k: int) -> np.ndarray:
    """The top-k lists (len(users) x k) of ``users``, scored block by block; each block's scores are
    overwritten (module docstring), a read-only or non-float64 block copied first. A `Screenable` score
    function is screened in float32 (module docstring): the same lists."""
    return _recommend(score_block, train, users, k, None)


def _recommend(score_block: ScoreBlock, train: Ratings, users: np.ndarray, k: int, test: Ratings | None) -> np.ndarray:
    """`recommend`, or with ``test`` lists whose hits on ``test`` (a list's items among the user's test
    items, place by place) are those of `recommend`'s, the order of interchangeable items aside
    (`screened_top_k`)."""
    relevant = None if test is None else np.sort(test.pair_keys())
    index = train.by_user()
    result = np.empty((users.size, k), dtype=np.int64)
    rows = max(1, _CELLS_PER_BLOCK // max(train.n_items, 1))
    for start in range(0, users.size, rows):
        batch = users[start : start + rows]
        lengths = index.indptr[batch + 1] - index.indptr[batch]
        excluded = (np.repeat(np.arange(batch.size), lengths), index.items[index.positions(batch)])
        screen = score_block.screen(batch, excluded, k) if isinstance(score_block, Screenable) else None
        if screen is None:
            lists, unresolved = np.empty((batch.size, k), dtype=np.int64), np.ones(batch.size, dtype=bool)
        else:
            member = None if relevant is None else _membership(relevant, batch, test.n_items)
            lists, unresolved = screened_top_k(screen, excluded, k, member)
        if unresolved.any():
            block = np.require(score_block(batch), np.float64, ["W"])
            lists[unresolved] = _top_k_overwriting(block, excluded, k)[unresolved]
        result[start : start + batch.size] = lists
    return result


def _membership(relevant: np.ndarray, batch: np.ndarray, n_items: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """(rows, items) -> whether each item is a test item of the user ``batch[row]`` (``relevant``: the
    test set's sorted pair keys)."""

    def member(rows: np.ndarray, items: np.ndarray) -> np.ndarray:
        keys = batch[rows] * np.int64(n_items) + items
        position = np.minimum(np.searchsorted(relevant, keys), max(relevant.size - 1, 0))
        return relevant[position] == keys if relevant.size else np.zeros(keys.size, dtype=bool)

    return member


def screened_top_k(
    screen: Screen, excluded: tuple[np.ndarray, np.ndarray], k: int,
    member: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(lists, unresolved): each row's top k (as `top_k` of the float64 scores ``screen`` approximates,
    without the cells ``excluded``) from its screen (of depth k); ``unresolved`` marks the rows it cannot
    decide, whose lists are meaningless (module docstring).

    With ``member`` ((rows, items) -> bool, a user's test items) a row is decided, too, when every run of
    candidates its gaps cannot order (consecutive in the re-scored order, each gap <= 2 eps) that reaches
    into the list holds test items only or none: the float64 order may permute such a run, but the run
    keeps its places (its outer gaps exceed 2 eps), so every place holds a test item exactly when it does
    in the float64 list -- the same hits, hence the same metrics bit for bit, whatever order the list gives
    the run's items."""
    bound = screen.bound
    b, m = bound.size, screen.right.shape[0]
    depth = min(k, m)
    lists = np.full((b, k), -1, dtype=np.int64)
    if depth == 0 or b == 0:
        return lists, np.zeros(b, dtype=bool)
    order = np.lexsort((-screen.approx, screen.rows))
    rows, items, values = screen.rows[order], screen.items[order], screen.approx[order]
    starts = np.searchsorted(rows, np.arange(b + 1))
    counts = np.diff(starts)
    tau = np.full(b, -np.inf)
    full = counts >= depth
    tau[full] = values[starts[:-1][full] + depth - 1]
    keep = values >= tau[rows] - 2.0 * bound[rows]
    rows, items = rows[keep], items[keep]
    wide = np.bincount(rows, minlength=b) > _WIDE
    narrow = ~wide[rows]
    rows, items = rows[narrow], items[narrow]
    rescored = _dot_products(screen, rows, items)
    if wide.any():
        rows, items, rescored = _whole_rows(screen, excluded, np.flatnonzero(wide), rows, items, rescored)
    order = np.lexsort((items, -rescored, rows))
    rows, items, rescored = rows[order], items[order], rescored[order]
    rank = np.arange(rows.size) - np.searchsorted(rows, np.arange(b))[rows]
    first = rank < depth
    lists[rows[first], rank[first]] = items[first]
    close = (rows[1:] == rows[:-1]) & ~(rescored[:-1] - rescored[1:] > 2.0 * screen.error[rows[:-1]])
    unresolved = np.zeros(b, dtype=bool)
    if member is None:
        unresolved[rows[:-1][first[:-1] & close]] = True
    else:
        unresolved[rows[:-1][_in_list_runs(rows, rank, close, depth, b) & _differ(member(rows, items))]] = True
    unresolved[rows[~np.isfinite(rescored)]] = True
    return lists, unresolved


def _in_list_runs(rows: np.ndarray, rank: np.ndarray, close: np.ndarray, depth: int, b: int) -> np.ndarray:
    """The close neighbour pairs (p, p + 1) of runs that reach into the first ``depth`` places: those with p
    in the list, and those after it up to the row's first gap that is not close."""
    split = (rank[:-1] >= depth - 1) & ~close
    stop = np.full(b, np.iinfo(np.int64).max)
    np.minimum.at(stop, rows[:-1][split], rank[:-1][split])
    return close & ((rank[:-1] < depth) | (rank[:-1] < stop[rows[:-1]]))


def _differ(member: np.ndarray) -> np.ndarray:
    """Whether each neighbour pair (p, p + 1) differs in membership."""
    return member[:-1] != member[1:]


def _dot_products(screen: Screen, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``left[rows[i]] . right[items[i]]`` for each i (``rows`` ascending): one matrix-vector product per
    row, of its items' factor rows (gathered a row at a time, so they stay in cache) with its left factor."""
    products = np.empty(rows.size)
    bounds = np.searchsorted(rows, np.arange(screen.left.shape[0] + 1))
    for row in np.flatnonzero(np.diff(bounds)):
        start, stop = bounds[row], bounds[row + 1]
        np.matmul(screen.right[items[start:stop]], screen.left[row], out=products[start:stop])
    return products


def _whole_rows(
    screen: Screen, excluded: tuple[np.ndarray, np.ndarray], wide: np.ndarray, rows: np.ndarray, items: np.ndarray,
    rescored: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, items, rescored) with every item not excluded of the rows ``wide`` appended, re-scored by one
    product of their left factors with every item's."""
    scores = screen.left[wide] @ screen.right.T
    gone = np.zeros(scores.shape, dtype=bool)
    inside = np.isin(excluded[0], wide)
    gone[np.searchsorted(wide, excluded[0][inside]), excluded[1][inside]] = True
    place, item = np.nonzero(~gone)
    return (np.concatenate([rows, wide[place]]), np.concatenate([items, item]),
            np.concatenate([rescored, scores[place, item]]))


def lightgcn_metrics(recommended: np.ndarray, users: np.ndarray, test: Ratings, k: int = 20) -> dict[str, float]:
    """``{"recall@k", "ndcg@k"}`` of the lists ``recommended`` (one row per user of ``users``) against
    ``test``, averaged over the users with test items (all of ``users`` must have some)."""
    index = test.by_user()
    counts = index.indptr[users + 1] - index.indptr[users]
    if not users.size or np.any(counts == 0):
        raise ValueError("every evaluated user needs at least one test item")
    keys = users[:, None] * np.int64(test.n_items) + recommended[:, :k]
    relevant = np.sort(test.pair_keys())
    position = np.minimum(np.searchsorted(relevant, keys), relevant.size - 1)
    hits = (relevant[position] == keys) & (recommended[:, :k] >= 0)
    discounts = 1.0 / np.log2(np.arange(k) + 2.0)
    dcg = hits @ discounts
    idcg = np.cumsum(discounts)[np.minimum(counts, k) - 1]
    return {f"recall@{k}": float(np.mean(hits.sum(axis=1) / counts)), f"ndcg@{k}": float(np.mean(dcg / idcg))}


def evaluate(score_block: ScoreBlock, train: Ratings, test: Ratings, k: int = 20) -> dict[str, float]:
    """LightGCN's Recall@k and NDCG@k of the scores ``score_block`` (module docstring)."""
    users = np.flatnonzero(test.user_counts())
    if not users.size:
        return {}
    return lightgcn_metrics(_recommend(score_block, train, users, k, test), users, test, k)


__all__ = ["Screenable", "evaluate", "lightgcn_metrics", "recommend", "screened_top_k", "top_k"]
