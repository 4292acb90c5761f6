"""Reports: a run folder and a sweep folder become PNG plots and a report.md that shows them."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.errors import ConfigError, OutputError
from fedrecsim.report import REPORT_MARKER, write_report
from fedrecsim.sweep import Axis, Study, run_sweep

pytest.importorskip("matplotlib")


TINY_FCF = {
    "run": {"protocol": "fcf", "name": "tiny", "seed": 3, "rounds": 5},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1200},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"d": 8},
}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run") / "tiny"
    fedrecsim.run(TINY_FCF, out=folder)
    return folder


def test_a_run_report_draws_traffic_users_and_metrics(run_folder: Path, tmp_path: Path) -> None:
    report = write_report(run_folder, tmp_path / "report")
    names = sorted(path.name for path in report.iterdir())
    assert names == ["bytes_per_role.png", "bytes_per_user.png", "metrics_per_round.png", "per_round.png", "report.md"]
    markdown = (report / "report.md").read_text()
    assert markdown.startswith(REPORT_MARKER) and "![Bytes per role](bytes_per_role.png)" in markdown
    assert "| test_rmse |" in markdown
    # Re-running replaces our own report; a folder of the user's is refused and left alone.
    assert write_report(run_folder, tmp_path / "report") == report
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="not a fedrecsim report"):
        write_report(run_folder, tmp_path / "mine")
    assert [path.name for path in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_a_sweep_report_plots_each_varying_metric_against_the_grid(tmp_path: Path) -> None:
    study = Study(copy.deepcopy(TINY_FCF), (Axis(("protocol.d",), ((4,), (8,))),), seeds=2)
    run_sweep(study, tmp_path / "sweep", workers=2)
    assert main(["report", str(tmp_path / "sweep")]) == 0
    report = tmp_path / "sweep-report"
    markdown = (report / "report.md").read_text()
    assert "# Sweep report: 2 grid points x 2 seeds" in markdown and "![test_rmse](sweep_test_rmse.png)" in markdown
    assert (report / "sweep_test_rmse.png").stat().st_size > 10_000 and (report / "sweep_user_sent_bytes.png").exists()
    assert "Constant over the whole grid (not plotted): `participants`" in markdown


def test_a_folder_that_is_neither_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "neither a fedrecsim run folder" in capsys.readouterr().err


def test_without_matplotlib_the_error_names_the_extra(run_folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigError, match=r'pip install "fedrecsim\[plot\]"'):
        write_report(run_folder, tmp_path / "report")
    assert not (tmp_path / "report").exists()
