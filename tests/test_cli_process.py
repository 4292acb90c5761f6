"""The command as a process: Ctrl-C and SIGTERM stop a run cleanly; the progress bar follows the terminal."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

LONG_SCENARIO = """
[run]
protocol = "fcf"
name = "long"
rounds = 1000000
[data]
users = 20
items = 30
ratings = 300
[protocol]
d = 4
"""
# A guard against a hang, not a timing assertion: a clean stop takes well under a second.
_PROCESS_TIMEOUT_S = 60


def start(tmp_path, *args: str) -> subprocess.Popen:
    (tmp_path / "long.toml").write_text(LONG_SCENARIO)
    return subprocess.Popen(
        [sys.executable, "-m", "fedrecsim.cli", "run", "long.toml", *args],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def wait_for_progress(process: subprocess.Popen) -> bytes:
    """Read stderr until the progress bar has drawn a round count (the run is under way)."""
    seen = b""
    deadline = time.monotonic() + _PROCESS_TIMEOUT_S
    while b"rounds" not in seen:
        ready, _, _ = select.select([process.stderr], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            process.kill()
            pytest.fail("the run never drew its progress bar")
        chunk = os.read(process.stderr.fileno(), 4096)
        if not chunk:
            pytest.fail(f"the run ended early: {process.wait()} {seen!r}")
        seen += chunk
    return seen


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_with_one_line_and_no_folder(tmp_path, signum, code) -> None:
    process = start(tmp_path, "--progress", "--out", "run")
    seen = wait_for_progress(process)
    process.send_signal(signum)
    out, err = process.communicate(timeout=_PROCESS_TIMEOUT_S)
    assert process.returncode == code
    last_line = (seen + err).decode().replace("\r", "\n").strip().splitlines()[-1]
    assert last_line.startswith("fedrecsim: interrupted after ") and last_line.endswith(" of 1,000,000 rounds")
    assert b"Traceback" not in err and out == b""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["long.toml"]


def test_an_interrupted_run_that_kept_a_checkpoint_says_how_to_resume_it(tmp_path) -> None:
    process = start(tmp_path, "--progress", "--out", "run", "--checkpoint-every", "1")
    wait_for_progress(process)
    deadline = time.monotonic() + _PROCESS_TIMEOUT_S
    while not (tmp_path / ".run.checkpoints" / "checkpoint.pkl").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=_PROCESS_TIMEOUT_S)
    assert process.returncode == 130
    last_line = err.decode().replace("\r", "\n").strip().splitlines()[-1]
    assert last_line.startswith("fedrecsim: interrupted after "), last_line
    assert last_line.endswith(" of 1,000,000 rounds; its last checkpoint is kept: fedrecsim run --resume run continues the run")


def test_an_interrupted_overwrite_keeps_the_existing_result(tmp_path) -> None:
    (tmp_path / "long.toml").write_text(LONG_SCENARIO)
    first = subprocess.run(
        [sys.executable, "-m", "fedrecsim.cli", "run", "long.toml", "--quiet", "--out", "run", "--set", "run.rounds=2"],
        cwd=tmp_path, capture_output=True, check=False, timeout=_PROCESS_TIMEOUT_S,
    )
    assert first.returncode == 0, first.stderr
    kept = (tmp_path / "run" / "result.json").read_bytes()
    process = start(tmp_path, "--progress", "--out", "run", "--overwrite")
    wait_for_progress(process)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=_PROCESS_TIMEOUT_S)
    assert process.returncode == 130
    assert (tmp_path / "run" / "result.json").read_bytes() == kept
    assert sorted(path.name for path in tmp_path.iterdir()) == ["long.toml", "run"]
