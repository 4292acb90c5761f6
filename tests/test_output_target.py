"""`fedrecsim.output` called directly: the exact refusals, the names of the hidden folders, and commits that
find the target changed under them.

`tests/test_output.py` drives the same module through the CLI with a user's files around; here each
refusal is checked for the path it names and the words it uses, because those are what tell the user
which file is in the way. The machine's tests may run as root, which no permission stops, so a folder
that cannot be made is simulated by making ``os.mkdir`` fail.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from fedrecsim.errors import OutputError
from fedrecsim.output import RESULT_FORMAT, prepare_output, replaceable_problem


def result_folder(path: Path, seed: int = 0) -> Path:
    """A folder holding what a run writes: a marked result.json and a metrics table."""
    path.mkdir()
    (path / "result.json").write_text(json.dumps({"format": RESULT_FORMAT, "seed": seed}))
    (path / "metrics.csv").write_text("round,rmse\n1,0.9\n")
    return path


def refusal(path: Path, problem: str) -> str:
    """The text an `OutputError` for ``path`` carries."""
    return str(OutputError(path, problem))


def hidden(path: Path, purpose: str, number: int) -> Path:
    return path.with_name(f".{path.name}.{purpose}-{os.getpid()}-{number}")


def test_the_staging_folder_takes_the_first_free_number(tmp_path) -> None:
    target = tmp_path / "run"
    first = prepare_output(target)
    assert first.staging == hidden(target, "partial", 0) and first.staging.is_dir()
    second = prepare_output(target)
    assert second.staging == hidden(target, "partial", 1)
    hidden(target, "partial", 2).mkdir()
    hidden(target, "partial", 3).write_text("a user's file with an odd name")
    assert prepare_output(target).staging == hidden(target, "partial", 4)


def test_a_staging_name_taken_between_the_check_and_the_mkdir_moves_on(tmp_path, monkeypatch) -> None:
    target = tmp_path / "run"
    real_mkdir = os.mkdir
    raced = []

    def mkdir_losing_one_race(path, *args, **kwargs):
        if Path(path) == hidden(target, "partial", 0) and not raced:
            raced.append(path)
            real_mkdir(path, *args, **kwargs)  # another process takes the name first
            raise FileExistsError(errno.EEXIST, "File exists", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir_losing_one_race)
    prepared = prepare_output(target)
    assert raced and prepared.staging == hidden(target, "partial", 1) and prepared.staging.is_dir()


def test_prepare_reports_how_it_was_asked(tmp_path) -> None:
    plain = prepare_output(tmp_path / "a" / "b" / "run")
    assert (plain.path, plain.numbered, plain.overwrite) == (tmp_path / "a" / "b" / "run", False, False)
    assert plain.created_parents == [tmp_path / "a", tmp_path / "a" / "b"]
    result_folder(tmp_path / "done")
    replacing = prepare_output(tmp_path / "done", overwrite=True)
    assert (replacing.path, replacing.numbered, replacing.overwrite, replacing.created_parents) == (
        tmp_path / "done", False, True, []
    )
    numbered = prepare_output(tmp_path / "done", numbered=True)
    assert (numbered.path, numbered.numbered, numbered.overwrite) == (tmp_path / "done-2", True, False)


def test_a_file_system_root_is_refused(tmp_path) -> None:
    with pytest.raises(OutputError) as caught:
        prepare_output("/")
    assert str(caught.value) == refusal(Path("/"), "is a file-system root, not a place for a result folder")


def test_an_existing_target_is_refused_with_the_way_out(tmp_path) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(OutputError) as caught:
        prepare_output(tmp_path / "run")
    assert str(caught.value) == refusal(
        tmp_path / "run",
        "already exists; choose a new location, or --overwrite (overwrite=True) to replace a fedrecsim result folder",
    )


def test_overwrite_of_a_folder_that_is_no_result_is_refused_before_the_run(tmp_path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    with pytest.raises(OutputError) as caught:
        prepare_output(notes, overwrite=True)
    assert str(caught.value) == refusal(
        notes, "is not a fedrecsim result folder (no readable result.json); refusing to replace it"
    )
    assert [path.name for path in tmp_path.iterdir()] == ["notes"]  # no staging folder was made


@pytest.mark.parametrize("make, problem", [
    (lambda path: path.write_text("a file"),
     "exists and is not a folder; --overwrite replaces only a fedrecsim result folder"),
    (lambda path: path.mkdir(),
     "is not a fedrecsim result folder (no readable result.json); refusing to replace it"),
    (lambda path: (path.mkdir(), (path / "result.json").write_text("{not json")),
     "is not a fedrecsim result folder (no readable result.json); refusing to replace it"),
    (lambda path: (path.mkdir(), (path / "result.json").write_text('["format"]')),
     "is not a fedrecsim result folder (result.json lacks format 'fedrecsim-result/1'); refusing to replace it"),
    (lambda path: (result_folder(path), (path / "figure.pdf").write_text("mine")),
     "holds 'figure.pdf', which fedrecsim did not write; refusing to replace it"),
    (lambda path: (result_folder(path), (path / "ledger.csv").mkdir()),
     "holds 'ledger.csv', which fedrecsim did not write; refusing to replace it"),
])
def test_what_overwrite_may_not_replace_is_named(tmp_path, make, problem) -> None:
    make(tmp_path / "run")
    assert replaceable_problem(tmp_path / "run") == problem


def test_a_result_json_in_utf8_is_read_as_such(tmp_path) -> None:
    folder = result_folder(tmp_path / "run")
    (folder / "result.json").write_bytes(json.dumps({"format": RESULT_FORMAT, "name": "étude"}, ensure_ascii=False).encode())
    assert replaceable_problem(folder) is None


def test_a_parent_that_is_a_file_is_named(tmp_path) -> None:
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(OutputError) as caught:
        prepare_output(tmp_path / "thesis.tex" / "deeper" / "run")
    assert str(caught.value) == refusal(
        tmp_path / "thesis.tex", "is not a folder, so no result folder can be made inside it"
    )


def test_a_parent_that_cannot_be_made_is_named_and_the_ones_made_are_removed(tmp_path, monkeypatch) -> None:
    real_mkdir = os.mkdir
    refused = tmp_path / "a" / "b"

    def mkdir(path, *args, **kwargs):
        if Path(path) == refused:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(OutputError) as caught:
        prepare_output(refused / "c" / "run")  # the error names a/b, the folder that failed, not a/b/c
    assert str(caught.value) == refusal(refused, "cannot create the folder: Permission denied")
    assert not (tmp_path / "a").exists()


def test_a_location_where_the_staging_folder_cannot_be_made_is_named(tmp_path, monkeypatch) -> None:
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if Path(path).name.startswith(".run.partial-"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(OutputError) as caught:
        prepare_output(tmp_path / "new" / "run")
    assert str(caught.value) == refusal(tmp_path / "new", "cannot write here: Permission denied")
    assert not (tmp_path / "new").exists()


def test_a_target_that_appears_during_the_run_is_never_replaced_without_overwrite(tmp_path) -> None:
    prepared = prepare_output(tmp_path / "run")
    (prepared.staging / "result.json").write_text(json.dumps({"format": RESULT_FORMAT, "seed": 2}))
    # Even a fedrecsim result that appeared meanwhile is kept: nobody asked to replace anything.
    result_folder(tmp_path / "run", seed=1)
    with pytest.raises(OutputError) as caught:
        prepared.commit()
    assert str(caught.value) == refusal(
        tmp_path / "run", f"appeared during the run; not replacing it (this run's results are in {prepared.staging})"
    )
    assert json.loads((tmp_path / "run" / "result.json").read_text())["seed"] == 1
    assert json.loads((prepared.staging / "result.json").read_text())["seed"] == 2


def test_overwrite_commit_refuses_a_target_that_stopped_being_a_result(tmp_path) -> None:
    result_folder(tmp_path / "run")
    prepared = prepare_output(tmp_path / "run", overwrite=True)
    (tmp_path / "run" / "figure.pdf").write_text("added by the user during the run")
    with pytest.raises(OutputError) as caught:
        prepared.commit()
    assert str(caught.value) == refusal(
        tmp_path / "run",
        f"holds 'figure.pdf', which fedrecsim did not write; refusing to replace it "
        f"(this run's results are in {prepared.staging})",
    )
    assert (tmp_path / "run" / "figure.pdf").read_text() == "added by the user during the run"


def test_a_replaced_result_is_retired_under_a_hidden_name_then_removed(tmp_path, monkeypatch) -> None:
    result_folder(tmp_path / "run", seed=1)
    hidden(tmp_path / "run", "replaced", 0).mkdir()  # someone else's leftover is never reused
    prepared = prepare_output(tmp_path / "run", overwrite=True)
    (prepared.staging / "result.json").write_text(json.dumps({"format": RESULT_FORMAT, "seed": 2}))
    renames = []
    real_rename = os.rename
    monkeypatch.setattr(os, "rename", lambda src, dst: (renames.append((Path(src), Path(dst))), real_rename(src, dst))[1])
    assert prepared.commit() == tmp_path / "run"
    assert renames == [
        (tmp_path / "run", hidden(tmp_path / "run", "replaced", 1)),
        (prepared.staging, tmp_path / "run"),
    ]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["seed"] == 2
    assert not hidden(tmp_path / "run", "replaced", 1).exists()
    assert hidden(tmp_path / "run", "replaced", 0).is_dir()
