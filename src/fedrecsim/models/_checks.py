"""Validation of hyper-parameters, shared by the models' config classes."""

from __future__ import annotations

import math

import numpy as np

from fedrecsim.errors import ConfigError


def check_dimension(key: str, value: object) -> None:
    """A positive integer (bool is not an integer here)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(key, f"must be a positive integer, got {value!r}")


def check_number(key: str, value: object, *, positive: bool) -> None:
    """A finite real number, > 0 if ``positive`` else >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(key, f"must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ConfigError(key, f"must be {'> 0' if positive else '>= 0'} and finite, got {value!r}")


def check_flag(key: str, value: object) -> None:
    """A boolean."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(key, f"must be true or false, got {value!r}")
