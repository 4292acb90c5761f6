"""The PriviRec study scripts run at their tiny size (``--quick``) and print their tables."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _script(name: str, *args: str) -> str:
    completed = subprocess.run([sys.executable, str(SCENARIOS / name), *args], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


@pytest.mark.timeout(300)
def test_the_k_tradeoff_prints_ndcg_and_client_bytes_over_k(tmp_path: Path) -> None:
    lines = _script("privirec_k_tradeoff.py", "--quick", "--out", str(tmp_path / "k")).splitlines()
    assert lines[0].startswith("PriviRec-k over k: 40 users x 60 items")
    rows = [line.split() for line in lines[2:]]
    assert [row[0] for row in rows] == ["PriviRec", "PriviRec-k", "PriviRec-k", "PriviRec-k"]
    assert [int(row[1]) for row in rows[1:]] == [4, 12, 24]
    sent = [int(row[4].replace(",", "")) for row in rows[1:]]
    assert sent == sorted(sent)  # the client bytes grow with k
    assert all(0.0 <= float(row[2]) <= 1.0 for row in rows)


@pytest.mark.timeout(300)
def test_the_comm_scaling_fits_table_1s_exponents(tmp_path: Path) -> None:
    output = _script("privirec_comm_scaling.py", "--quick", "--out", str(tmp_path / "scaling"))
    slopes = {}
    for line in output.splitlines():
        match = re.match(r"(privirec_k|privirec|fcf)\s+(client|server)\s+.*?\s(-?\d+\.\d\d)\s+\S+\s+(-?\d+\.\d\d)\s+\S+$", line)
        if match:
            slopes[match.group(1), match.group(2)] = (float(match.group(3)), float(match.group(4)))
    assert len(slopes) == 6
    for method in ("privirec", "privirec_k", "fcf"):
        assert abs(slopes[method, "client"][0]) < 0.1  # a user's bytes barely depend on n (log n keys)
        assert abs(slopes[method, "server"][0] - 1.0) < 0.1  # the server's are n times a user's
    assert slopes["privirec", "client"][1] > 1.5  # |I|^2 (the m (m + 1) / 2 sum dominates)
    assert abs(slopes["privirec_k", "client"][1] - 1.0) < 0.15 and abs(slopes["fcf", "client"][1] - 1.0) < 0.05
