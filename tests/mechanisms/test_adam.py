"""Adam as Algorithm 2 writes it: bias-corrected moments, a pure step, refusals of what it cannot use."""

from __future__ import annotations

import numpy as np
import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.adam import AdamHyper, adam_init, adam_step


def test_the_first_step_moves_each_parameter_by_eta_against_the_gradients_sign() -> None:
    params = np.array([1.0, -2.0, 0.5, 3.0])
    gradient = np.array([0.3, -4.0, 1e-3, 0.0])
    hyper = AdamHyper(eta=0.01)
    updated, state = adam_step(params, gradient, adam_init(params), hyper)
    # m_hat = g and v_hat = g^2 after one step, so the move is eta g / (|g| + eps).
    assert np.allclose(updated, params - 0.01 * gradient / (np.abs(gradient) + 1e-8), rtol=0, atol=1e-15)
    assert state.t == 1 and np.allclose(state.m, 0.1 * gradient) and np.allclose(state.v, 0.001 * gradient**2)


def test_three_steps_equal_the_algorithm_written_out() -> None:
    rng = np.random.default_rng(0)
    params = rng.standard_normal(5)
    gradients = rng.standard_normal((3, 5))
    hyper = AdamHyper(eta=0.05, beta1=0.8, beta2=0.99, epsilon=1e-6)
    w, m, v = params.copy(), np.zeros(5), np.zeros(5)
    state = adam_init(params)
    ours = params
    for t, g in enumerate(gradients, start=1):
        m = 0.8 * m + 0.2 * g
        v = 0.99 * v + 0.01 * g * g
        w = w - 0.05 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.99**t)) + 1e-6)
        ours, state = adam_step(ours, g, state, hyper)
    assert np.allclose(ours, w, rtol=0, atol=1e-14) and state.t == 3


def test_the_step_is_pure_and_keeps_float32() -> None:
    params = np.ones(3, dtype=np.float32)
    gradient = np.array([1.0, -1.0, 2.0], dtype=np.float32)
    state = adam_init(params)
    updated, new_state = adam_step(params, gradient, state, AdamHyper())
    assert np.array_equal(params, np.ones(3)) and state.t == 0 and not state.m.any()
    assert updated.dtype == np.float32 and new_state.m.dtype == np.float32 and new_state.v.dtype == np.float32


def test_a_non_finite_or_misshapen_gradient_is_refused() -> None:
    params = np.zeros(3)
    with pytest.raises(ConfigError, match="finite"):
        adam_step(params, np.array([0.0, np.nan, 1.0]), adam_init(params), AdamHyper())
    with pytest.raises(ConfigError, match="agree"):
        adam_step(params, np.zeros(4), adam_init(params), AdamHyper())


@pytest.mark.parametrize(
    "field, value", [("eta", 0.0), ("beta1", 1.0), ("beta2", -0.1), ("epsilon", 0.0), ("eta", float("nan"))]
)
def test_bad_hyper_parameters_name_the_argument(field: str, value: float) -> None:
    with pytest.raises(ConfigError) as caught:
        AdamHyper(**{field: value})
    assert caught.value.key_path == f"AdamHyper({field})"
