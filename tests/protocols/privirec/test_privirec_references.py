"""PriviRec's two centralized references (issue 30): the twin -- the same randomized power method from the
same start -- and GF-CF itself, the exact P~ and the exact top-k SVD, computed here from the paper's formula."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import fedrecsim
from fedrecsim.data.prepare import prepare_data
from fedrecsim.models import gfcf
from fedrecsim.protocols.privirec.evaluation import evaluate
from fedrecsim.scenario import parse_scenario
from fedrecsim.summary import number, summary_text
from privirec_harness import table as _table


def _gfcf_by_formula(dense: np.ndarray, k: int, gamma: float, alpha: float = 0.5) -> np.ndarray:
    """Shen et al.'s GF-CF scores S = R (P~ + gamma V^-1/2 U_k U_k^T V^1/2), R~ = U^-1/2 R V^-1/2 (PriviRec
    eqs. 1, 3, 4), with U_k the top-k right singular vectors of R~ by numpy's dense SVD; for another alpha,
    R~ = U^-alpha R V^(alpha-1) and V^(alpha-1) .. V^(1-alpha) around U_k U_k^T."""
    d_user, d_item = dense.sum(1), dense.sum(0)
    u_scale = np.where(d_user > 0, np.maximum(d_user, 1) ** -alpha, 0.0)
    i_scale = np.where(d_item > 0, np.maximum(d_item, 1) ** (alpha - 1), 0.0)
    normalized = dense * u_scale[:, None] * i_scale[None, :]
    top = np.linalg.svd(normalized, full_matrices=False)[2][:k].T
    ideal = (i_scale[:, None] * top) @ (top.T * (d_item ** (1 - alpha))[None, :])
    return dense @ (normalized.T @ normalized + gamma * ideal)


@pytest.mark.parametrize(("variant", "alpha"), [("privirec", 0.5), ("privirec_k", 0.5), ("privirec", 0.6)])
def test_the_gfcf_reference_is_gfcf_with_the_exact_svd_and_the_twin_is_the_power_method(variant: str, alpha: float) -> None:
    table = _table(variant=variant, alpha=alpha)
    table["run"]["rounds"] = 1  # one power iteration: the twin is far from the exact subspace
    result = fedrecsim.run(table)
    scenario = parse_scenario(table)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    dense = gfcf.interaction_matrix(train).toarray()
    expected = _gfcf_by_formula(dense, 12, 0.3, alpha)
    reference = result.outcome.state["gfcf"]
    np.testing.assert_allclose(reference.gfcf_scores(dense, 0.3), expected, rtol=0, atol=1e-9)
    final = result.metrics
    by_formula = evaluate(lambda users: expected[users], train, test, 20)
    assert (final["recall@20_gfcf"], final["ndcg@20_gfcf"]) == pytest.approx((by_formula["recall@20"], by_formula["ndcg@20"]), abs=1e-12)
    assert result.outcome.baselines == {"recall@20": "recall@20_gfcf", "ndcg@20": "ndcg@20_gfcf"}
    # The run equals its twin, which at L = 1 is not GF-CF.
    assert final["ndcg@20"] == final["ndcg@20_twin"] and final["max_score_gap"] <= 1e-6
    twin_scores = result.outcome.state["twin"].gfcf_scores(dense, 0.3)
    assert np.max(np.abs(twin_scores - expected)) > 1e-2


def test_the_sparse_svd_spans_the_dense_svds_top_subspace(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    R = sp.csr_matrix((rng.random((80, 50)) < 0.2).astype(float))
    dense = gfcf.top_singular_vectors(R, 6)
    monkeypatch.setattr(gfcf, "DENSE_SVD_CELLS", 0)
    sparse = gfcf.top_singular_vectors(R, 6)
    np.testing.assert_allclose(sparse @ sparse.T, dense @ dense.T, atol=1e-8)


def test_the_summary_names_both_references_for_what_they_are() -> None:
    """GF-CF's values stand in the non-private baseline column, the twin's in rows of their own: a line under
    the table says what each is -- GF-CF with the exact top-k SVD, and the twin that runs the same power method."""
    result = fedrecsim.run(_table(variant="privirec_k", secagg="ideal"))
    lines = summary_text(result).splitlines()
    legend = [line.strip() for line in lines if line.strip().startswith("*_")]
    assert legend == [
        "*_gfcf (the non-private baseline column): recall@K of GF-CF (exact top-k SVD): the exact P~ and the exact "
        "top-k singular vectors of R~ (protocol.baseline)",
        "*_twin: recall@K of the centralized twin (the same randomized power method from the same Gaussian start, "
        "run centrally; protocol.baseline): the run's own unless users dropped",
    ]
    ndcg = next(line for line in lines if line.strip().startswith("ndcg@20 "))
    assert ndcg.split()[-1] == number(result.metrics["ndcg@20_gfcf"])
    assert any(line.split() == ["ndcg@20_twin", number(result.metrics["ndcg@20_twin"])] for line in lines)
