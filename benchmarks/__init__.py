"""The standard workloads of fedrecsim, each measured side by side with its peer in the same process.

A workload is a module of this package named ``w<number>_<topic>.py`` (``w1_rounds.py``, later
``w2_...``): the module is discovered by its name, so adding a workload is adding a file. Every workload
module defines::

    def run(options: benchmarks.common.Options) -> Iterator[str]

yielding its result lines as they are measured. ``python -m benchmarks`` runs every workload in number
order; ``python -m benchmarks w1`` runs one; ``--quick`` runs the small sizes the smoke tests use.
Benchmarks report wall-clock numbers; nothing in the test suite asserts on them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported lazily at run time so that `python -m benchmarks.common` (the isolated-run child) does not
    # find its own module already imported by the package.
    from .common import Options

_WORKLOAD_MODULE = re.compile(r"^(w(\d+))_\w+$")


def workloads() -> dict[str, str]:
    """The discovered workloads: short name (``"w1"``) to module name, in workload-number order."""
    found: list[tuple[int, str, str]] = []
    for module in pkgutil.iter_modules(__path__):
        match = _WORKLOAD_MODULE.match(module.name)
        if match is not None:
            found.append((int(match.group(2)), match.group(1), f"{__name__}.{module.name}"))
    return {name: module for _, name, module in sorted(found)}


def load(name: str) -> Callable[[Options], Iterator[str]]:
    """The ``run`` function of workload ``name`` (e.g. ``"w1"``).

    Raises:
        KeyError: no workload of that name; the message lists the known ones.
    """
    known = workloads()
    if name not in known:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(known) or 'none'}")
    module: ModuleType = importlib.import_module(known[name])
    return module.run


__all__ = ["load", "workloads"]
