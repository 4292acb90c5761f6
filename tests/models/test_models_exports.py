"""fedrecsim.models' __all__ is honest."""

from __future__ import annotations

import importlib

import fedrecsim.models


def test_exports() -> None:
    names = fedrecsim.models.__all__
    assert len(names) == len(set(names))
    for module_name in ("mf", "implicit_mf", "nmf", "kmeans"):
        module = importlib.import_module(f"fedrecsim.models.{module_name}")
        for name in module.__all__:
            assert getattr(fedrecsim.models, name) is getattr(module, name), name
    assert all(hasattr(fedrecsim.models, name) for name in names)
