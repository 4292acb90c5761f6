"""`top_k` against a slow reference that sorts every row whole: ties, excluded cells, short rows, +-inf and NaN."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrecsim.protocols.privirec.evaluation import top_k


def reference(scores: np.ndarray, excluded: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """Each row's cells neither excluded nor NaN, sorted by (score descending, item ascending); the first k
    slots hold their items, -1 where the score is not finite or the row has run out."""
    b, m = scores.shape
    gone = np.zeros((b, m), dtype=bool)
    gone[excluded] = True
    result = np.full((b, k), -1, dtype=np.int64)
    for row in range(b):
        cells = sorted((-float(scores[row, item]), item) for item in range(m) if not gone[row, item] and not np.isnan(scores[row, item]))
        for slot, (negated, item) in enumerate(cells[:k]):
            if np.isfinite(negated):
                result[row, slot] = item
    return result


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], int]:
    b = draw(st.integers(0, 6))
    m = draw(st.integers(0, 90))
    # Few distinct values: ties everywhere; now and then an infinity or a NaN.
    values = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0, -1.0]), st.floats(-2, 2), st.sampled_from([np.inf, -np.inf, np.nan]))
    kind = draw(st.sampled_from(["ties", "mixed"]))
    elements = st.sampled_from([0.0, 0.5, 1.0]) if kind == "ties" else values
    scores = draw(hnp.arrays(np.float64, (b, m), elements=elements))
    mask = draw(hnp.arrays(np.bool_, (b, m), elements=st.booleans() if draw(st.booleans()) else st.just(False)))
    k = draw(st.integers(1, 30))
    return scores, tuple(np.nonzero(mask)), k


@settings(max_examples=400, deadline=None)
@given(cases())
def test_top_k_is_the_whole_sort(case: tuple[np.ndarray, tuple[np.ndarray, np.ndarray], int]) -> None:
    scores, excluded, k = case
    before = scores.copy()
    assert top_k(scores, excluded, k).tolist() == reference(scores, excluded, k).tolist()
    np.testing.assert_array_equal(scores, before)  # the caller's scores are left as they were


@st.composite
def wide_cases(draw: st.DrawFn) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], int]:
    """Rows of up to 700 cells and k <= 3: chunks of up to 43 cells, few of which reach the bound."""
    b, m, k = draw(st.integers(1, 4)), draw(st.integers(1, 700)), draw(st.integers(1, 3))
    elements = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.sampled_from([np.inf, -np.inf, np.nan]))
    scores = draw(hnp.arrays(np.float64, (b, m), elements=st.sampled_from([0.0, 0.5]) if draw(st.booleans()) else elements))
    mask = draw(hnp.arrays(np.bool_, (b, m), elements=st.booleans() if draw(st.booleans()) else st.just(False)))
    return scores, tuple(np.nonzero(mask)), k


@settings(max_examples=200, deadline=None)
@given(wide_cases())
def test_top_k_of_wide_rows_is_the_whole_sort(case: tuple[np.ndarray, tuple[np.ndarray, np.ndarray], int]) -> None:
    scores, excluded, k = case
    assert top_k(scores, excluded, k).tolist() == reference(scores, excluded, k).tolist()


def test_a_wide_row_with_its_best_cells_in_one_chunk_and_a_tie_at_the_cut() -> None:
    m, k = 3840, 20
    scores = np.zeros((2, m))
    scores[0, 504:516] = np.arange(19, 7, -1)  # 12 of the 19 best cells fill one chunk of width 12
    scores[0, 516:523] = np.arange(7, 0, -1)
    scores[0, [3, 700, 3839]] = 0.5  # the 20th place is a three-way tie, won by the lowest item
    scores[1] = np.linspace(1.0, 0.0, m)
    excluded = (np.array([1, 1]), np.array([0, 2]))
    assert top_k(scores, excluded, k).tolist() == reference(scores, excluded, k).tolist()
    assert top_k(scores, excluded, k)[0, -1] == 3
