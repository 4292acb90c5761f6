"""Result folders never cost the user a file: every destructive case is refused, and refused before the run.

Each test sets up a folder holding a user's file (``thesis.tex`` and a subfolder) and checks it survives.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

import fedrecsim
from fedrecsim import cli
from fedrecsim.errors import ConfigError, OutputError
from fedrecsim.output import RESULT_FORMAT, prepare_output

SCENARIO = """
[run]
protocol = "fcf"
name = "study"
rounds = 2
[data]
users = 20
items = 30
ratings = 300
[protocol]
d = 4
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The user's working folder (the current directory): a scenario, a thesis and a folder of notes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    (tmp_path / "thesis.tex").write_text("\\chapter{Results}")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("run the study")
    return tmp_path


def user_files(folder) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix in (".tex", ".txt")
    }


def run_cli(*args: str) -> int:
    return cli.main(["run", "scenario.toml", "--quiet", *args])


def test_out_naming_an_existing_folder_is_refused_and_the_folder_kept(workdir, capsys) -> None:
    before = user_files(workdir)
    assert run_cli("--out", "notes") == 2
    err = capsys.readouterr().err
    assert "notes" in err and "already exists" in err and "Traceback" not in err
    assert user_files(workdir) == before


def test_out_dot_is_refused_and_the_current_folder_kept(workdir, capsys) -> None:
    before = user_files(workdir)
    assert run_cli("--out", ".") == 2
    assert "already exists" in capsys.readouterr().err
    assert user_files(workdir) == before


def test_out_naming_an_existing_file_is_refused_even_with_overwrite(workdir, capsys) -> None:
    before = user_files(workdir)
    assert run_cli("--out", "thesis.tex") == 2
    assert run_cli("--out", "thesis.tex", "--overwrite") == 2
    assert "not a folder" in capsys.readouterr().err
    assert (workdir / "thesis.tex").is_file() and user_files(workdir) == before


@pytest.mark.parametrize("name, problem", [
    ('""', "must not be empty"),
    ('".."', "must not be . or .."),
    ('"."', "must not be . or .."),
    ('"a/b"', "path separator"),
    ('"a\\\\b"', "path separator"),
    ('"tab\\there"', "printable"),
])
def test_run_name_must_be_one_file_name_component(workdir, capsys, name, problem) -> None:
    (workdir / "results" / "earlier").mkdir(parents=True)
    (workdir / "results" / "earlier" / "table.txt").write_text("earlier result")
    before = user_files(workdir)
    assert run_cli("--set", f"run.name={name}") == 2
    err = capsys.readouterr().err
    assert "run.name" in err and problem in err
    assert user_files(workdir) == before


def test_run_name_is_checked_from_python_too(tiny_fcf) -> None:
    tiny_fcf["run"]["name"] = ".."
    with pytest.raises(ConfigError, match="run.name"):
        fedrecsim.run(tiny_fcf)


def test_default_folders_are_numbered_and_never_collide(workdir, capsys) -> None:
    assert run_cli() == 0
    assert run_cli() == 0
    assert "results in " + str(workdir / "results" / "study-2") in capsys.readouterr().out
    (workdir / "results" / "study-3").mkdir()
    (workdir / "results" / "study-3" / "mine.txt").write_text("not a result")
    assert run_cli() == 0
    assert "results" + os.sep + "study-4" in capsys.readouterr().out
    for name in ("study", "study-2", "study-4"):
        assert json.loads((workdir / "results" / name / "result.json").read_text())["format"] == RESULT_FORMAT
    assert (workdir / "results" / "study-3" / "mine.txt").read_text() == "not a result"


def test_overwrite_replaces_a_fedrecsim_result_and_nothing_else(workdir, capsys) -> None:
    assert run_cli("--out", "run", "--seed", "1") == 0
    assert run_cli("--out", "run", "--seed", "2") == 2
    assert run_cli("--out", "run", "--seed", "2", "--overwrite") == 0
    assert json.loads((workdir / "run" / "result.json").read_text())["seed"] == 2
    assert not [path for path in workdir.iterdir() if path.name.startswith(".run.")]

    (workdir / "run" / "thesis-figure.pdf").write_text("the user's figure")
    assert run_cli("--out", "run", "--overwrite") == 2
    assert "thesis-figure.pdf" in capsys.readouterr().err
    assert (workdir / "run" / "thesis-figure.pdf").read_text() == "the user's figure"

    before = user_files(workdir)
    assert run_cli("--out", "notes", "--overwrite") == 2
    assert "not a fedrecsim result folder" in capsys.readouterr().err
    assert user_files(workdir) == before


def test_a_result_json_without_the_format_marker_is_not_replaced(workdir, capsys) -> None:
    (workdir / "notes" / "result.json").write_text('{"mine": true}')
    assert run_cli("--out", "notes", "--overwrite") == 2
    assert "format" in capsys.readouterr().err
    assert (workdir / "notes" / "result.json").read_text() == '{"mine": true}'


def test_unwritable_location_fails_before_the_run_starts(workdir, capsys, monkeypatch) -> None:
    def must_not_run(*args, **kwargs):
        raise AssertionError("the simulation started before the output location was checked")

    monkeypatch.setattr(cli, "run", must_not_run)
    assert run_cli("--out", "/proc/nope/x") == 2
    assert "/proc" in capsys.readouterr().err
    assert run_cli("--out", "thesis.tex/inside") == 2
    assert "thesis.tex" in capsys.readouterr().err and user_files(workdir)["thesis.tex"] == "\\chapter{Results}"


def test_python_api_refuses_an_existing_target(workdir, tiny_fcf) -> None:
    before = user_files(workdir)
    with pytest.raises(OutputError, match="already exists"):
        fedrecsim.run(tiny_fcf, out=workdir / "notes")
    with pytest.raises(OutputError, match="not a fedrecsim result"):
        fedrecsim.run(tiny_fcf, out=workdir / "notes", overwrite=True)
    assert user_files(workdir) == before


def test_a_failed_run_leaves_no_folder_and_removes_only_the_parents_it_made(workdir, tiny_fcf) -> None:
    tiny_fcf["data"] = {"source": "movielens-100k", "path": str(workdir / "missing.data")}
    with pytest.raises(fedrecsim.DatasetError):
        fedrecsim.run(tiny_fcf, out=workdir / "new" / "deeper" / "run")
    assert not (workdir / "new").exists()
    with pytest.raises(fedrecsim.DatasetError):
        fedrecsim.run(tiny_fcf, out=workdir / "notes" / "run")
    assert sorted(path.name for path in (workdir / "notes").iterdir()) == ["todo.txt"]


def test_result_folders_and_files_follow_the_umask(workdir, tiny_fcf) -> None:
    previous = os.umask(0o022)
    try:
        path = fedrecsim.run(tiny_fcf, out=workdir / "made").path
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert {stat.S_IMODE(child.stat().st_mode) for child in path.iterdir()} == {0o644}


def test_prepare_output_makes_the_staging_folder_beside_the_target(workdir) -> None:
    target = prepare_output(workdir / "a" / "b")
    assert target.staging.parent == workdir / "a" and target.staging.name.startswith(".b.partial-")
    target.abandon()
    assert not (workdir / "a").exists()
