"""Graph-filter collaborative filtering: GF-CF (Shen et al. 2021) and Turbo-CF's polynomial filters (Park et
al. 2024), centralized, with the randomized power method PriviRec decentralizes (Nicolas et al.).

Notation (PriviRec Sec. 2.1, eq. 1): R is the binary n x m interaction matrix, d_u = R 1 the user
degrees, V = Diag(1^T R) the item degrees, alpha the normalization's exponent (GF-CF and PriviRec: 1/2;
Turbo-CF tunes it, 0.6 on Gowalla and Yelp2018), and

    R~ = U^{-alpha} R V^{alpha-1},   P~ = R~^T R~ = V^{alpha-1} (sum_u d_u^{-2 alpha} R^(u)T R^(u)) V^{alpha-1}  (Thm 3.1),
    F_IDL = V^{alpha-1} S_k S_k^T V^{1-alpha},      S = R (P~ + gamma F_IDL)                         (eqs. 3, 4)

with S_k the top-k right singular vectors of R~, i.e. the top-k eigenvectors of P~. At alpha = 1/2 this is
GF-CF exactly; GF-CF defines F_IDL for alpha = 1/2 only, and V^{alpha-1} .. V^{1-alpha} is the
generalization that keeps F_IDL a similarity transform of the projector S_k S_k^T. A zero degree has a
zero inverse square root (GF-CF's code does the same), so a user or an item without interactions
contributes nothing.

S_k comes from the randomized power method (Halko et al. Alg. 4.4, PriviRec Alg. 1): X_0 = QR(G_0) for a
Gaussian G_0 of m x p -- a departure from Alg. 1, whose first step is Y_0 = R~^T Omega for a Gaussian
Omega of n x p (a range finder started in R~^T's range); here the start is a random orthonormal m x p
basis, which the first iteration maps into the range of P~ = R~^T R~ all the same (and which needs no
n x p sum over the users), then L times ``Y = P~ X; X, T = QR(Y)``, and S_k = the first k columns of X_L. The
product P~ X is computed as R~^T (R~ X), the sum over users of a_u^T (a_u X) with a_u = R~_u -- exactly
what PriviRec's users compute and securely sum -- so with the same G_0 the centralized and the
decentralized method agree up to the fixed-point rounding of secure aggregation. QR is normalised to a
non-negative diagonal of T (`qr_positive`), so that the factorization, and PriviRec-k's spectrum
diag(T_L), are unique.

PriviRec-k (Approximation 3.3): P~ ~ S_k Diag(t) S_k^T with t the first k entries of diag(T_L).

Turbo-CF: S = R f(P-bar) with P-bar = P~ raised element-wise to ``power`` and f a polynomial with no
constant term; the paper's three filters are ``1``: P-bar, ``2``: 2 P-bar - P-bar^2, ``3``: P-bar + 0.01
(-P-bar^3 + 10 P-bar^2 - 29 P-bar). With the exact P~, scores are computed row block by row block as sums
of r P-bar^j, so no power of P-bar is ever formed; PriviRec-k's P~ ~ S_k Diag(t) S_k^T has orthonormal S_k,
so f of it is S_k Diag(f(t)) S_k^T.

Scoring a block of users (`GraphFilters`): the block's rows stay sparse until they meet an m x k factor,
and the filters' item-side factors are stacked so that the block meets them in one dense product: of rank
k + k' for PriviRec-k's GF-CF (k' the ideal filter's columns), of rank k for its Turbo-CF, and one sparse
product with P~ plus one of rank k' for the exact form. At alpha < 1 the two halves of GF-CF's filter have
different item-side factors (S_k and V^{1-alpha} S_k'), so rank k + k' is the least one product can have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from fedrecsim.data.ratings import Ratings
from fedrecsim.models.screening import ScaledBasis, Screen

#: Turbo-CF's filters as the coefficients of P-bar, P-bar^2, P-bar^3 (Park et al. 2024).
TURBO_FILTERS: dict[int, tuple[float, ...]] = {1: (1.0,), 2: (2.0, -1.0), 3: (0.71, 0.1, -0.01)}


@dataclass(frozen=True)
class GFCFHyper:
    """GF-CF's hyper-parameters.

    Attributes:
        k: singular vectors in the ideal low-pass filter (and PriviRec-k's rank).
        gamma: the weight of the ideal low-pass filter.
        iterations: L, power iterations.
        oversample: p - k, extra columns carried through the iterations (p = k + oversample).
        low_rank: PriviRec-k: P~ ~ S_k Diag(t) S_k^T instead of the exact P~.
        ideal_k: the leading columns of S_k in the ideal low-pass filter, at most k; 0 means all
            k (PriviRec-k's users may use fewer for F_IDL than for P~, Fig. 5: "select leading p columns").
        alpha: the normalization's exponent, R~ = U^{-alpha} R V^{alpha-1} (module docstring).
    """

    k: int = 256
    gamma: float = 0.3
    iterations: int = 2
    oversample: int = 0
    low_rank: bool = False
    ideal_k: int = 0
    alpha: float = 0.5

    def __post_init__(self) -> None:
        for name, value, low in (("k", self.k, 1), ("iterations", self.iterations, 1), ("oversample", self.oversample, 0),
                                 ("ideal_k", self.ideal_k, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.ideal_k > self.k:
            raise ValueError(f"ideal_k must be <= k = {self.k}, got {self.ideal_k}")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha!r}")

    @property
    def p(self) -> int:
        """The iteration rank p = k + oversample."""
        return self.k + self.oversample


def interaction_matrix(ratings: Ratings) -> sp.csr_matrix:
    """The binary n_users x n_items CSR matrix R of ``ratings`` (every entry, whatever its value, is a 1)."""
    return sp.csr_matrix(
        (np.ones(len(ratings)), (ratings.users, ratings.items)), shape=(ratings.n_users, ratings.n_items)
    )


def inverse_sqrt(degrees: np.ndarray) -> np.ndarray:
    """d^{-1/2} elementwise, 0 where d = 0."""
    degrees = np.asarray(degrees, dtype=np.float64)
    result = np.zeros_like(degrees)
    positive = degrees > 0
    result[positive] = 1.0 / np.sqrt(degrees[positive])
    return result


def degree_power(degrees: np.ndarray, exponent: float) -> np.ndarray:
    """d^exponent elementwise, 0 where d = 0 (`inverse_sqrt` is exponent -1/2)."""
    degrees = np.asarray(degrees, dtype=np.float64)
    result = np.zeros_like(degrees)
    positive = degrees > 0
    result[positive] = np.power(degrees[positive], exponent)
    return result


def normalized_interactions(R: sp.spmatrix, alpha: float = 0.5) -> sp.csr_matrix:
    """R~ = U^{-alpha} R V^{alpha-1}."""
    R = sp.csr_matrix(R, dtype=np.float64)
    users = degree_power(np.asarray(R.sum(axis=1)).ravel(), -alpha)
    items = degree_power(np.asarray(R.sum(axis=0)).ravel(), alpha - 1.0)
    return sp.csr_matrix(sp.diags(users) @ R @ sp.diags(items))


def normalized_item_item(R: sp.spmatrix, alpha: float = 0.5) -> np.ndarray:
    """P~ = R~^T R~ as a dense m x m matrix."""
    Rt = normalized_interactions(R, alpha)
    return np.asarray((Rt.T @ Rt).toarray())


def qr_positive(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reduced QR factorization Y = X T with a non-negative diagonal of T (unique for full rank Y)."""
    X, T = np.linalg.qr(Y, mode="reduced")
    signs = np.sign(np.diag(T))
    signs[signs == 0] = 1.0
    return X * signs, T * signs[:, None]


def gaussian_start(n_items: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """X_0: the orthonormal Q of a standard Gaussian m x p matrix drawn from ``rng``.

    Raises:
        ValueError: p > m (the power method needs p orthonormal columns in R^m).
    """
    if p > n_items:
        raise ValueError(f"the power method's rank p = {p} exceeds the number of items {n_items}")
    return qr_positive(rng.standard_normal((n_items, p)))[0]


def power_method(
    apply: Callable[[np.ndarray], np.ndarray], start: np.ndarray, iterations: int
) -> tuple[np.ndarray, np.ndarray]:
    """(X_L, T_L) after ``iterations`` steps ``X, T = QR(apply(X))`` from X_0 = ``start``."""
    X, T = start, np.eye(start.shape[1])
    for _ in range(iterations):
        X, T = qr_positive(apply(X))
    return X, T


@dataclass(frozen=True)
class GraphFilters:
    """What a user needs to score its own row: the graph filters of GF-CF and Turbo-CF.

    Attributes:
        degrees: the item degrees diag(V).
        basis: S_k, m x k.
        item_item: P~ (m x m), or None for PriviRec-k's low-rank form.
        spectrum: PriviRec-k's t (k), or None.
        ideal_rank: the leading columns of S_k in F_IDL (0: all; at most k).
        alpha: the normalization's exponent (F_IDL = V^{alpha-1} S_k S_k^T V^{1-alpha}).

    The scores' item-side factors (V^{alpha-1} S_k', V^{1-alpha} S_k', [S_k, V^{1-alpha} S_k']: m (k + k')
    floats each at most) are derived from the fields on first use and kept with the filters, which never
    change.
    """

    degrees: np.ndarray
    basis: np.ndarray
    item_item: np.ndarray | None = None
    spectrum: np.ndarray | None = None
    ideal_rank: int = 0
    alpha: float = 0.5

    def __post_init__(self) -> None:
        if (self.item_item is None) == (self.spectrum is None):
            raise ValueError("give exactly one of item_item (PriviRec) and spectrum (PriviRec-k)")

    @cached_property
    def _ideal_rows(self) -> np.ndarray:
        """V^{alpha-1} S_k' (m x k', S_k' the ideal filter's columns): what a row meets first in F_IDL."""
        return self._scaled_ideal()

    def _scaled_ideal(self) -> np.ndarray:
        """`_ideal_rows`, computed anew."""
        return self._ideal_basis * degree_power(self.degrees, self.alpha - 1.0)[:, None]

    @cached_property
    def _ideal_items(self) -> np.ndarray:
        """V^{1-alpha} S_k' (m x k'): F_IDL = `_ideal_rows` `_ideal_items`^T."""
        return self._ideal_basis * degree_power(self.degrees, 1.0 - self.alpha)[:, None]

    @cached_property
    def _gfcf_side(self) -> ScaledBasis:
        """[S_k, V^{1-alpha} S_k'] (m x (k + k'), its ``right``): PriviRec-k's GF-CF filter is ``[rows S_k
        Diag(t), gamma rows V^{alpha-1} S_k'] @ right^T``, one dense product of rank k + k'."""
        return ScaledBasis(self.basis, degree_power(self.degrees, 1.0 - self.alpha), self._ideal_basis.shape[1])

    @cached_property
    def _turbo_side(self) -> ScaledBasis:
        """S_k: PriviRec-k's Turbo-CF filter is ``(rows S_k Diag(f(t))) @ S_k^T``."""
        return ScaledBasis(self.basis)

    @property
    def _ideal_basis(self) -> np.ndarray:
        return self.basis[:, : self.ideal_rank] if self.ideal_rank else self.basis

    def item_item_apply(self, rows: np.ndarray | sp.spmatrix) -> np.ndarray:
        """rows P~ (or rows S_k Diag(t) S_k^T)."""
        rows = _user_rows(rows)
        if self.item_item is not None:
            return np.asarray(rows @ self.item_item)
        return ((rows @ self.basis) * self.spectrum) @ self.basis.T

    def ideal_apply(self, rows: np.ndarray | sp.spmatrix) -> np.ndarray:
        """rows F_IDL = (rows V^{alpha-1} S_k') (V^{1-alpha} S_k')^T."""
        return (_user_rows(rows) @ self._ideal_rows) @ self._ideal_items.T

    def gfcf_scores(self, rows: np.ndarray | sp.spmatrix, gamma: float = 0.3) -> np.ndarray:
        """GF-CF's scores of the interaction rows ``rows`` (b x m): rows (P~ + gamma F_IDL).

        A sparse block stays sparse until its product with an m x k factor, so the only dense products of
        the block's width are one with P~ (exact form) or, for PriviRec-k, one of rank k + k' with
        `_gfcf_side`'s item factor -- instead of four of a densified block with the m x k bases.
        """
        rows = _user_rows(rows)
        if self.item_item is None:
            return self._gfcf_left(rows, gamma) @ self._gfcf_side.right.T
        ideal = gamma * (rows @ self._ideal_rows)
        return np.asarray(rows @ self.item_item) + ideal @ self._ideal_items.T

    @cached_property
    def _gfcf_rows(self) -> np.ndarray:
        """[S_k, `_ideal_rows`] (m x (k + k')): what a sparse row block meets first in `_gfcf_left`."""
        return np.hstack([self.basis, self._scaled_ideal()])

    def _gfcf_left(self, rows: np.ndarray | sp.csr_matrix, gamma: float) -> np.ndarray:
        """[rows S_k Diag(t), gamma rows V^{alpha-1} S_k']: PriviRec-k's GF-CF left factor of ``rows``
        (`_user_rows`). A sparse block is multiplied by `_gfcf_rows` in one pass: the sparse product sums
        each output cell over the row's entries in the same order whatever the width, so the cells are
        bit for bit those of the two products."""
        if not sp.issparse(rows):
            return np.hstack([(rows @ self.basis) * self.spectrum, gamma * (rows @ self._ideal_rows)])
        left = np.asarray(rows @ self._gfcf_rows)
        k = self.basis.shape[1]
        left[:, :k] *= self.spectrum
        left[:, k:] *= gamma
        return left

    def _check_turbo(self, filter: int, power: float) -> None:  # noqa: A002
        if filter not in TURBO_FILTERS:
            raise ValueError(f"Turbo-CF's filter is 1, 2 or 3, got {filter!r}")
        if self.item_item is None and power != 1.0:
            raise ValueError("the element-wise power of PriviRec-k's low-rank P~ needs it dense: use power = 1")

    def _turbo_left(self, rows: np.ndarray | sp.csr_matrix, filter: int) -> np.ndarray:  # noqa: A002
        """rows S_k Diag(f(t)): PriviRec-k's Turbo-CF left factor of ``rows`` (`_user_rows`)."""
        response = sum(c * self.spectrum ** (j + 1) for j, c in enumerate(TURBO_FILTERS[filter]))
        return (rows @ self.basis) * response

    def gfcf_block(self, R: sp.spmatrix, gamma: float = 0.3) -> Callable[[np.ndarray], np.ndarray]:
        """users -> `gfcf_scores` of their rows of the interaction matrix ``R``: PriviRec-k's filters give
        a `LowRankScores` (which `fedrecsim.protocols.privirec.evaluation.evaluate` screens in float32), the
        exact form a plain function."""
        R = sp.csr_matrix(R, dtype=np.float64)
        if self.item_item is None:
            return LowRankScores(R, lambda rows: self._gfcf_left(rows, gamma), self._gfcf_side)
        return lambda users: self.gfcf_scores(R[users], gamma)

    def turbo_block(self, R: sp.spmatrix, filter: int = 2, power: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:  # noqa: A002
        """users -> `turbo_scores` of their rows of ``R`` (a `LowRankScores` for PriviRec-k, as `gfcf_block`).

        Raises:
            ValueError: as `turbo_scores`.
        """
        R = sp.csr_matrix(R, dtype=np.float64)
        self._check_turbo(filter, power)
        if self.item_item is None:
            return LowRankScores(R, lambda rows: self._turbo_left(rows, filter), self._turbo_side)
        return lambda users: self.turbo_scores(R[users], filter, power)

    def turbo_scores(self, rows: np.ndarray | sp.spmatrix, filter: int = 2, power: float = 1.0) -> np.ndarray:  # noqa: A002
        """Turbo-CF's scores: rows f(P~ ^{o power}) for the paper's filter 1, 2 or 3.

        PriviRec-k's S_k has orthonormal columns (a QR's Q), so (S_k Diag(t) S_k^T)^j = S_k Diag(t^j) S_k^T
        and f of it is S_k Diag(f(t)) S_k^T: one dense product. The exact P~ is applied power by power.

        Raises:
            ValueError: an unknown filter, or an element-wise power other than 1 of the low-rank P~.
        """
        self._check_turbo(filter, power)
        rows = _user_rows(rows)
        coefficients = TURBO_FILTERS[filter]
        if self.item_item is None:
            return self._turbo_left(rows, filter) @ self._turbo_side.right.T
        bar = self.item_item if power == 1.0 else np.power(self.item_item, power)
        block = np.asarray(rows @ bar)
        total = coefficients[0] * block
        for coefficient in coefficients[1:]:
            block = block @ bar
            total += coefficient * block
        return total


@dataclass(frozen=True, eq=False)
class LowRankScores:
    """users -> the b x m float64 scores ``left(R[users]) @ side.right^T`` of a low-rank filter (bit for bit
    `GraphFilters.gfcf_scores` / `turbo_scores` of those rows: the same functions compute them), and their
    float32 `screen` (`fedrecsim.models.screening`).

    Attributes:
        R: the interaction matrix (CSR, float64).
        left: interaction rows (`_user_rows`) -> their left factor.
        side: the item factor and its screening.
    """

    R: sp.csr_matrix
    left: Callable[[sp.csr_matrix], np.ndarray]
    side: ScaledBasis

    def __call__(self, users: np.ndarray) -> np.ndarray:
        return self.left(self.R[users]) @ self.side.right.T

    def screen(self, users: np.ndarray, excluded: tuple[np.ndarray, np.ndarray], depth: int) -> Screen | None:
        """The float32 screen of ``users``' scores without the cells ``excluded`` (block rows, items) for their
        top ``depth``, or None where it cannot be bounded (`ScaledBasis.screen`)."""
        return self.side.screen(self.left(self.R[users]), excluded, depth)


def _user_rows(rows: np.ndarray | sp.spmatrix) -> np.ndarray | sp.csr_matrix:
    """A block of interaction rows as float64: a sparse block stays sparse (CSR), anything else becomes a
    2-D array (one row for a vector)."""
    if sp.issparse(rows):
        return sp.csr_matrix(rows, dtype=np.float64)
    return np.atleast_2d(np.asarray(rows, dtype=np.float64))


def fit_gfcf(R: sp.spmatrix | Ratings, hyper: GFCFHyper, rng: np.random.Generator) -> GraphFilters:
    """Centralized GF-CF (or PriviRec-k's low-rank variant): the filters of ``R``, the power method
    started from `gaussian_start` (m, p, ``rng``)."""
    if isinstance(R, Ratings):
        R = interaction_matrix(R)
    R = sp.csr_matrix(R, dtype=np.float64)
    n_items = R.shape[1]
    if hyper.k > n_items:
        raise ValueError(f"k = {hyper.k} exceeds the number of items {n_items}")
    Rt = normalized_interactions(R, hyper.alpha)
    degrees = np.asarray(R.sum(axis=0)).ravel()
    start = gaussian_start(n_items, hyper.p, rng)
    X, T = power_method(lambda X: Rt.T @ (Rt @ X), start, hyper.iterations)
    basis = np.ascontiguousarray(X[:, : hyper.k])
    if hyper.low_rank:
        return GraphFilters(degrees, basis, spectrum=np.diag(T)[: hyper.k].copy(), ideal_rank=hyper.ideal_k, alpha=hyper.alpha)
    return GraphFilters(degrees, basis, item_item=np.asarray((Rt.T @ Rt).toarray()), ideal_rank=hyper.ideal_k, alpha=hyper.alpha)


#: `top_singular_vectors` takes a dense SVD up to this many cells of R~ (n x m), ARPACK's svds beyond.
DENSE_SVD_CELLS = 1 << 25


def exact_basis(R: sp.spmatrix, k: int, alpha: float = 0.5) -> np.ndarray:
    """The exact top-k right singular vectors of R~ (dense SVD; for tests and small data)."""
    Rt = normalized_interactions(R, alpha).toarray()
    return np.linalg.svd(Rt, full_matrices=False)[2][:k].T


def top_singular_vectors(R: sp.spmatrix, k: int, alpha: float = 0.5) -> np.ndarray:
    """The exact top-k right singular vectors of R~ (m x k, orthonormal, by decreasing singular value): a
    dense SVD while R~ has at most `DENSE_SVD_CELLS` cells or k >= min(n, m) - 1, else ARPACK's svds
    started from the all-ones vector (so the result does not depend on a random start)."""
    n, m = R.shape
    if n * m <= DENSE_SVD_CELLS or k >= min(n, m) - 1:
        return exact_basis(R, k, alpha)
    Rt = normalized_interactions(R, alpha)
    _, values, vt = svds(Rt, k=k, v0=np.ones(min(n, m)), solver="arpack")
    order = np.argsort(-values, kind="stable")
    return np.ascontiguousarray(vt[order].T)


def fit_gfcf_exact(R: sp.spmatrix | Ratings, k: int, alpha: float = 0.5) -> GraphFilters:
    """GF-CF as Shen et al. define it: the exact P~ and the exact top-k singular vectors of R~ in F_IDL
    (`top_singular_vectors`) -- the reference the randomized power method approximates (``ideal_rank``
    = k, so ``basis`` holds exactly the filter's columns)."""
    if isinstance(R, Ratings):
        R = interaction_matrix(R)
    R = sp.csr_matrix(R, dtype=np.float64)
    if not 1 <= k <= R.shape[1]:
        raise ValueError(f"k = {k} must be in 1..{R.shape[1]} (the number of items)")
    Rt = normalized_interactions(R, alpha)
    degrees = np.asarray(R.sum(axis=0)).ravel()
    return GraphFilters(degrees, top_singular_vectors(R, k, alpha), item_item=np.asarray((Rt.T @ Rt).toarray()), alpha=alpha)


__all__ = [
    "TURBO_FILTERS",
    "GFCFHyper",
    "GraphFilters",
    "LowRankScores",
    "DENSE_SVD_CELLS",
    "degree_power",
    "exact_basis",
    "fit_gfcf",
    "fit_gfcf_exact",
    "gaussian_start",
    "interaction_matrix",
    "inverse_sqrt",
    "normalized_interactions",
    "normalized_item_item",
    "power_method",
    "qr_positive",
    "top_singular_vectors",
]
