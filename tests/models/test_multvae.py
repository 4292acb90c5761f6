"""Mult-VAE in numpy: the forward pass as the papers write it, exact gradients, the centralized trainer."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from fedrecsim.data import synthetic_implicit
from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.adam import AdamHyper
from fedrecsim.models.multvae import (
    BIAS_INIT_STD,
    Batch,
    Layout,
    MultVAEHyper,
    Noise,
    batch_gradient,
    dense_user_gradients,
    draw_noise,
    init_params,
    losses,
    scores,
    train_centralized,
    user_gradients,
)

HYPER = MultVAEHyper(hidden=7, latent=3, dropout=0.5, beta=0.2)
LAYOUT = Layout(11, 7, 3)


def tiny_batch() -> Batch:
    """Four users over 11 items: binary rows, a row with a count of 3, and an empty row."""
    X = np.zeros((4, 11))
    X[0, [0, 3, 4, 9]] = 1.0
    X[1, [1, 2, 5, 6, 7, 10]] = 1.0
    X[2, [5]] = 3.0
    X[3, [2, 8]] = [1.0, 2.0]
    csr = scipy.sparse.csr_matrix(X)
    empty = Batch(np.array([0, 0], dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0), 11)
    full = Batch(csr.indptr.astype(np.int64), csr.indices.astype(np.int64), csr.data.astype(np.float64), 11)
    # The empty row sits between the others.
    rows = [full.subset([0]), full.subset([1]), empty, full.subset([2]), full.subset([3])]
    indptr = np.concatenate([[0], np.cumsum([row.items.size for row in rows])])
    return Batch(indptr, np.concatenate([r.items for r in rows]), np.concatenate([r.values for r in rows]), 11)


def central_differences(function, flat: np.ndarray, step: float = 1e-6) -> np.ndarray:
    numeric = np.empty_like(flat)
    for index in range(flat.size):
        shifted = flat.copy()
        shifted[index] += step
        up = function(shifted)
        shifted[index] -= 2 * step
        numeric[index] = (up - function(shifted)) / (2 * step)
    return numeric


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / (np.linalg.norm(a) + np.linalg.norm(b)))


def test_the_batch_gradient_matches_central_finite_differences_in_float64() -> None:
    """Every weight and bias block, relative error < 1e-6 (we see about 1e-9), with dropout and eps drawn."""
    rng = np.random.default_rng(3)
    flat = init_params(rng, LAYOUT, np.float64) * 3.0  # away from zero, so every tanh bends
    batch = tiny_batch()
    noise = draw_noise(rng, batch, HYPER, np.float64)
    assert not noise.keep.all() and noise.keep.any()
    loss, gradient = batch_gradient(flat, LAYOUT, batch, noise, HYPER)
    assert loss == pytest.approx(losses(flat, LAYOUT, batch, noise, HYPER).mean(), rel=1e-14)
    numeric = central_differences(lambda w: losses(w, LAYOUT, batch, noise, HYPER).mean(), flat)
    offsets = LAYOUT.offsets
    for block in range(8):
        part = slice(offsets[block], offsets[block + 1])
        assert np.linalg.norm(gradient[part]) > 0, block
        assert relative_error(gradient[part], numeric[part]) < 1e-6, block


def test_a_users_own_gradient_matches_finite_differences_of_its_own_loss() -> None:
    rng = np.random.default_rng(4)
    flat = init_params(rng, LAYOUT, np.float64) * 3.0
    user = Batch.single([1, 4, 6, 10], [1.0, 1.0, 2.0, 1.0], 11)
    noise = draw_noise(rng, user, HYPER, np.float64)
    (gradient,) = dense_user_gradients(flat, LAYOUT, user, noise, HYPER)
    numeric = central_differences(lambda w: losses(w, LAYOUT, user, noise, HYPER)[0], flat)
    assert relative_error(gradient, numeric) < 1e-6


def test_the_mean_of_the_users_gradients_is_the_batch_gradient() -> None:
    rng = np.random.default_rng(5)
    flat = init_params(rng, LAYOUT, np.float64)
    batch = tiny_batch()
    noise = draw_noise(rng, batch, HYPER, np.float64)
    per_user = dense_user_gradients(flat, LAYOUT, batch, noise, HYPER)
    loss, gradient = batch_gradient(flat, LAYOUT, batch, noise, HYPER)
    assert np.allclose(per_user.mean(axis=0), gradient, rtol=0, atol=1e-13)
    sparse = user_gradients(flat, LAYOUT, batch, noise, HYPER)
    assert np.array_equal(sparse.rest, per_user[:, LAYOUT.first_layer_size :])
    assert sparse.losses.mean() == pytest.approx(loss, rel=1e-14)


def test_a_users_first_layer_gradient_lives_in_the_rows_of_its_kept_items() -> None:
    rng = np.random.default_rng(6)
    flat = init_params(rng, LAYOUT, np.float64)
    user = Batch.single([0, 2, 3, 5, 7, 9], np.ones(6), 11)
    noise = Noise(np.array([True, False, True, True, False, True]), rng.standard_normal((1, 3)))
    gradients = user_gradients(flat, LAYOUT, user, noise, HYPER)
    items, rows = gradients.kept(0)
    assert items.tolist() == [0, 3, 5, 9]
    (dense,) = dense_user_gradients(flat, LAYOUT, user, noise, HYPER)
    W1 = dense[: LAYOUT.first_layer_size].reshape(11, 7)
    assert np.array_equal(W1[items], rows)
    nonzero = np.flatnonzero(np.abs(W1).sum(axis=1))
    assert nonzero.tolist() == [0, 3, 5, 9]
    # The dropped items' rows are zero too, and the rest of the vector is the rest.
    assert np.array_equal(dense[LAYOUT.first_layer_size :], gradients.rest[0])


def reference_loss(flat: np.ndarray, x: np.ndarray, keep: np.ndarray, eps: np.ndarray, hyper: MultVAEHyper) -> float:
    """One user's loss written out densely from the papers' equations (Polato eqs. (2), (3); Liang et al.)."""
    W1, b1, W2, b2, W3, b3, W4, b4 = LAYOUT.unpack(flat)
    x_in = x / np.linalg.norm(x) * keep / (1.0 - hyper.dropout)
    h = np.tanh(x_in @ W1 + b1)
    mu, logvar = np.split(h @ W2 + b2, 2)
    z = mu + eps * np.exp(logvar / 2)
    logits = np.tanh(z @ W3 + b3) @ W4 + b4
    log_softmax = logits - np.log(np.sum(np.exp(logits)))
    kl = 0.5 * np.sum(-logvar + np.exp(logvar) + mu**2 - 1)
    return float(-np.sum(x * log_softmax) + hyper.beta * kl)


def test_the_loss_is_the_multinomial_likelihood_plus_beta_kl_on_the_normalized_dropped_input() -> None:
    rng = np.random.default_rng(7)
    flat = init_params(rng, LAYOUT, np.float64) * 2.0
    x = np.zeros(11)
    x[[1, 3, 8]] = [1.0, 2.0, 1.0]
    keep_entries = np.array([True, False, True])
    eps = rng.standard_normal(3)
    keep_dense = np.zeros(11)
    keep_dense[[1, 8]] = 1.0
    user = Batch.single([1, 3, 8], [1.0, 2.0, 1.0], 11)
    (loss,) = losses(flat, LAYOUT, user, Noise(keep_entries, eps[None, :]), HYPER)
    assert loss == pytest.approx(reference_loss(flat, x, keep_dense, eps, HYPER), rel=1e-12)


def test_the_ranking_pass_uses_z_equal_mu_no_dropout_and_ignores_the_scale_of_the_input() -> None:
    rng = np.random.default_rng(8)
    flat = init_params(rng, LAYOUT, np.float64)
    user = Batch.single([1, 3, 8], [1.0, 1.0, 1.0], 11)
    louder = Batch.single([1, 3, 8], [5.0, 5.0, 5.0], 11)
    ranked = scores(flat, LAYOUT, user, HYPER)
    assert np.allclose(ranked, scores(flat, LAYOUT, louder, HYPER), rtol=0, atol=1e-14)
    # With keep-all and eps = 0 a training pass equals the evaluation pass up to the dropout scaling.
    no_drop = MultVAEHyper(hidden=7, latent=3, dropout=0.0, beta=0.2)
    training = losses(flat, LAYOUT, user, Noise(np.ones(3, dtype=bool), np.zeros((1, 3))), no_drop)
    assert training == pytest.approx(losses(flat, LAYOUT, user, None, no_drop), rel=1e-14)
    assert np.allclose(np.exp(ranked).sum(axis=1), 1.0)


def test_initialization_is_glorot_uniform_weights_and_small_normal_biases() -> None:
    layout = Layout(400, 60, 20)
    flat = init_params(np.random.default_rng(9), layout)
    assert flat.dtype == np.float32 and flat.size == layout.size
    params = layout.unpack(flat)
    for weights in (params.W1, params.W2, params.W3, params.W4):
        bound = np.sqrt(6.0 / sum(weights.shape))
        assert np.abs(weights).max() <= bound
        # Uniform on (-a, a): standard deviation a / sqrt(3), within 5% on these thousands of draws.
        assert weights.std() == pytest.approx(bound / np.sqrt(3.0), rel=0.05)
    biases = np.concatenate([params.b1, params.b2, params.b3, params.b4])
    assert biases.std() == pytest.approx(BIAS_INIT_STD, rel=0.1)
    assert np.array_equal(flat, init_params(np.random.default_rng(9), layout))


def test_the_layout_places_eight_contiguous_blocks_w1_first() -> None:
    layout = Layout(11, 7, 3)
    assert layout.shapes[0] == (11, 7) and layout.shapes[-1] == (11,)
    assert layout.offsets[0] == 0 and layout.offsets[1] == layout.first_layer_size == 77
    assert layout.size == 77 + 7 + 7 * 6 + 6 + 3 * 7 + 7 + 7 * 11 + 11
    flat = np.arange(layout.size, dtype=np.float64)
    params = layout.unpack(flat)
    params.b4[0] = -1.0
    assert flat[layout.offsets[7]] == -1.0
    with pytest.raises(ValueError, match="length"):
        layout.unpack(np.zeros(layout.size + 1))
    with pytest.raises(ValueError, match="items"):
        batch_gradient(flat, Layout(12, 7, 3), tiny_batch(), draw_noise(np.random.default_rng(0), tiny_batch(), HYPER), HYPER)


@pytest.mark.parametrize(
    "field, value", [("hidden", 0), ("latent", 1.5), ("dropout", 1.0), ("dropout", -0.1), ("beta", -1.0)]
)
def test_bad_hyper_parameters_are_config_errors_naming_the_key(field: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        MultVAEHyper(**{field: value})
    assert caught.value.key_path == f"protocol.{field}"


def test_the_centralized_trainer_lowers_the_loss_and_is_reproducible() -> None:
    data = synthetic_implicit(np.random.default_rng(10), 120, 60, 1500, rank=3)
    batch = Batch.of_users(data.by_user(), np.arange(data.n_users), data.n_items)
    hyper = MultVAEHyper(hidden=20, latent=8)
    layout = Layout.of(data.n_items, hyper)
    start = init_params(np.random.default_rng(11), layout)
    before = start.copy()
    run = lambda: list(  # noqa: E731
        train_centralized(start, layout, batch, hyper, AdamHyper(eta=1e-2), epochs=8, batch_size=32, rng=np.random.default_rng(12))
    )
    trajectory = run()
    assert len(trajectory) == 8 and np.array_equal(start, before)
    loss = [float(losses(w, layout, batch, None, hyper).mean()) for w in (start, *trajectory)]
    assert loss[-1] < 0.97 * loss[0]
    assert all(np.array_equal(a, b) for a, b in zip(trajectory, run()))


def test_the_centralized_trainer_refuses_a_batch_size_of_zero() -> None:
    batch = tiny_batch()
    with pytest.raises(ConfigError, match="batch_size"):
        next(train_centralized(np.zeros(LAYOUT.size), LAYOUT, batch, HYPER, AdamHyper(), epochs=1, batch_size=0,
                               rng=np.random.default_rng(0)))
