"""A result folder another process is running into now is refused, by a new run and by ``--resume``.

Before: ``fedrecsim run --resume DIR`` while the interrupted-looking run was in fact still going (a user
who thinks it died) loaded its checkpoint, ran, and ended with a FileNotFoundError traceback when the first
run completed and removed the checkpoint folder under it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.checkpoint import CHECKPOINT_FILE, work_folder
from fedrecsim.cli import main
from fedrecsim.errors import Interrupted, OutputError
from fedrecsim.output import STAGING_MARKER
from fedrecsim.testing import InterruptAfter

TINY = {
    "run": {"protocol": "fcf", "seed": 3, "rounds": 4},
    "data": {"users": 20, "items": 30, "ratings": 300},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"d": 3},
}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or "-"
    except OSError:
        return "-"


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of this host other than the test's: the owner of a run in progress."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def _staging_of(out: Path, pid: int) -> Path:
    """The staging folder a run of process ``pid`` into ``out`` holds while it runs."""
    staging = out.with_name(f".{out.name}.partial-{pid}-0")
    staging.mkdir()
    (staging / STAGING_MARKER).write_text(f"{socket.gethostname()} {_boot_id()} {pid}\n", encoding="utf-8")
    return staging


def test_resume_refuses_a_run_still_in_progress_and_touches_nothing(
    tmp_path: Path, other_process: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(TINY, out=out, checkpoint_every=1, progress=InterruptAfter(2))
    checkpoint = (work_folder(out) / CHECKPOINT_FILE).read_bytes()
    staging = _staging_of(out, other_process.pid)
    assert main(["run", "--resume", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert f"process {other_process.pid}" in error and "is writing this result folder now" in error
    assert "Traceback" not in error
    assert (work_folder(out) / CHECKPOINT_FILE).read_bytes() == checkpoint
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([staging.name, work_folder(out).name])
    # Once that process is gone its staging folder is a dead run's: the resume goes ahead and removes it.
    other_process.kill()
    other_process.wait()
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]


def test_a_new_run_into_a_folder_in_progress_is_refused_before_it_starts(
    tmp_path: Path, other_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results" / "tiny"
    out.parent.mkdir()
    staging = _staging_of(out, other_process.pid)
    with pytest.raises(OutputError, match=f"process {other_process.pid}"):
        fedrecsim.run(TINY, out=out)
    assert sorted(path.name for path in out.parent.iterdir()) == [staging.name]
    # The default location (results/<run.name>, numbered when taken) is not refused: the run takes a free name.
    monkeypatch.chdir(tmp_path)
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(
        '[run]\nprotocol = "fcf"\nname = "tiny"\nrounds = 2\n[data]\nusers = 20\nitems = 30\nratings = 300\n'
    )
    assert main(["run", str(scenario), "--quiet"]) == 0
    assert (out / "result.json").exists() and staging.exists()
