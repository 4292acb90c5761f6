"""`fedrecsim.sweep.study_script` and `ci_half_width`: the command line and the interval column the study
scripts in ``scenarios/`` share."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrecsim.sweep import ci_half_width, study_script


def call(argv: list[str], capsys) -> tuple[int, list[tuple], str]:
    """Run `study_script` with a report that records its arguments; returns the code, the calls, stdout."""
    calls: list[tuple] = []

    def report(seeds, overrides, quick, out, workers) -> str:
        calls.append((seeds, overrides, quick, out, workers))
        return f"table of {seeds} seeds"

    code = study_script(argv, description="a study", default_out=Path("results/the_study"), quick_help="tiny", report=report)
    return code, calls, capsys.readouterr().out


def test_defaults(capsys) -> None:
    assert call([], capsys) == (0, [(3, [], False, Path("results/the_study"), None)], "table of 3 seeds\n")


def test_quick_runs_two_seeds_unless_told(capsys) -> None:
    assert call(["--quick"], capsys)[1] == [(2, [], True, Path("results/the_study"), None)]
    assert call(["--quick", "--seeds", "5"], capsys)[1] == [(5, [], True, Path("results/the_study"), None)]


def test_every_option_reaches_the_report(capsys, tmp_path) -> None:
    argv = ["--seeds", "1", "--set", "run.rounds=4", "--set", "data.users=9", "--out", str(tmp_path), "--workers", "2"]
    assert call(argv, capsys)[1] == [(1, ["run.rounds=4", "data.users=9"], False, tmp_path, 2)]


def test_no_seeds_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        call(["--seeds", "0"], capsys)
    assert caught.value.code == 2
    assert "--seeds must be >= 1" in capsys.readouterr().err


def test_half_width_of_the_interval() -> None:
    line = {"m.ci95_low": "0.25", "m.ci95_high": "0.75"}
    assert ci_half_width(line, "m", 3) == "0.250"
    assert ci_half_width(line, "m", 1) == "0.2"  # 0.25 rounds half to even
    assert ci_half_width({"m.ci95_low": "", "m.ci95_high": ""}, "m", 3) == "-"
