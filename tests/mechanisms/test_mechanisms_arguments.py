"""Every checked argument of every mechanism: refused with a ConfigError naming the function and the
argument and quoting the value, and accepted at the edge of its range.

One table row per argument: the call with valid arguments, the argument under test, the key path its
error carries and the kind of check (which fixes the values to refuse and the edge to accept).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import (
    Ring,
    bit_probability,
    compose_approximate,
    compose_pure,
    estimate_mean_gradient,
    exponential_h,
    laplace_noise,
    laplace_piece,
    laplace_scale,
    ldp_reports,
    ldp_reports_batch,
    ldp_reports_lazy,
    likelihood_ratio_bound,
    output_distribution,
    report_magnitude,
    shuffle_epsilon,
    theorem1_noise,
)
from fedrecsim.mechanisms.sparse_recovery import RecoveryNoise
from fedrecsim.mechanisms.exponential import (
    exponential_mechanism,
    exponential_probabilities,
    gumbel_scale,
    gumbel_top_s,
    peeling_selection,
)

RNG = object()
"""Placeholder for a fresh generator in a row's arguments (each call gets its own)."""


def zeros(items: np.ndarray, factors: np.ndarray) -> np.ndarray:
    return np.zeros(items.shape)


@dataclass(frozen=True)
class Arg:
    """One checked argument: ``function(**valid)`` succeeds; replacing ``name`` tests the check."""

    function: Callable[..., object]
    valid: dict[str, object]
    name: str
    key: str
    kind: str
    minimum: int = 0
    edge: list[object] = field(default_factory=list)

    def call(self, value: object) -> object:
        arguments = {k: np.random.default_rng(0) if v is RNG else v for k, v in self.valid.items()}
        arguments[self.name] = value
        return self.function(**arguments)

    @property
    def id(self) -> str:
        return self.key


def refused(arg: Arg) -> list[tuple[object, str]]:
    """(value, text its error must contain) for the kind of check ``arg`` has."""
    if arg.kind == "integer":
        return [(True, "must be an integer, got True"), (float(arg.minimum), f"got {float(arg.minimum)!r}"),
                (arg.minimum - 1, f"must be >= {arg.minimum}, got {arg.minimum - 1}")]
    if arg.kind == "positive":
        return [(True, "must be a real number, got True"), ("1", "got '1'"), (math.nan, "must be finite, got nan"),
                (math.inf, "must be finite, got inf"), (0.0, "must be > 0, got 0.0"), (-1.0, "must be > 0, got -1.0")]
    if arg.kind == "non_negative":
        return [(False, "must be a real number, got False"), (math.nan, "must be finite, got nan"),
                (-0.5, "must be >= 0, got -0.5")]
    if arg.kind == "open_unit":
        return [(0.0, "open interval (0, 1), got 0.0"), (1.0, "open interval (0, 1), got 1.0"),
                (math.inf, "must be finite, got inf")]
    if arg.kind == "generator":
        return [(None, "must be a numpy.random.Generator, got NoneType"),
                (np.random.RandomState(0), "got RandomState")]
    if arg.kind == "finite_positive":  # exponential.py's own check
        return [("1", "must be a finite number > 0, got '1'"), (math.nan, "got nan"), (math.inf, "got inf"),
                (0.0, "must be a finite number > 0, got 0.0"), (-1.0, "got -1.0")]
    if arg.kind == "finite_positive_number":  # sparse_recovery.py's check, which expects a number
        return [(math.nan, "must be a finite number > 0, got nan"), (math.inf, "got inf"), (0.0, "got 0.0"),
                (-1.0, "must be a finite number > 0, got -1.0")]
    if arg.kind == "positive_int":  # sparse_recovery.py's s
        return [(True, "must be a positive integer, got True"), (1.0, "got 1.0"), (0, "got 0")]
    if arg.kind == "s_in_range":  # exponential.py's s: an integer in [1, minimum], minimum being the size
        return [(True, f"must be an integer in [1, {arg.minimum}], got True"), (1.0, "got 1.0"), (0, "got 0"),
                (arg.minimum + 1, f"in [1, {arg.minimum}], got {arg.minimum + 1}")]
    if arg.kind == "ring_elements":  # the ring's own element check
        return [(np.array([1.0]), "must hold ring elements of dtype uint64, got float64"),
                ([1, 2], "must hold ring elements of dtype uint64, got int64")]
    if arg.kind == "nonempty_1d":
        return [([], "must be a non-empty 1-D array"), ([[1.0, 2.0]], "must be a non-empty 1-D array")]
    if arg.kind == "float_array":
        return [([[1.0, math.nan]], "must be finite, found nan at index (0, 1)"),
                (["x"], "must be an array of real numbers")]
    raise AssertionError(arg.kind)


def accepted(arg: Arg) -> list[object]:
    """Values at the edge of ``arg``'s range, which must not be refused."""
    if arg.kind == "integer":
        return [arg.minimum, np.int64(arg.minimum), *arg.edge]
    if arg.kind == "non_negative":
        return [0.0, 0, *arg.edge]
    if arg.kind == "s_in_range":
        return [1, np.int64(1), arg.minimum]
    if arg.kind == "positive_int":
        return [1, np.int64(1)]
    return list(arg.edge)


H = np.ones((2, 3))
GRADIENT = np.array([[0.5, -2.0], [0.0, 1.0], [0.25, -0.25]])
ARGS = [
    # laplace.py
    Arg(laplace_scale, {"d": 2, "epsilon": 1.0, "delta": 4.0}, "d", "laplace_scale(d)", "integer", 1),
    Arg(laplace_scale, {"d": 2, "epsilon": 1.0, "delta": 4.0}, "epsilon", "laplace_scale(epsilon)", "positive",
        edge=[1e-300]),
    Arg(laplace_scale, {"d": 2, "epsilon": 1.0, "delta": 4.0}, "delta", "laplace_scale(delta)", "positive",
        edge=[1e-300]),
    *(Arg(theorem1_noise, {"rng": RNG, "n": 3, "d": 2, "epsilon": 1.0, "delta": 4.0}, name, f"theorem1_noise({name})",
          kind, minimum)
      for name, kind, minimum in [("rng", "generator", 0), ("n", "integer", 0), ("d", "integer", 1),
                                  ("epsilon", "positive", 0), ("delta", "positive", 0)]),
    *(Arg(laplace_noise, {"rng": RNG, "n": 3, "d": 2, "epsilon": 1.0, "delta": 4.0}, name, f"laplace_noise({name})",
          kind, minimum)
      for name, kind, minimum in [("rng", "generator", 0), ("n", "integer", 0), ("d", "integer", 1)]),
    Arg(exponential_h, {"rng": RNG, "shape": 3}, "rng", "exponential_h(rng)", "generator"),
    *(Arg(laplace_piece, {"rng": RNG, "h": H, "k": 3, "scale": 2.0, "n_pieces": 2}, name, f"laplace_piece({name})",
          kind, minimum)
      for name, kind, minimum in [("rng", "generator", 0), ("h", "float_array", 0), ("k", "integer", 1),
                                  ("scale", "positive", 0), ("n_pieces", "integer", 0)]),
    # randomized_response.py
    Arg(bit_probability, {"g": [0.5], "epsilon": 1.0}, "g", "bit_probability(g)", "float_array"),
    Arg(bit_probability, {"g": [0.5], "epsilon": 1.0}, "epsilon", "bit_probability(epsilon)", "positive"),
    *(Arg(report_magnitude, {"epsilon": 1.0, "n_items": 3, "n_factors": 2}, name, f"report_magnitude({name})",
          kind, minimum)
      for name, kind, minimum in [("epsilon", "positive", 0), ("n_items", "integer", 1), ("n_factors", "integer", 1)]),
    *(Arg(ldp_reports, {"rng": RNG, "gradient": GRADIENT, "epsilon": 1.0, "k": 4}, name, f"ldp_reports({name})",
          kind, minimum)
      for name, kind, minimum in [("rng", "generator", 0), ("epsilon", "positive", 0), ("k", "integer", 1)]),
    *(Arg(ldp_reports_batch, {"rng": RNG, "gradients": GRADIENT[None], "epsilon": 1.0, "k": 4}, name,
          f"ldp_reports_batch({name})", kind, minimum)
      for name, kind, minimum in [("rng", "generator", 0), ("epsilon", "positive", 0), ("k", "integer", 1)]),
    *(Arg(ldp_reports_lazy, {"rng": RNG, "entries": zeros, "n_users": 2, "n_items": 3, "n_factors": 2,
                             "epsilon": 1.0, "k": 4}, name, f"ldp_reports_lazy({name})", kind, minimum)
      for name, kind, minimum in [("rng", "generator", 0), ("n_users", "integer", 1), ("n_items", "integer", 1),
                                  ("n_factors", "integer", 1), ("epsilon", "positive", 0), ("k", "integer", 1)]),
    Arg(estimate_mean_gradient, {"flat_index": [0, 5], "bits": [1, -1], "n_reports": 2, "n_items": 3,
                                 "n_factors": 2, "epsilon": 1.0}, "n_reports", "estimate_mean_gradient(n_reports)",
        "integer", 1),
    Arg(likelihood_ratio_bound, {"epsilon": 1.0}, "epsilon", "likelihood_ratio_bound(epsilon)", "positive"),
    Arg(output_distribution, {"gradient": GRADIENT, "epsilon": 1.0}, "gradient", "output_distribution(gradient)",
        "float_array"),
    Arg(output_distribution, {"gradient": GRADIENT, "epsilon": 1.0}, "epsilon", "output_distribution(epsilon)",
        "positive"),
    # shuffle.py
    *(Arg(shuffle_epsilon, {"epsilon0": 1.0, "n": 10_000, "delta": 1e-6}, name, f"shuffle_epsilon({name})",
          kind, minimum)
      for name, kind, minimum in [("epsilon0", "positive", 0), ("n", "integer", 1), ("delta", "open_unit", 0)]),
    *(Arg(compose_pure, {"epsilon": 0.5, "times": 3}, name, f"compose_pure({name})", kind, minimum)
      for name, kind, minimum in [("epsilon", "non_negative", 0), ("times", "integer", 0)]),
    *(Arg(compose_approximate, {"epsilon": 0.5, "delta": 1e-6, "times": 3}, name, f"compose_approximate({name})",
          kind, minimum, edge)
      for name, kind, minimum, edge in [("epsilon", "non_negative", 0, []), ("delta", "non_negative", 0, [1.0]),
                                        ("times", "integer", 0, [])]),
    # exponential.py
    *(Arg(gumbel_scale, {"epsilon": 1.0, "sensitivity": 2.0}, name, f"gumbel_scale.{name}", "finite_positive")
      for name in ("epsilon", "sensitivity")),
    Arg(exponential_probabilities, {"scores": [1.0, 2.0], "scale": 1.0}, "scale", "exponential_probabilities.scale",
        "finite_positive"),
    Arg(exponential_mechanism, {"rng": RNG, "scores": [1.0, 2.0], "epsilon": 1.0, "sensitivity": 1.0}, "epsilon",
        "gumbel_scale.epsilon", "finite_positive"),
    Arg(exponential_probabilities, {"scores": [1.0, 2.0], "scale": 1.0}, "scores", "exponential_probabilities.scores",
        "nonempty_1d"),
    Arg(gumbel_top_s, {"rng": RNG, "utilities": [1.0, 2.0, 3.0], "s": 2, "scale": 1.0}, "s", "gumbel_top_s.s",
        "s_in_range", 3),
    Arg(gumbel_top_s, {"rng": RNG, "utilities": [1.0, 2.0, 3.0], "s": 2, "scale": 1.0}, "scale", "gumbel_top_s.scale",
        "finite_positive"),
    Arg(peeling_selection, {"rng": RNG, "utilities": [1.0, 2.0, 3.0], "s": 2, "scale": 1.0}, "s",
        "peeling_selection.s", "s_in_range", 3),
    # sparse_recovery.py
    *(Arg(RecoveryNoise.calibrate, {"s": 2, "bound": 1.0, "eps_support": 1.0, "eps_values": 1.0, "eps_count": 1.0},
          name, f"sparse_recovery.{name}", "finite_positive_number")
      for name in ("bound", "eps_support", "eps_values", "eps_count")),
    Arg(RecoveryNoise.calibrate, {"s": 2, "bound": 1.0, "eps_support": 1.0, "eps_values": 1.0, "eps_count": 1.0},
        "s", "sparse_recovery.s", "positive_int"),
    # ring.py
    Arg(Ring, {"bits": 64, "frac_bits": 24}, "frac_bits", "Ring(frac_bits)", "integer", 1),
    Arg(Ring().encode, {"x": [1.0, -2.5]}, "x", "Ring.encode(x)", "float_array"),
    Arg(Ring().uniform, {"rng": RNG, "shape": 3}, "rng", "Ring.uniform(rng)", "generator"),
    Arg(Ring().decode, {"u": Ring().encode([1.0])[0]}, "u", "Ring.decode(u)", "ring_elements"),
    Arg(Ring().neg, {"a": Ring().encode([1.0])[0]}, "a", "Ring.neg(a)", "ring_elements"),
    Arg(Ring().sum, {"u": Ring().encode([1.0])[0]}, "u", "Ring.sum(u)", "ring_elements"),
    Arg(Ring().split, {"value": Ring().encode([1.0, 2.0])[0], "k": 3, "rng": RNG}, "value", "Ring.split(value)",
        "ring_elements"),
    Arg(Ring().split, {"value": Ring().encode([1.0, 2.0])[0], "k": 3, "rng": RNG}, "k", "Ring.split(k)", "integer", 1),
    Arg(Ring().split, {"value": Ring().encode([1.0, 2.0])[0], "k": 3, "rng": RNG}, "rng", "Ring.uniform(rng)",
        "generator"),
]


@pytest.mark.parametrize("arg", ARGS, ids=[arg.id for arg in ARGS])
def test_a_bad_argument_is_refused_by_name_and_value(arg: Arg) -> None:
    for value, problem in refused(arg):
        with pytest.raises(ConfigError) as info:
            arg.call(value)
        assert info.value.key_path == arg.key, value
        assert problem in info.value.problem, value


@pytest.mark.parametrize("arg", ARGS, ids=[arg.id for arg in ARGS])
def test_the_edge_of_an_arguments_range_is_accepted(arg: Arg) -> None:
    for value in accepted(arg):
        arg.call(value)


def test_the_valid_calls_of_the_table_succeed() -> None:
    for arg in ARGS:
        arg.call(arg.valid[arg.name] if arg.valid[arg.name] is not RNG else np.random.default_rng(0))


def test_a_negative_h_is_named_with_its_index() -> None:
    with pytest.raises(ConfigError) as info:
        laplace_piece(np.random.default_rng(0), [[1.0, 0.0], [2.0, -0.5]], 2, 1.0)
    assert info.value.key_path == "laplace_piece(h)"
    assert info.value.problem == "must be >= 0 (an Exp(1) draw), got -0.5 at index (1, 1)"
    laplace_piece(np.random.default_rng(0), [0.0, -0.0], 2, 1.0)  # zero (of either sign) is an Exp(1) draw


def test_a_composed_delta_above_one_is_refused_with_its_value() -> None:
    with pytest.raises(ConfigError) as info:
        compose_approximate(0.1, 1.5, 2)
    assert (info.value.key_path, info.value.problem) == ("compose_approximate(delta)", "must be <= 1, got 1.5")


@pytest.mark.parametrize("selection", [gumbel_top_s, peeling_selection])
def test_a_selection_is_an_array_of_indices(selection: Callable[..., np.ndarray]) -> None:
    chosen = selection(np.random.default_rng(0), [3, 1, 2], 2, 1.0)
    assert chosen.dtype == np.int64 and chosen.shape == (2,)


def test_with_negligible_noise_gumbel_top_s_is_the_exact_top_s_best_first() -> None:
    # Large enough that numpy's partition does not just sort (it does below a few dozen elements).
    rng = np.random.default_rng(1)
    for _ in range(10):
        utilities = rng.permutation(300).astype(float)
        for s in (1, 2, 3, 17, 150, 298, 299, 300):
            chosen = gumbel_top_s(rng, utilities, s, 1e-9)
            assert chosen.tolist() == np.argsort(-utilities)[:s].tolist()


def test_shape_errors_say_what_was_expected() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError) as info:
        ldp_reports(rng, np.zeros(4), 1.0, 3)
    assert info.value.problem == "must be a non-empty 2-D array, got shape (4,)"
    with pytest.raises(ConfigError) as info:
        ldp_reports_lazy(rng, lambda items, factors: np.zeros(items.size), 2, 3, 2, 1.0, 4)
    assert info.value.problem == "must return shape (2, 4), got (8,)"
    with pytest.raises(ConfigError) as info:
        Ring().sum(Ring().encode([1.0, 2.0])[0], axis=3)
    assert info.value.problem.startswith("invalid for shape (2,): ")


def test_exponential_probabilities_are_stable_for_large_scores() -> None:
    probabilities = exponential_probabilities([1000.0, 1000.0 + math.log(3.0)], 1.0)
    assert probabilities == pytest.approx([0.25, 0.75])


def test_a_huge_likelihood_ratio_saturates_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert likelihood_ratio_bound(1000.0) == math.inf
