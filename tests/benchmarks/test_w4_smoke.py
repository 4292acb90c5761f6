"""W4 at its quick size: both sides run, the line has its fields; nothing here looks at how long they took."""

from __future__ import annotations

import re

from benchmarks import w4_fedvae, workloads
from benchmarks.common import Options
from fedrecsim.models.multvae import Layout, MultVAEHyper


def test_w4_is_discovered_at_the_papers_ml1m_size() -> None:
    assert workloads()["w4"] == "benchmarks.w4_fedvae"
    standard = w4_fedvae.tables(w4_fedvae.STANDARD)
    assert (standard["data"]["users"], standard["data"]["items"], standard["data"]["ratings"]) == (6034, 3520, 575_259)
    assert standard["protocol"]["users_per_round"] == 250 and standard["protocol"]["secure_filter"] == "none"
    assert Layout.of(3520, MultVAEHyper(hidden=600, latent=200)).size == 4_589_120


def test_the_simulated_round_aggregates_every_sampled_users_gradient() -> None:
    assert w4_fedvae.sim(w4_fedvae.QUICK, keep_memory=False)["seconds"] > 0
    assert w4_fedvae.sim(w4_fedvae.QUICK, secure_filter="krum", keep_memory=False)["seconds"] > 0


def test_the_floor_computes_the_users_gradients_and_krums_choice() -> None:
    result = w4_fedvae.floor(w4_fedvae.QUICK, krum=True)
    assert set(result) == {"seconds", "params", "krum_seconds"}
    assert result["params"] == Layout.of(300, MultVAEHyper(hidden=64, latent=16)).size


def test_the_line(monkeypatch) -> None:
    calls = []

    def in_process(module: str, function: str, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((function, kwargs.get("secure_filter", "none"), kwargs.get("keep_memory", True)))
        result = getattr(w4_fedvae, function)(**{**kwargs, "keep_memory": False} if function == "sim" else kwargs)
        return {**result, "peak_rss_mb": 100.0}

    monkeypatch.setattr(w4_fedvae, "run_isolated", in_process)
    monkeypatch.setattr(w4_fedvae, "keep_freed_memory", lambda: True)  # the test process keeps glibc's defaults
    (line,) = list(w4_fedvae.run(Options(quick=True)))
    number = r"\d+\.\d{3}"
    assert re.fullmatch(
        rf"W4 fedvae sim_s={number} floor_s={number} ratio=\d+\.\d\d "
        rf"sim_default_allocator_s={number} ratio_default_allocator=\d+\.\d\d message_passes_s={number} ratio_bound=\d+\.\d\d "
        rf"krum_round_s={number} krum_filter_s={number} "
        r"users_per_round=50 items=300 params=\d+ sim_peak_mb=100 floor_peak_mb=100",
        line,
    ), line
    # The headline and Krum's rounds run as the command does; one round runs with glibc's defaults.
    expected = [("sim", "none", True), ("sim", "none", False), ("floor", "none", True), ("sim", "krum", True),
                ("message_passes", "none", True)]
    assert sorted(calls, key=str) == sorted(expected, key=str)


def test_the_message_passes_run_on_the_users_gradients(monkeypatch) -> None:
    monkeypatch.setattr(w4_fedvae, "keep_freed_memory", lambda: True)  # the test process keeps glibc's defaults
    assert w4_fedvae.message_passes(w4_fedvae.QUICK)["seconds"] > 0


def test_the_headline_round_keeps_freed_memory_as_the_command_does(monkeypatch) -> None:
    kept: list[bool] = []
    monkeypatch.setattr(w4_fedvae, "keep_freed_memory", lambda: kept.append(True))
    w4_fedvae.sim(w4_fedvae.QUICK, keep_memory=False)
    assert kept == []
    w4_fedvae.sim(w4_fedvae.QUICK)
    assert kept == [True]
