"""The tutorial's dropout run through the command line, as docs/writing-a-protocol.md tells a user to run it
without installing the package: the monitor's detail counts, in words that agree with the number, the users
the transcript shows taking the round's request and never answering it."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1]
DETAIL = re.compile(r"round (\d+): (\d+) (items?) off, (\d+) (users?) missing")


def test_a_dropout_run_names_each_rounds_missing_users_as_the_transcript_counts_them(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE), os.environ.get("PYTHONPATH")]))}
    command = [
        sys.executable, "-c", "import fedrecsim_entry; fedrecsim_entry.main()", "run", str(EXAMPLE / "scenario.toml"),
        "--set", "run.protocol=secure_sum.protocol:PROTOCOL", "--set", "availability.dropout=0.1",
        "--transcript", "--quiet", "--out", "run",
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    asked: dict[int, set[str]] = defaultdict(set)
    answered: dict[int, set[str]] = defaultdict(set)
    with open(tmp_path / "run" / "transcript.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["kind"] == "secure_sum.request" and row["status"] == "delivered":
                asked[int(row["round"])].add(row["dst"])
            elif row["kind"] == "secure_sum.masked":
                answered[int(row["round"])].add(row["src"])
    silent = {round_index: len(asked[round_index] - answered[round_index]) for round_index in range(1, 6)}
    with open(tmp_path / "run" / "metrics.csv", newline="") as handle:
        assert {int(row["round"]): int(row["missing"]) for row in csv.DictReader(handle) if row["round"] != "0"} == silent
    details = [match.groups() for match in DETAIL.finditer(done.stdout)]
    assert details, done.stdout
    for round_index, wrong, items, missing, users in details:
        assert int(missing) == silent[int(round_index)] > 0
        assert (items == "item") is (wrong == "1") and (users == "user") is (missing == "1")
    assert any(missing == "1" for _, _, _, missing, _ in details), "seed 1 loses one user in round 3"
    assert not re.search(r"\b1 users\b|\b1 items\b", done.stdout)
