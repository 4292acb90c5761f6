"""The README's benchmark table (section "Benchmarks") has a row for every workload `python -m benchmarks`
runs: a workload added without its row, or a row whose workload is gone, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import benchmarks

README = Path(__file__).resolve().parents[2] / "README.md"


def table_rows(text: str) -> list[str]:
    """The first cells of the table under the README's ``### Benchmarks`` heading, in order."""
    section = text.split("\n### Benchmarks\n", 1)[1].split("\n### ", 1)[0]
    return [match.group(1) for match in re.finditer(r"^\| (W\d+) \|", section, re.MULTILINE)]


def test_every_workload_has_one_row_in_the_readmes_table_in_workload_order() -> None:
    known = [name.upper() for name in benchmarks.workloads()]
    assert known, "no workload discovered"
    assert table_rows(README.read_text(encoding="utf-8")) == known


def test_the_rows_are_read_from_the_benchmarks_section_only() -> None:
    text = "| W7 | elsewhere |\n\n### Benchmarks\n\n| workload | what |\n|---|---|\n| W1 | a |\n| W2 | b |\n\n### Data\n\n| W3 | c |\n"
    assert table_rows(text) == ["W1", "W2"]
