"""Link policies against their documented rules (issue 13): custom latency models, file samples, messages."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

import pytest

from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.network.links import (
    LATENCY_DRAW,
    Constant,
    Empirical,
    Latency,
    LinkSpec,
    Links,
    LogNormal,
    Uniform,
    draw_bits,
    latency_from_table,
    uniforms,
)
from fedrecsim.network.party import SERVER, user


@dataclass(frozen=True)
class Probe(Latency):
    """A latency that exposes both uniforms it is given: ``u + 1000 * v`` seconds."""

    model: ClassVar[str] = "probe"

    def sample(self, u: float, v: float) -> float:
        return u + 1000.0 * v

    def to_table(self) -> dict[str, object]:
        return {"model": self.model}


def test_a_latency_model_without_its_own_fast_path_gets_the_documented_uniforms() -> None:
    # `Latency._from_bits`: u from the top 53 bits in [0, 1), v from the low 53 bits plus one ulp in (0, 1].
    probe = Probe()
    for bits in (0, (1 << 128) - 1, 1 << 75, (1 << 53) - 1, 0x0123456789ABCDEF_FEDCBA9876543210):
        u = (bits >> 75) / 2.0**53
        v = ((bits & ((1 << 53) - 1)) + 1) / 2.0**53
        assert probe._from_bits()(bits) == u + 1000.0 * v
    links = Links(3, LinkSpec(Probe()))
    for n in range(20):
        bits = draw_bits(3, user(2), SERVER, n, LATENCY_DRAW)
        u = (bits >> 75) / 2.0**53
        v = ((bits & ((1 << 53) - 1)) + 1) / 2.0**53
        assert links.transit(user(2), SERVER, 10, 1.0) == 1.0 + u + 1000.0 * v
        assert (u, v) == uniforms(bits)


def test_a_relative_sample_file_without_base_dir_is_read_from_the_current_directory(tmp_path, monkeypatch) -> None:
    (tmp_path / "ping.txt").write_text("0\n0.25\n")
    monkeypatch.chdir(tmp_path)
    # A zero delay is a valid sample (>= 0).
    assert latency_from_table({"model": "empirical", "file": "ping.txt"}, "network.latency") == Empirical((0.0, 0.25))


def test_an_absolute_sample_file_ignores_base_dir(tmp_path) -> None:
    (tmp_path / "ping.txt").write_text("0.5\n")
    table = {"model": "empirical", "file": str(tmp_path / "ping.txt")}
    assert latency_from_table(table, "network.latency", base_dir=tmp_path / "elsewhere") == Empirical((0.5,))


def test_sample_file_errors_name_the_file(tmp_path) -> None:
    absent = tmp_path / "absent.txt"
    with pytest.raises(DatasetError) as caught:
        latency_from_table({"model": "empirical", "file": str(absent)}, "network.latency")
    assert caught.value.path == str(absent) and caught.value.line is None
    assert caught.value.problem.startswith("cannot read latency samples: ")
    (tmp_path / "blank.txt").write_text("  \n\n")
    with pytest.raises(DatasetError) as caught:
        latency_from_table({"model": "empirical", "file": str(tmp_path / "blank.txt")}, "network.latency")
    assert caught.value.path == str(tmp_path / "blank.txt")
    assert caught.value.problem == "holds no latency samples (expected one delay in seconds per line)"
    (tmp_path / "latin.txt").write_bytes(b"0.1\n\xe9\n")
    with pytest.raises(DatasetError, match="cannot read latency samples"):
        latency_from_table({"model": "empirical", "file": str(tmp_path / "latin.txt")}, "network.latency")


@pytest.mark.parametrize(
    ("table", "key_path", "problem"),
    [
        ({"model": "gamma"}, "t.model",
         "is \"gamma\"; allowed models: \"constant\", \"uniform\", \"lognormal\", \"empirical\""),
        ({}, "t.model", "is missing; allowed models: \"constant\", \"uniform\", \"lognormal\", \"empirical\""),
        ({"model": "lognormal", "median_s": 1.0, "sigma": 0.5, "x": 1}, "t.x",
         'unknown key for model "lognormal"; allowed keys: model, median_s, sigma'),
        ({"model": "empirical", "samples_s": [0.1], "seconds": 1}, "t.seconds",
         'unknown key for model "empirical"; allowed keys: model, samples_s, file'),
        ({"model": "uniform", "low_s": 0.1}, "t.high_s", 'is required for model "uniform" (allowed keys: model, low_s, high_s)'),
        ({"model": "empirical", "samples_s": [0.1], "file": "x"}, "t.file", "give either samples_s or file, not both"),
    ],
)
def test_table_errors_state_exactly_what_is_allowed(table: dict[str, object], key_path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        latency_from_table(table, "t")
    assert (caught.value.key_path, caught.value.problem) == (key_path, problem)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Constant(-1.0), "network.latency.seconds: must be >= 0 seconds, got -1.0"),
        (lambda: Constant("1"), 'network.latency.seconds: must be a number, got "1"'),
        (lambda: Constant(math.nan), "network.latency.seconds: must be finite, got nan"),
        (lambda: LinkSpec(loss=-0.1), "network.loss: must be in [0, 1), got -0.1"),
        (lambda: LinkSpec(bandwidth_bps=-2.0), "network.bandwidth_bps: must be >= 0 bits per second (0 = unlimited), got -2.0"),
        (lambda: Empirical("0.1"), "network.latency.samples_s: must be a list of numbers, got '0.1'"),
        (lambda: Empirical(0.1), "network.latency.samples_s: must be a list of numbers, got 0.1"),
        (lambda: Empirical(()), "network.latency.samples_s: must hold at least one sample"),
    ],
)
def test_invalid_values_say_what_was_expected(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build()


def test_a_loss_exactly_at_a_messages_uniform_keeps_the_message() -> None:
    # Message n is lost iff its loss uniform is *below* p: with p equal to that uniform it arrives.
    from fedrecsim.network.links import LOSS_DRAW

    u = uniforms(draw_bits(6, user(1), SERVER, 0, LOSS_DRAW))[0]
    assert Links(6, LinkSpec(Constant(0.5), loss=u)).transit(user(1), SERVER, 0, 0.0) == 0.5
    assert Links(6, LinkSpec(Constant(0.5), loss=math.nextafter(u, 1.0))).transit(user(1), SERVER, 0, 0.0) is None


def test_uniform_bounds_are_checked_by_name_and_may_be_equal() -> None:
    with pytest.raises(ConfigError, match=r"^network\.latency\.low_s: must be >= 0 seconds, got -1$"):
        Uniform(-1, 2)
    with pytest.raises(ConfigError, match=r"^network\.latency\.high_s: must be a number, got None$"):
        Uniform(0, None)  # type: ignore[arg-type]
    same = Uniform(0.25, 0.25)
    assert Links(1, LinkSpec(same)).transit(user(0), SERVER, 0, 1.0) == 1.25
    bounds = Uniform(0, 1)
    assert (type(bounds.low_s), type(bounds.high_s)) == (float, float)


def test_lognormal_parameters_are_checked_by_name_and_stored_as_floats() -> None:
    with pytest.raises(ConfigError) as caught:
        LogNormal(0, 0.5)
    assert (caught.value.key_path, caught.value.problem) == (
        "network.latency.median_s", 'must be > 0 (log(0) is undefined; use model = "constant" for zero latency)'
    )
    with pytest.raises(ConfigError) as caught:
        LogNormal(0.05, -1)
    assert (caught.value.key_path, caught.value.problem) == ("network.latency.sigma", "must be >= 0, got -1")
    model = LogNormal(1, 0)
    assert (type(model.median_s), type(model.sigma)) == (float, float)
    assert Links(1, LinkSpec(model)).transit(user(0), SERVER, 0, 2.0) == 3.0  # sigma 0: always the median


def test_link_parameters_are_checked_by_name_and_stored_as_floats() -> None:
    spec = LinkSpec(Constant(1), bandwidth_bps=8000, loss=0)
    assert [type(value) for value in (spec.latency.seconds, spec.bandwidth_bps, spec.loss)] == [float, float, float]
    cases = [
        (lambda: LinkSpec(latency=0.05), "network.latency", "must be a latency model (Constant, Uniform, ...), got 0.05"),
        (lambda: LinkSpec(bandwidth_bps="fast"), "network.bandwidth_bps", 'must be a number, got "fast"'),
        (lambda: LinkSpec(loss="x"), "network.loss", 'must be a number, got "x"'),
    ]
    for build, key_path, problem in cases:
        with pytest.raises(ConfigError) as caught:
            build()
        assert (caught.value.key_path, caught.value.problem) == (key_path, problem)


@pytest.mark.parametrize(("seed", "text"), [(True, "True"), (1.5, "1.5"), ("3", "'3'"), (-1, "-1")])
def test_a_seed_must_be_a_non_negative_integer(seed: object, text: str) -> None:
    with pytest.raises(TypeError, match=f"^seed must be a non-negative integer, got {re.escape(text)}$"):
        Links(seed, LinkSpec())  # type: ignore[arg-type]


def test_role_pair_overrides_must_be_link_specs() -> None:
    from fedrecsim.network.party import Role

    with pytest.raises(TypeError, match=re.escape("by_roles[(<Role.USER: 'user'>, <Role.SERVER: 'server'>)] must be a LinkSpec, got 0.1")):
        Links(0, LinkSpec(), {(Role.USER, Role.SERVER): 0.1})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=re.escape("default must be a LinkSpec, got 0.1")):
        Links(0, 0.1)  # type: ignore[arg-type]
