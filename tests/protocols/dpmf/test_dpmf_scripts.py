"""The Hua et al. study scripts in scenarios/ run in their --quick mode and show what they should."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from fedrecsim.mechanisms.ring import Ring
from fedrecsim.study import read_study

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
#: The error increase below which the sweep does not order epsilons (the acceptance's 0.02).
FLOOR = 0.02


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCENARIOS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_epsilon_sweep_error_shrinks_as_epsilon_grows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sweep = _script("hua_epsilon_sweep")
    table = sweep.sweep(sweep.EPSILONS, 1, [], sizes=sweep.QUICK, out=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["S1", "S2", "S3"]
    for name, by_epsilon in table.items():
        noise_only = [by_epsilon[epsilon][1] for epsilon in sweep.EPSILONS]
        # The noise's cost falls with eps until it is within FLOOR of zero, where one seed's noise can as
        # well help as hurt (the paper sees the same: a little noise can lift MF out of a poor optimum).
        assert all(
            later < earlier or max(abs(earlier), abs(later)) < FLOOR
            for earlier, later in zip(noise_only, noise_only[1:])
        ), (name, noise_only)
        assert abs(noise_only[-1]) < FLOOR, name
    for name in ("S1", "S2"):
        assert abs(table[name][800.0][0]) < FLOOR
    print(sweep.render(table, 1))
    output = capsys.readouterr().out
    assert output.startswith("each figure: one seed's value") and "S3 err_increase" in output and "800" in output and "S1 vs paper baseline" in output
    # The paper's baseline is one per data set and seed, whatever eps: the increases over it differ as err_mean does.
    for by_epsilon in table.values():
        gaps = [increase - paper for increase, _, paper in by_epsilon.values()]
        assert max(gaps) - min(gaps) < 1e-9


@pytest.mark.timeout(300)
def test_churn_study_covers_both_sweeps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The study file's zip runs the shared point (0.01, 0.01) once; the table shows it in both halves."""
    assert _script("hua_churn_study").main(["--quick", "--seeds", "1", "--out", str(tmp_path / "churn")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 8
    assert sum(line.split()[0] == "p_join" for line in lines[2:]) == 4
    assert sum(line.split()[0] == "p_leave" for line in lines[2:]) == 4
    assert len(list((tmp_path / "churn" / "runs").iterdir())) == 7
    # Every printed number is summary.csv's (the shared point's twice); one seed has no interval.
    summary = {(line["availability.p_join"], line["availability.p_leave"]): line for line in read_study(tmp_path / "churn").summary}
    for line in lines[2:]:
        _, p_join, p_leave, increase, half, noiseless = line.split()
        point = summary[float(p_join), float(p_leave)]
        assert increase == f"{point['err_increase.final.mean']:.4f}" and half == "-"
        assert noiseless == f"{point['noise_err_increase.final.mean']:.4f}"


@pytest.mark.timeout(300)
def test_comm_cost_prints_our_bytes_beside_the_papers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    comm = _script("hua_comm_cost")
    figures = comm.measure(comm.QUICK, tmp_path / "comm")
    explicit, seeded = figures["explicit"], figures["seeded"]
    assert explicit["max_items"] <= 20 and explicit["ring_bits"] == 32
    # frac_bits = "auto": the most fractional bits whose range holds what the aggregates need, one more does not.
    frac_bits = explicit["frac_bits"]
    assert Ring(32, frac_bits).max_abs >= explicit["ring_needed_abs"] > Ring(32, frac_bits + 1).max_abs
    # 20 items x 50 values x 4 bytes for each of v_j, psi and the tau^ pieces, plus framing.
    assert 12_000 <= explicit["down"] <= 12 * 1024
    assert 4_000 <= explicit["up"] <= 5_000
    assert explicit["down_mean"] <= explicit["down"] <= explicit["down_heaviest"]
    assert seeded["down"] < explicit["down"] - 3_900 and seeded["up"] == explicit["up"]
    print(comm.table(figures))
    output = capsys.readouterr().out
    range_bits = 31 - frac_bits
    assert "<= 12 KB" in output and f"ring Z_2^32 with {frac_bits} fractional bits" in output and f"range +-2^{range_bits}" in output
