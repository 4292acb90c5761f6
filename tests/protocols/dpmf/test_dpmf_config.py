"""The ``[protocol]`` table's cross-field checks: where each refusal draws its line and what it says.

`DPMFConfig.__post_init__` refuses three combinations: fractional bits that leave no sign and integer bit
(frac_bits >= ring_bits - 1), Theorem 1's noise outside S1 (S2/S3 can only sum pieces to Lemma 1's Laplace
noise), and the naive variant outside S2. Each refusal names its key and says, in full, what is allowed.
"""

from __future__ import annotations

from typing import Any

import pytest

from fedrecsim.config import build
from fedrecsim.errors import ConfigError
from fedrecsim.protocols.dpmf.config import DPMFConfig


def _refusal(table: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        build(DPMFConfig, table, "protocol")
    return raised.value


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_fractional_bits_may_leave_exactly_a_sign_and_an_integer_bit(ring_bits: int) -> None:
    config = build(DPMFConfig, {"ring_bits": ring_bits, "frac_bits": ring_bits - 2}, "protocol")
    assert config.ring.frac_bits == ring_bits - 2


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_fractional_bits_that_leave_no_integer_bit_are_refused(ring_bits: int) -> None:
    refusal = _refusal({"ring_bits": ring_bits, "frac_bits": ring_bits - 1})
    assert refusal.key_path == "protocol.frac_bits"
    assert refusal.problem == f"must be < ring_bits - 1 = {ring_bits - 1} (a sign and an integer bit), got {ring_bits - 1}"


@pytest.mark.parametrize("scenario", ["S2", "S3"])
def test_theorem1_noise_is_refused_where_the_noise_is_summed_from_pieces(scenario: str) -> None:
    refusal = _refusal({"scenario": scenario, "noise": "theorem1"})
    assert refusal.key_path == "protocol.noise"
    assert refusal.problem == (
        f"{scenario} distributes the noise in pieces (Theorem 2), which only sum to Lemma 1's "
        "per-element Laplace noise; use noise = 'laplace' (or leave it unset)"
    )


def test_theorem1_noise_is_accepted_in_s1() -> None:
    assert build(DPMFConfig, {"scenario": "S1", "noise": "theorem1"}, "protocol").mechanism == "theorem1"


@pytest.mark.parametrize("scenario", ["S1", "S3"])
def test_the_naive_variant_is_refused_outside_s2(scenario: str) -> None:
    refusal = _refusal({"scenario": scenario, "variant": "naive"})
    assert refusal.key_path == "protocol.variant"
    assert refusal.problem == f"the naive variant is S2's difference-attack target; scenario is {scenario}"
