"""The public API: every name in __all__ exists and is exported once."""

from __future__ import annotations

import importlib

import pytest

MODULES = ["fedrecsim", "fedrecsim.sim", "fedrecsim.study", "fedrecsim.testing", "fedrecsim.network", "fedrecsim.actors",
           "fedrecsim.data", "fedrecsim.models", "fedrecsim.mechanisms", "fedrecsim.protocols"]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_honest(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported))
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol} is in __all__ but missing"
