"""Shared fixtures: small synthetic data sets and scenario tables at test size."""

from __future__ import annotations

import copy
from typing import Any

import pytest

TINY_FCF: dict[str, Any] = {
    "run": {"protocol": "fcf", "name": "tiny", "seed": 3, "rounds": 5},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1200},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "availability": {"model": "always"},
    "protocol": {"d": 8},
}


@pytest.fixture
def tiny_fcf() -> dict[str, Any]:
    """A fresh copy of a small FCF scenario (mutate freely)."""
    return copy.deepcopy(TINY_FCF)


@pytest.fixture(autouse=True)
def _empty_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test sees an empty data home, never the data sets fetched on this machine (FEDRECSIM_DATA)."""
    monkeypatch.setenv("FEDRECSIM_DATA", str(tmp_path_factory.getbasetemp() / "empty-data-home"))


@pytest.fixture
def unresumable(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A scenario of fcf's run in a protocol of the tests' own that does not say it is resumable."""
    import sys
    import types

    from fedrecsim.protocols import ProtocolSpec
    from fedrecsim.protocols.fcf.protocol import FCFConfig, run

    module = types.ModuleType("fedrecsim_checkpoint_test")
    module.UNRESUMABLE = ProtocolSpec("unresumable", FCFConfig, run)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return {"run": {"protocol": "fedrecsim_checkpoint_test:UNRESUMABLE", "rounds": 3}, "data": {"users": 20, "items": 30, "ratings": 300}}


@pytest.fixture(autouse=True)
def _glibc_defaults_in_the_test_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """`fedrecsim run` called in-process would make this process keep the memory it frees for the rest of
    the suite (`fedrecsim.allocator`, process-wide); tests/test_allocator.py tests the call itself."""
    monkeypatch.setattr("fedrecsim.cli.keep_freed_memory", lambda: True)
