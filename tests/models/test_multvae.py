"""Mult-VAE in numpy: the forward pass as the papers write it, exact gradients, the centralized trainer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse

from fedrecsim.data import synthetic_implicit
from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.adam import AdamHyper, adam_init, adam_step
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
    return stacked(full.subset([0]), full.subset([1]), empty, full.subset([2]), full.subset([3]))


def stacked(*rows: Batch) -> Batch:
    """One batch holding ``rows``' users in order."""
    indptr = np.concatenate([[0], np.cumsum([row.items.size for row in rows])])
    items, values = np.concatenate([r.items for r in rows]), np.concatenate([r.values for r in rows])
    return Batch(indptr, items, values, rows[0].n_items)


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


@pytest.mark.parametrize("key, epochs, batch_size", [("epochs", 0, 2), ("batch_size", 1, 0)])
def test_the_centralized_trainer_refuses_zero_epochs_or_batch_size_naming_the_key(
    key: str, epochs: int, batch_size: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        next(train_centralized(np.zeros(LAYOUT.size), LAYOUT, tiny_batch(), HYPER, AdamHyper(), epochs=epochs,
                               batch_size=batch_size, rng=np.random.default_rng(0)))
    assert caught.value.key_path == key


def test_the_layout_of_a_tiny_model_has_these_exact_shapes_and_offsets() -> None:
    layout = Layout(5, 3, 2)
    assert layout.shapes == ((5, 3), (3,), (3, 4), (4,), (2, 3), (3,), (3, 5), (5,))
    assert layout.offsets == (0, 15, 18, 30, 34, 40, 43, 58, 63)
    assert layout.size == 63 and layout.first_layer_size == 15


@pytest.mark.parametrize(
    "sizes, key", [((0, 3, 2), "data.items"), ((5, 0, 2), "protocol.hidden"), ((5, 3, 0), "protocol.latent")]
)
def test_a_layout_with_a_zero_size_is_a_config_error_naming_the_key(sizes: tuple[int, int, int], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Layout(*sizes)
    assert caught.value.key_path == key


def test_a_dropout_of_one_is_refused_with_a_message_saying_what_is_accepted() -> None:
    with pytest.raises(ConfigError) as caught:
        MultVAEHyper(dropout=1.0)
    assert str(caught.value) == "protocol.dropout: must be < 1 (the share of input entries dropped), got 1.0"


def test_no_dropout_and_no_kl_weight_are_valid_hyper_parameters() -> None:
    hyper = MultVAEHyper(dropout=0.0, beta=0.0)
    assert (hyper.dropout, hyper.beta) == (0.0, 0.0)


def test_initialization_draws_block_by_block_from_the_generator() -> None:
    """Weights U(-a, a), a = sqrt(6 / (fan_in + fan_out)); biases N(0, BIAS_INIT_STD^2); in ω's order."""
    layout = Layout(5, 3, 2)
    flat = init_params(np.random.default_rng(18), layout, np.float64)
    replay = np.random.default_rng(18)
    expected = []
    for shape in ((5, 3), (3,), (3, 4), (4,), (2, 3), (3,), (3, 5), (5,)):
        if len(shape) == 2:
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))
            expected.append(replay.uniform(-bound, bound, size=shape).ravel())
        else:
            expected.append(replay.normal(0.0, BIAS_INIT_STD, size=shape))
    assert np.array_equal(flat, np.concatenate(expected))


def test_the_noise_is_the_keep_flags_then_eps_drawn_from_the_generator() -> None:
    batch = tiny_batch()
    noise = draw_noise(np.random.default_rng(16), batch, HYPER)
    replay = np.random.default_rng(16)
    assert np.array_equal(noise.keep, replay.random(batch.items.size) >= HYPER.dropout)
    assert noise.eps.dtype == np.float32 and noise.eps.shape == (5, 3)
    assert np.array_equal(noise.eps, replay.standard_normal((5, 3)).astype(np.float32))


def test_an_entry_whose_uniform_draw_equals_the_dropout_rate_is_kept() -> None:
    """An entry is kept when its uniform draw u in [0, 1) is >= p: kept with probability exactly 1 - p."""
    first_draw = np.random.default_rng(17).random()
    hyper = MultVAEHyper(hidden=7, latent=3, dropout=first_draw)
    noise = draw_noise(np.random.default_rng(17), Batch.single([4], [1.0], 11), hyper)
    assert noise.keep.tolist() == [True]


@pytest.mark.parametrize("values", [[1.0], [0.5, 0.5], [0.25, 3.0]])
def test_the_input_is_normalized_whatever_its_norm(values: list[float]) -> None:
    """Rows of norm 1, below 1 and above 1 all enter the encoder as x / |x|_2."""
    rng = np.random.default_rng(19)
    flat = init_params(rng, LAYOUT, np.float64) * 2.0
    items = [2, 8][: len(values)]
    x = np.zeros(11)
    x[items] = values
    eps = rng.standard_normal(3)
    keep = np.ones(len(values), dtype=bool)
    (loss,) = losses(flat, LAYOUT, Batch.single(items, values, 11), Noise(keep, eps[None, :]), HYPER)
    assert loss == pytest.approx(reference_loss(flat, x, (x > 0).astype(float), eps, HYPER), rel=1e-12)


def test_a_batch_whose_last_user_rated_nothing_matches_each_user_alone() -> None:
    """Two users, the second with no ratings, and the last item rated by neither: the batch is its users."""
    rng = np.random.default_rng(13)
    flat = init_params(rng, LAYOUT, np.float64) * 3.0
    user = Batch.single([0, 4, 7], [1.0, 2.0, 1.0], 11)
    nobody = Batch.single([], [], 11)
    pair = stacked(user, nobody)
    keep = np.array([True, False, True])
    eps = rng.standard_normal((2, 3))
    noise = Noise(keep, eps)
    alone = [
        dense_user_gradients(flat, LAYOUT, user, Noise(keep, eps[:1]), HYPER)[0],
        dense_user_gradients(flat, LAYOUT, nobody, Noise(np.empty(0, dtype=bool), eps[1:]), HYPER)[0],
    ]
    assert np.allclose(dense_user_gradients(flat, LAYOUT, pair, noise, HYPER), alone, rtol=0, atol=1e-12)
    loss, gradient = batch_gradient(flat, LAYOUT, pair, noise, HYPER)
    assert np.allclose(gradient, np.mean(alone, axis=0), rtol=0, atol=1e-12)
    # Without ratings the likelihood term is 0: the loss is beta KL of the code of the zero input.
    W1, b1, W2, b2, *_ = LAYOUT.unpack(flat)
    mu, logvar = np.split(np.tanh(b1) @ W2 + b2, 2)
    kl = 0.5 * np.sum(-logvar + np.exp(logvar) + mu**2 - 1)
    pair_losses = losses(flat, LAYOUT, pair, noise, HYPER)
    assert pair_losses[1] == pytest.approx(HYPER.beta * kl, rel=1e-12)
    assert pair_losses[0] == pytest.approx(losses(flat, LAYOUT, user, Noise(keep, eps[:1]), HYPER)[0], rel=1e-12)
    assert loss == pytest.approx(pair_losses.mean(), rel=1e-14)


@pytest.mark.filterwarnings("error")
def test_a_user_without_ratings_raises_no_floating_point_warning() -> None:
    """The zero row's 1 / |x|_2 is never computed: the row stays zero silently."""
    flat = init_params(np.random.default_rng(20), LAYOUT, np.float64)
    batch = tiny_batch()
    noise = draw_noise(np.random.default_rng(21), batch, HYPER, np.float64)
    assert np.isfinite(losses(flat, LAYOUT, batch, noise, HYPER)).all()
    assert np.isfinite(scores(flat, LAYOUT, Batch.single([], [], 11), HYPER)).all()


def test_the_log_softmax_subtracts_each_users_own_maximum_so_huge_logits_stay_finite() -> None:
    """Equal logits within a row give pi = 1 / I, however far apart the users' logits lie."""
    flat = init_params(np.random.default_rng(22), LAYOUT, np.float64) * 3.0
    params = LAYOUT.unpack(flat)
    params.W4[...] = 1e6  # each user's logits all equal sum(h3) * 1e6: far apart between users
    params.b4[...] = 0.0
    ranked = scores(flat, LAYOUT, tiny_batch(), HYPER)
    assert np.allclose(ranked, -np.log(11.0), rtol=0, atol=1e-12)


def test_a_users_kept_rows_in_a_batch_are_its_own() -> None:
    rng = np.random.default_rng(23)
    flat = init_params(rng, LAYOUT, np.float64)
    users = [Batch.single([0, 3, 9], np.ones(3), 11), Batch.single([1, 2, 5, 6], np.ones(4), 11),
             Batch.single([4, 10], [1.0, 2.0], 11)]
    keeps = [np.array([True, False, True]), np.array([False, True, True, True]), np.array([True, True])]
    eps = rng.standard_normal((3, 3))
    together = user_gradients(flat, LAYOUT, stacked(*users), Noise(np.concatenate(keeps), eps), HYPER)
    for b, (user, keep) in enumerate(zip(users, keeps)):
        items, rows = together.kept(b)
        alone_items, alone_rows = user_gradients(flat, LAYOUT, user, Noise(keep, eps[b : b + 1]), HYPER).kept(0)
        assert items.tolist() == user.items[keep].tolist() == alone_items.tolist()
        assert np.allclose(rows, alone_rows, rtol=0, atol=1e-12)


def test_a_float32_model_computes_and_returns_float32() -> None:
    rng = np.random.default_rng(14)
    flat = init_params(rng, LAYOUT)
    batch = tiny_batch()
    noise = draw_noise(rng, batch, HYPER)
    assert flat.dtype == noise.eps.dtype == np.float32
    assert losses(flat, LAYOUT, batch, noise, HYPER).dtype == np.float32
    assert batch_gradient(flat, LAYOUT, batch, noise, HYPER)[1].dtype == np.float32
    gradients = user_gradients(flat, LAYOUT, batch, noise, HYPER)
    assert gradients.losses.dtype == gradients.rows.dtype == gradients.rest.dtype == np.float32
    assert dense_user_gradients(flat, LAYOUT, batch, noise, HYPER).dtype == np.float32
    assert scores(flat, LAYOUT, batch, HYPER).dtype == np.float32


def test_in_float32_the_output_delta_is_n_pi_minus_x_rounded_in_float32() -> None:
    """The decoder's delta n * pi - x runs in ω's dtype: n and x are rounded to float32 before use."""
    flat = init_params(np.random.default_rng(15), LAYOUT)
    no_drop = MultVAEHyper(hidden=7, latent=3, dropout=0.0, beta=0.2)
    user = Batch.single([2, 5, 9], [0.1, 0.7, 0.3], 11)
    # Keep-all, eps = 0 and no dropout: the training pass is the evaluation pass, whose log pi `scores` gives.
    noise = Noise(np.ones(3, dtype=bool), np.zeros((1, 3), dtype=np.float32))
    log_pi = scores(flat, LAYOUT, user, no_drop)[0]
    expected = np.float32(user.values.sum()) * np.exp(log_pi)
    expected[user.items] -= user.values.astype(np.float32)
    rest = user_gradients(flat, LAYOUT, user, noise, no_drop).rest[0]
    b4 = rest[LAYOUT.offsets[7] - LAYOUT.first_layer_size :]
    assert np.array_equal(b4, expected)


def test_dense_user_gradients_fill_a_given_out_array() -> None:
    rng = np.random.default_rng(24)
    flat = init_params(rng, LAYOUT, np.float64)
    batch = tiny_batch()
    noise = draw_noise(rng, batch, HYPER, np.float64)
    out = np.full((batch.size, LAYOUT.size), np.nan)
    assert dense_user_gradients(flat, LAYOUT, batch, noise, HYPER, out=out) is out
    assert np.array_equal(out, dense_user_gradients(flat, LAYOUT, batch, noise, HYPER))


REST = LAYOUT.size - LAYOUT.first_layer_size


@pytest.mark.parametrize(
    "name, shape, dtype, expected",
    [
        ("out", (3, LAYOUT.size), np.float64, f"out must be a float64 array of shape (2, {LAYOUT.size}), got float64"),
        ("out", (2, LAYOUT.size), np.float32, f"out must be a float64 array of shape (2, {LAYOUT.size}), got float32"),
        ("rest", (2, REST + 1), np.float64, f"rest must be a float64 array of shape (2, {REST}), got float64"),
        ("rest", (2, REST), np.float32, f"rest must be a float64 array of shape (2, {REST}), got float32"),
    ],
)
def test_a_wrong_output_array_is_refused_naming_the_expected_one(
    name: str, shape: tuple[int, int], dtype: type, expected: str
) -> None:
    rng = np.random.default_rng(25)
    flat = init_params(rng, LAYOUT, np.float64)
    pair = stacked(Batch.single([1, 3], np.ones(2), 11), Batch.single([0, 10], np.ones(2), 11))
    noise = draw_noise(rng, pair, HYPER, np.float64)
    compute = dense_user_gradients if name == "out" else user_gradients
    with pytest.raises(ValueError) as caught:
        compute(flat, LAYOUT, pair, noise, HYPER, np.zeros(shape, dtype=dtype))
    assert str(caught.value) == f"{expected} {shape}"


def test_batches_keep_int64_items_and_float64_values_even_when_empty() -> None:
    single = Batch.single([3, 7], [1, 2], 11)
    assert single.items.dtype == np.int64 and single.values.dtype == np.float64
    nobody = Batch.single([], [], 11)
    assert nobody.items.dtype == np.int64 and nobody.size == 1
    none = tiny_batch().subset([])
    assert none.size == 0 and none.indptr.tolist() == [0] and none.items.size == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_trainer_takes_one_adam_step_per_minibatch_of_a_fresh_permutation(dtype: type) -> None:
    """Five users, batch size 2: each epoch permutes, then steps on users 0-1, 2-3 and 4 of the permutation."""
    data = tiny_batch()
    adam = AdamHyper(eta=1e-2)
    start = init_params(np.random.default_rng(26), LAYOUT, dtype)
    trajectory = list(train_centralized(start, LAYOUT, data, HYPER, adam, epochs=2, batch_size=2,
                                        rng=np.random.default_rng(27)))
    replay = np.random.default_rng(27)
    params, state = start.copy(), adam_init(start)
    for epoch in range(2):
        order = replay.permutation(5)
        for users in (order[0:2], order[2:4], order[4:5]):
            minibatch = data.subset(users)
            noise = draw_noise(replay, minibatch, HYPER, dtype)
            _, gradient = batch_gradient(params, LAYOUT, minibatch, noise, HYPER)
            params, state = adam_step(params, gradient, state, adam)
        assert trajectory[epoch].dtype == dtype
        assert np.array_equal(trajectory[epoch], params)


def test_one_epoch_in_one_minibatch_is_one_adam_step_from_its_formula() -> None:
    """First step, zero moments: the bias-corrected m = g, v = g^2, so w <- w - eta g / (|g| + epsilon)."""
    data = tiny_batch()
    adam = AdamHyper(eta=1e-2)
    start = init_params(np.random.default_rng(28), LAYOUT, np.float64)
    (trained,) = train_centralized(start, LAYOUT, data, HYPER, adam, epochs=1, batch_size=5,
                                   rng=np.random.default_rng(29))
    replay = np.random.default_rng(29)
    minibatch = data.subset(replay.permutation(5))
    _, gradient = batch_gradient(start, LAYOUT, minibatch, draw_noise(replay, minibatch, HYPER, np.float64), HYPER)
    expected = start - adam.eta * gradient / (np.abs(gradient) + adam.epsilon)
    assert np.allclose(trained, expected, rtol=1e-12, atol=1e-15)


def test_a_batch_derives_its_rows_normalized_input_and_counts_once_read_only() -> None:
    user = Batch.single([2, 5], [1.0, 3.0], 11)
    # Made with the batch (a user's set-up), not on first use in a round (heap layout: `Batch`'s docstring).
    assert {"_rows", "normalized", "counts"} <= set(vars(user))
    batch = tiny_batch()
    X = np.zeros((5, 11))
    X[batch.rows(), batch.items] = batch.values
    norms = np.linalg.norm(X, axis=1)
    expected = X / np.where(norms > 0, norms, 1.0)[:, None]
    assert batch.rows().tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 3, 4, 4]
    assert np.allclose(batch.normalized, expected[batch.rows(), batch.items], rtol=1e-15, atol=0)
    assert batch.counts.tolist() == X.sum(axis=1).tolist() == [4.0, 6.0, 0.0, 3.0, 3.0]
    assert batch.normalized is batch.normalized and batch.rows() is batch.rows()
    for derived in (batch.rows(), batch.normalized, batch.counts):
        with pytest.raises(ValueError, match="read-only"):
            derived[0] = 7


def test_a_users_gradient_is_the_same_from_its_kept_batch_as_from_a_fresh_one() -> None:
    flat = init_params(np.random.default_rng(5), LAYOUT, np.float32)
    kept = Batch.single([1, 4, 6, 10], [1.0, 1.0, 2.0, 1.0], 11)
    for seed in (1, 2, 3):  # three rounds of the same user, each with its own draws
        noise = draw_noise(np.random.default_rng(seed), kept, HYPER)
        fresh = Batch.single([1, 4, 6, 10], [1.0, 1.0, 2.0, 1.0], 11)
        again = dense_user_gradients(flat, LAYOUT, kept, noise, HYPER)
        assert again.tobytes() == dense_user_gradients(flat, LAYOUT, fresh, noise, HYPER).tobytes()
