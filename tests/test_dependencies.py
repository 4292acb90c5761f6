"""pyproject.toml's bound on trio: fedrecsim uses trio internals (docs/architecture.md, "Virtual time"), so
the requirement names the tested releases as a closed range, and the trio this suite runs on is inside it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import trio
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _trio_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [requirement] = [Requirement(text) for text in project["dependencies"] if Requirement(text).name == "trio"]
    return requirement


def test_trio_is_bounded_above_and_below_and_the_running_release_is_inside() -> None:
    specifier = _trio_requirement().specifier
    assert {spec.operator for spec in specifier} == {">=", "<"}, specifier
    assert specifier.contains(Version(trio.__version__)), f"trio {trio.__version__} is outside {specifier}"


def test_the_docs_name_the_range_pyproject_allows() -> None:
    """Raising the bound means saying which release was tested last, where a reader looks for it."""
    bounds = {spec.operator: Version(spec.version) for spec in _trio_requirement().specifier}
    lowest, below = bounds[">="], bounds["<"]
    newest = f"{below.major}.{below.minor - 1}"

    def text(path: str) -> str:
        return " ".join((ROOT / path).read_text().split())

    assert f"{lowest}.0 (the lowest allowed) through {newest}.0" in text("docs/architecture.md")
    assert f"{lowest} to {newest} (`trio>={lowest},<{below}`)" in text("README.md")
