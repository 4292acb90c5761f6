"""fedrecsim.data's __all__ is honest: every name exists, and every module's public names are exported."""

from __future__ import annotations

import importlib

import fedrecsim.data

MODULES = (
    "fetch", "formats", "loaders", "metrics", "movielens", "npz", "poisson", "prepare", "ranking", "ratings", "registry", "silos",
    "splits", "synthetic",
)


def test_every_exported_name_exists_once() -> None:
    names = fedrecsim.data.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(fedrecsim.data, name), name


def test_every_module_export_is_reexported() -> None:
    for module_name in MODULES:
        module = importlib.import_module(f"fedrecsim.data.{module_name}")
        for name in module.__all__:
            assert name in fedrecsim.data.__all__, f"{module_name}.{name}"
            assert getattr(fedrecsim.data, name) is getattr(module, name)
