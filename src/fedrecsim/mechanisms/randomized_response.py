"""Minto et al.'s randomized binary response on item-gradient matrices (RecSys 2021, Algorithm 1).

A user holding an M×F item-gradient matrix G sends k reports. Each report independently

1. picks an item i uniformly from M and projects (clips) row G[i] onto [−1, 1],
2. picks a factor f uniformly from F,
3. draws β ∈ {−1, +1} with P[β = +1] = (g·(e^ε − 1) + e^ε + 1) / (2e^ε + 2) for g = clip(G[i, f]),

and the report means "+B or −B at (i, f)" with B = (e^ε + 1)/(e^ε − 1) · M·F (eq. (8)). Picking an
item and then a factor uniformly is the same as picking the row-major flat index i·F + f uniformly
from M·F, which is how a report is represented here: ``(flat_index: int64, bit: int8)``.

Decision: ``bit`` is the sign β ∈ {−1, +1} (the paper's j ∈ {0, 1} is j = (β + 1)/2), so a report's
value is simply ``bit * B`` at ``flat_index``.

Each report is ε-LDP (Theorem 3): its probability depends on G only through P[β | g], and
P[β | g] / P[β | g'] <= e^ε for g, g' ∈ [−1, 1]. A user's k reports together are kε-LDP by
composition.

(e^ε − 1)/(e^ε + 1) is computed as tanh(ε/2), which is the same number but does not overflow for
large ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks

EntryFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``entries(items, factors) -> values``: gradient entries G_u[items[u, r], factors[u, r]] for user u.

All three arrays have shape (n_users, k); row u belongs to user u.
"""


def bit_probability(g: object, epsilon: float) -> np.ndarray:
    """P[β = +1 | g] = (g·(e^ε − 1) + e^ε + 1) / (2e^ε + 2), g clipped to [−1, 1] (Alg. 1, l. 5).

    Equivalently 1/2 + (g/2)·tanh(ε/2); it lies in [1/(e^ε + 1), e^ε/(e^ε + 1)], and
    E[β] = g·tanh(ε/2).

    Args:
        g: Gradient entries, any shape; values outside [−1, 1] are clipped (the projection of l. 3).
        epsilon: Per-report budget ε > 0.

    Returns:
        float64 array of the shape of ``g``.

    Raises:
        ConfigError: ``g`` is not finite or ``epsilon`` is not > 0.
    """
    values = _checks.float_array(g, "bit_probability(g)")
    eps = _checks.positive(epsilon, "bit_probability(epsilon)")
    return _probability(values, eps)


def report_magnitude(epsilon: float, n_items: int, n_factors: int) -> float:
    """B = (e^ε + 1)/(e^ε − 1) · M·F, the magnitude of every report (Minto et al., eq. (8)).

    B makes a single report unbiased: it lands on a given entry with probability 1/(MF), and there its
    mean is B·(2p − 1) = B·g·tanh(ε/2) = MF·g, so E[report] = clip(G) entrywise.

    Raises:
        ConfigError: A parameter is out of range.
    """
    eps = _checks.positive(epsilon, "report_magnitude(epsilon)")
    items = _checks.integer(n_items, "report_magnitude(n_items)", 1)
    factors = _checks.integer(n_factors, "report_magnitude(n_factors)", 1)
    return items * factors / math.tanh(eps / 2.0)


def ldp_reports(
    rng: np.random.Generator, gradient: object, epsilon: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """k independent ε-LDP reports of one user's M×F gradient (Algorithm 1, run k times).

    Only the k sampled entries are read (and checked for finiteness); clipping a row and then reading
    one entry equals clipping that entry. Draw order: k flat indices, then k uniforms for β; the
    result equals ``ldp_reports_batch(rng, gradient[None], epsilon, k)`` row 0 for the same generator
    state.

    Args:
        rng: The user's generator.
        gradient: float[M, F], the user's item-gradient matrix.
        epsilon: Per-report budget ε > 0.
        k: Number of reports, >= 1.

    Returns:
        ``(flat_index, bit)``: int64[k] row-major indices i·F + f, and int8[k] signs in {−1, +1}.

    Raises:
        ConfigError: ``gradient`` is not a non-empty 2-D real array, a sampled entry is not finite,
            or a parameter is out of range.
    """
    stack = _real_array(gradient, "ldp_reports(gradient)", ndim=2)[np.newaxis]
    flat_index, bits = _reports(
        rng, _dense_entries(stack), stack.shape, epsilon, k, "ldp_reports(gradient)"
    )
    return flat_index[0], bits[0]


def ldp_reports_batch(
    rng: np.random.Generator, gradients: object, epsilon: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """k ε-LDP reports from each of U users at once, from a dense float[U, M, F] gradient stack.

    Same distribution as calling `ldp_reports` per user; one generator serves all users, so use it
    where one party legitimately draws for many (a vectorized simulation of many clients), and
    `ldp_reports` where each user actor owns its generator.

    Args:
        rng: The generator to draw from.
        gradients: float[U, M, F].
        epsilon: Per-report budget ε > 0.
        k: Reports per user, >= 1.

    Returns:
        ``(flat_index, bit)``: int64[U, k] and int8[U, k]; row u holds user u's reports.

    Raises:
        ConfigError: ``gradients`` is not a non-empty 3-D real array, a sampled entry is not
            finite, or a parameter is out of range.
    """
    stack = _real_array(gradients, "ldp_reports_batch(gradients)", ndim=3)
    return _reports(
        rng, _dense_entries(stack), stack.shape, epsilon, k, "ldp_reports_batch(gradients)"
    )


def ldp_reports_lazy(
    rng: np.random.Generator,
    entries: EntryFunction,
    n_users: int,
    n_items: int,
    n_factors: int,
    epsilon: float,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Like `ldp_reports_batch`, but reads gradient entries through ``entries`` instead of a dense stack.

    A report only needs one entry of the gradient, so the U×M×F stack never has to exist: with
    implicit MF, ``entries`` can compute just the U·k sampled entries from the user and item factors.

    Args:
        rng: The generator to draw from.
        entries: ``entries(items, factors) -> values``, all of shape (n_users, k); see `EntryFunction`.
        n_users: U >= 1.
        n_items: M >= 1.
        n_factors: F >= 1.
        epsilon: Per-report budget ε > 0.
        k: Reports per user, >= 1.

    Returns:
        ``(flat_index, bit)``: int64[U, k] and int8[U, k].

    Raises:
        ConfigError: ``entries`` returns the wrong shape or a non-finite value, or a parameter is
            out of range.
    """
    users = _checks.integer(n_users, "ldp_reports_lazy(n_users)", 1)
    items = _checks.integer(n_items, "ldp_reports_lazy(n_items)", 1)
    factors = _checks.integer(n_factors, "ldp_reports_lazy(n_factors)", 1)
    return _reports(rng, entries, (users, items, factors), epsilon, k, "ldp_reports_lazy(entries)")


def estimate_mean_gradient(
    flat_index: object,
    bits: object,
    n_reports: int,
    n_items: int,
    n_factors: int,
    epsilon: float,
) -> np.ndarray:
    """The server's unbiased estimate of the mean clipped gradient (Minto et al., eq. (9)).

    Each report adds bit·B at its index; the sum is divided by ``n_reports``. A single report X_r of
    user u satisfies E[X_r] = clip(G_u), so when ``n_reports`` is the number of reports summed and every
    user sent the same k, E[estimate] = (1/N) Σ_u clip(G_u). Eq. (9) writes 1/N because the paper's
    estimator has one report per user; with k reports per user the divisor must be N·k (dividing by N
    would estimate k times the mean). If users sent different numbers of reports, the estimate is the
    report-weighted mean.

    Args:
        flat_index: Integer indices in [0, M·F), any shape (e.g. int64[U, k] from a batch).
        bits: Signs in {−1, +1}, same shape as ``flat_index``.
        n_reports: The divisor, >= 1; normally the number of reports, ``flat_index.size``.
        n_items: M >= 1.
        n_factors: F >= 1.
        epsilon: The per-report ε the reports were made with.

    Returns:
        float64[M, F].

    Raises:
        ConfigError: Indices out of range, bits not ±1, mismatched shapes, or a bad parameter.
    """
    divisor = _checks.integer(n_reports, "estimate_mean_gradient(n_reports)", 1)
    magnitude = report_magnitude(epsilon, n_items, n_factors)
    size = n_items * n_factors
    indices = np.asarray(flat_index)
    signs = np.asarray(bits)
    if not np.issubdtype(indices.dtype, np.integer):
        raise ConfigError(
            "estimate_mean_gradient(flat_index)", f"must be integers, got dtype {indices.dtype}"
        )
    if signs.shape != indices.shape:
        raise ConfigError(
            "estimate_mean_gradient(bits)",
            f"must have the shape of flat_index {indices.shape}, got {signs.shape}",
        )
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise ConfigError(
            "estimate_mean_gradient(flat_index)",
            f"must lie in [0, {size}) for M={n_items}, F={n_factors}, "
            f"got values in [{indices.min()}, {indices.max()}]",
        )
    if not np.issubdtype(signs.dtype, np.integer) or (np.abs(signs) != 1).any():
        raise ConfigError("estimate_mean_gradient(bits)", "must be integer signs in {-1, +1}")
    totals = np.bincount(indices.ravel(), weights=signs.ravel(), minlength=size)
    totals *= magnitude / divisor
    return totals.reshape(n_items, n_factors)


def likelihood_ratio_bound(epsilon: float) -> float:
    """e^ε: the largest ratio P[o | G] / P[o | G'] of Algorithm 1 over outputs o and inputs G, G'.

    It is attained by g = +1 against g' = −1 at the reported entry (Theorem 3 of Minto et al.);
    `output_distribution` lets a test check the ratio exactly.

    Raises:
        ConfigError: ``epsilon`` is not > 0.
    """
    eps = _checks.positive(epsilon, "likelihood_ratio_bound(epsilon)")
    with np.errstate(over="ignore"):
        return float(np.exp(eps))


def output_distribution(gradient: object, epsilon: float) -> np.ndarray:
    """The exact distribution of one report of ``gradient`` over all (flat_index, bit) outputs.

    P[(j, +1)] = p(g_j)/(M·F) and P[(j, −1)] = (1 − p(g_j))/(M·F), where g_j is the j-th entry in
    row-major order, clipped to [−1, 1], and p is `bit_probability`.

    Args:
        gradient: float[M, F] (any shape is accepted and read row-major), all finite.
        epsilon: Per-report budget ε > 0.

    Returns:
        float64[M·F, 2]; column 0 is bit −1 and column 1 is bit +1; the array sums to 1.

    Raises:
        ConfigError: ``gradient`` is empty or not finite, or ``epsilon`` is not > 0.
    """
    values = _checks.float_array(gradient, "output_distribution(gradient)").ravel()
    if values.size == 0:
        raise ConfigError("output_distribution(gradient)", "must have at least one entry")
    eps = _checks.positive(epsilon, "output_distribution(epsilon)")
    plus = _probability(values, eps)
    return np.stack([1.0 - plus, plus], axis=1) / values.size


def _probability(values: np.ndarray, epsilon: float) -> np.ndarray:
    return 0.5 + 0.5 * math.tanh(epsilon / 2.0) * np.clip(values, -1.0, 1.0)


def _real_array(value: object, where: str, ndim: int) -> np.ndarray:
    # Deliberately no finiteness scan here: only the sampled entries are read, and those are checked.
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(where, f"must be an array of real numbers ({exc})") from exc
    if array.ndim != ndim or array.size == 0:
        raise ConfigError(where, f"must be a non-empty {ndim}-D array, got shape {array.shape}")
    return array


def _dense_entries(stack: np.ndarray) -> EntryFunction:
    """An `EntryFunction` over a dense float[U, M, F] stack (read through a view when contiguous)."""
    n_users, n_items, n_factors = stack.shape
    flat = stack.reshape(n_users, n_items * n_factors)

    def entries(items: np.ndarray, factors: np.ndarray) -> np.ndarray:
        return np.take_along_axis(flat, items * n_factors + factors, axis=1)

    return entries


def _reports(
    rng: np.random.Generator,
    entries: EntryFunction,
    dims: tuple[int, ...],
    epsilon: float,
    k: int,
    source: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 for U users × k reports; ``source`` names the caller's gradient argument."""
    n_users, n_items, n_factors = dims
    caller = source.partition("(")[0]
    _checks.generator(rng, f"{caller}(rng)")
    eps = _checks.positive(epsilon, f"{caller}(epsilon)")
    count = _checks.integer(k, f"{caller}(k)", 1)
    shape = (n_users, count)
    flat_index = rng.integers(0, n_items * n_factors, size=shape, dtype=np.int64)
    items, factors = np.divmod(flat_index, n_factors)
    values = np.asarray(entries(items, factors), dtype=np.float64)
    if values.shape != shape:
        raise ConfigError(source, f"must return shape {shape}, got {values.shape}")
    finite = np.isfinite(values)
    if not finite.all():
        user, report = (int(i) for i in np.argwhere(~finite)[0])
        raise ConfigError(
            source,
            f"user {user} has a non-finite entry {float(values[user, report])!r} at item "
            f"{int(items[user, report])}, factor {int(factors[user, report])}",
        )
    bits = (rng.random(shape) < _probability(values, eps)).astype(np.int8)
    # {0, 1} -> {-1, +1} in place: the sign is what the estimator multiplies by B.
    bits *= 2
    bits -= 1
    return flat_index, bits
