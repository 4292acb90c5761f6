"""`fedrecsim.mechanisms.__all__` is honest: complete, importable, documented."""

from __future__ import annotations

import importlib
import inspect

import pytest

import fedrecsim.mechanisms as mechanisms

MODULES = ["adam", "krum", "laplace", "randomized_response", "ring", "shuffle"]


def test_all_lists_each_name_once_and_every_name_exists() -> None:
    assert len(mechanisms.__all__) == len(set(mechanisms.__all__))
    assert mechanisms.__all__ == sorted(mechanisms.__all__)
    for name in mechanisms.__all__:
        assert hasattr(mechanisms, name), name


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_definition_is_exported(module_name: str) -> None:
    module = importlib.import_module(f"fedrecsim.mechanisms.{module_name}")
    defined_here = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    }
    assert defined_here <= set(mechanisms.__all__)


def test_every_export_has_a_docstring() -> None:
    for name in mechanisms.__all__:
        value = getattr(mechanisms, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert inspect.getdoc(value), name
