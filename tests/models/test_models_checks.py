"""The hyper-parameter checks the models' config classes share: what each accepts and the message of
what it refuses."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.models._checks import check_dimension, check_flag, check_number


@pytest.mark.parametrize("value", [1, 2, np.int32(1), np.int64(7)])
def test_dimensions_are_positive_integers(value) -> None:
    check_dimension("m.d", value)


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, "2", None])
def test_other_dimensions_are_refused_naming_the_key_and_value(value) -> None:
    with pytest.raises(ConfigError, match=f"^m\\.d: must be a positive integer, got {re.escape(repr(value))}$"):
        check_dimension("m.d", value)


@pytest.mark.parametrize(("value", "positive"), [(0.5, True), (1, True), (0, False), (0.0, False), (np.float32(2.0), True)])
def test_numbers_in_range_are_accepted(value, positive) -> None:
    check_number("m.x", value, positive=positive)


@pytest.mark.parametrize("value", [True, "1", None, [1.0]])
def test_non_numbers_are_refused(value) -> None:
    with pytest.raises(ConfigError, match=f"^m\\.x: must be a number, got {re.escape(repr(value))}$"):
        check_number("m.x", value, positive=False)


@pytest.mark.parametrize(
    ("value", "positive", "bound"),
    [(0, True, "> 0"), (0.0, True, "> 0"), (-1.0, False, ">= 0"), (-1e-9, True, "> 0"), (math.inf, False, ">= 0"),
     (math.nan, True, "> 0")],
)
def test_numbers_out_of_range_are_refused_stating_the_bound(value, positive, bound) -> None:
    message = f"m.x: must be {bound} and finite, got {value!r}"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        check_number("m.x", value, positive=positive)


def test_flags_are_booleans() -> None:
    check_flag("m.f", True)
    check_flag("m.f", np.bool_(False))
    with pytest.raises(ConfigError, match=r"^m\.f: must be true or false, got 1$"):
        check_flag("m.f", 1)
