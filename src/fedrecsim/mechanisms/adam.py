"""Adam (Kingma and Ba, ICLR 2015), as FedVAE's server applies it (Polato, Algorithm 2, lines 3-7).

With step count t (the number of steps taken, this one included) and gradient g::

    m_t = beta1 m_{t-1} + (1 - beta1) g
    v_t = beta2 v_{t-1} + (1 - beta2) g^2
    w_t = w_{t-1} - eta * (m_t / (1 - beta1^t)) / (sqrt(v_t / (1 - beta2^t)) + epsilon)

`adam_step` is pure: it returns the new parameters and a new `AdamState` and changes neither input.
Arithmetic runs in the parameters' dtype (float32 parameters keep float32 moments, as TensorFlow does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks

Array = npt.NDArray[np.floating]


@dataclass(frozen=True)
class AdamHyper:
    """Adam's hyper-parameters; the defaults are Polato's (Sec. V-A), Adam's standard values.

    Attributes:
        eta: The learning rate, > 0.
        beta1, beta2: The moments' decay rates, in [0, 1).
        epsilon: Added to the root of the second moment, > 0.
    """

    eta: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8

    def __post_init__(self) -> None:
        _checks.positive(self.eta, "AdamHyper(eta)")
        for name in ("beta1", "beta2"):
            value = _checks.real(getattr(self, name), f"AdamHyper({name})")
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"AdamHyper({name})", f"must lie in [0, 1), got {value!r}")
        _checks.positive(self.epsilon, "AdamHyper(epsilon)")


@dataclass(frozen=True)
class AdamState:
    """The moment estimates ``m``, ``v`` (shaped like the parameters) and the steps taken ``t``."""

    m: Array
    v: Array
    t: int


def adam_init(params: Array) -> AdamState:
    """Zero moments and no step taken, for parameters shaped and typed like ``params``."""
    return AdamState(np.zeros_like(params), np.zeros_like(params), 0)


def adam_step(params: Array, gradient: Array, state: AdamState, hyper: AdamHyper) -> tuple[Array, AdamState]:
    """One Adam step of ``params`` along ``gradient``: ``(new params, new state)``.

    Raises:
        ConfigError: ``gradient`` or the state is not shaped like ``params``, or ``gradient`` holds NaN
            or Inf (a step along it would poison every later step).
    """
    if gradient.shape != params.shape or state.m.shape != params.shape or state.v.shape != params.shape:
        raise ConfigError(
            "adam_step(gradient)",
            f"parameters {params.shape}, gradient {gradient.shape} and moments {state.m.shape} must agree",
        )
    if not np.isfinite(gradient).all():
        raise ConfigError("adam_step(gradient)", "must be finite")
    dtype = params.dtype.type
    t = state.t + 1
    beta1, beta2 = dtype(hyper.beta1), dtype(hyper.beta2)
    m = beta1 * state.m + (1 - beta1) * gradient
    v = beta2 * state.v + (1 - beta2) * (gradient * gradient)
    m_hat = m / dtype(1.0 - hyper.beta1**t)
    v_hat = v / dtype(1.0 - hyper.beta2**t)
    updated = params - dtype(hyper.eta) * m_hat / (np.sqrt(v_hat) + dtype(hyper.epsilon))
    return updated.astype(params.dtype, copy=False), AdamState(m, v, t)


__all__ = ["AdamHyper", "AdamState", "adam_init", "adam_step"]
