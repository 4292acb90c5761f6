"""scenarios/ribero_acceptance.py: the arithmetic of its acceptance table (paired differences, positions,
the crossover, each criterion's verdict) on hand-made numbers, its ``--quick`` run on synthetic data and a
tiny MovieLens-100k folder, and the premise of its design -- a seed's baselines do not depend on epsilon."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats
from test_prototypes import write_movielens_100k
from test_study_script import _load as load_script

import fedrecsim

SCRIPT = Path(__file__).resolve().parents[3] / "scenarios" / "ribero_acceptance.py"
acceptance = load_script(SCRIPT)  # the module, as tests/test_study_script.py loads every script
NO_NOISE = acceptance.NO_NOISE
#: Per seed: Random, MF + k-means, Full, Local.
BASELINES = {1: (0.50, 0.30, 0.35, 0.40), 2: (0.52, 0.31, 0.36, 0.41), 3: (0.49, 0.29, 0.34, 0.39)}


def _measured(name: str, private: dict[float, list[float]]) -> object:
    """A data set whose seed s has the baselines BASELINES[s] and the private mean_rank private[eps][s - 1]."""
    return acceptance.Measured(
        name,
        {epsilon: {seed: value for seed, value in zip(BASELINES, values)} for epsilon, values in private.items()},
        {seed: dict(zip(acceptance.BASELINES, values)) for seed, values in BASELINES.items()},
        users_per_silo=50.0, silos=10.0,
    )


#: Like Random at 0.1 and 1, ahead of all but MF + k-means (within 0.01 of it) at 10^4 and without noise.
GOOD = {
    0.1: [0.51, 0.52, 0.50],
    1.0: [0.49, 0.53, 0.48],
    10_000.0: [0.306, 0.316, 0.296],
    NO_NOISE: [0.305, 0.315, 0.295],
}


def test_a_paired_difference_has_the_student_t_interval_of_its_mean() -> None:
    result = acceptance.paired([0.1, 0.3, 0.2])
    se = 0.1 / math.sqrt(3)  # sample standard deviation 0.1
    half = stats.t.ppf(0.975, 2) * se
    assert (result.n, result.mean, result.se) == (3, pytest.approx(0.2), pytest.approx(se))
    assert (result.low, result.high) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))
    one = acceptance.paired([0.4])
    assert one.mean == 0.4 and math.isnan(one.se) and math.isnan(one.low)


def test_differences_are_paired_by_seed_and_positions_count_ties_half() -> None:
    measured = _measured("synthetic", GOOD)
    assert measured.against(0.1, "random").mean == pytest.approx((0.01 + 0.00 + 0.01) / 3)
    assert measured.against(NO_NOISE, "kmeans").mean == pytest.approx(0.005)
    # Seed 2 at eps = 0.1: 0.52 ties Random and is behind the other three: 1 + 3 + 0.5.
    assert measured.position(0.1, 2) == 4.5
    assert measured.position(0.1, 1) == 5 and measured.position(10_000.0, 1) == 2
    assert measured.positions(10_000.0).mean == 2 and measured.position_step(1.0, 10_000.0).mean == pytest.approx(-7 / 3)


def test_the_crossover_is_the_smallest_epsilon_beating_random_by_the_margin() -> None:
    assert _measured("synthetic", GOOD).crossover() == 10_000.0
    never = {epsilon: [0.5, 0.52, 0.49] for epsilon in GOOD}
    assert _measured("synthetic", never).crossover() is None


def test_every_criterion_holds_on_numbers_that_meet_it() -> None:
    synthetic = acceptance.criteria(_measured("synthetic", GOOD))
    assert [item.text for item in synthetic] == [
        "eps = 0.1: private - Random within +-0.02",
        "eps = 1: private - Random within +-0.02",
        "position among the five non-increasing in eps (within 2 SE)",
        "eps = 10^4: private beats Random by >= 0.02",
        "no noise: private - MF + k-means within +-0.03",
    ]
    assert all(item.holds for item in synthetic)
    movielens = acceptance.criteria(_measured("movielens-100k", GOOD))
    assert len(movielens) == 2 + 2 * 3 and all(item.holds for item in movielens)
    assert [item.text for item in movielens][2:5] == [
        "eps = 10^4: private - MF + k-means within +-0.01",
        "eps = 10^4: private ahead of Full",
        "eps = 10^4: private ahead of Local",
    ]


def test_criteria_fail_where_the_numbers_miss_them() -> None:
    bad = dict(GOOD)
    bad[1.0] = [0.45, 0.48, 0.44]         # 0.047 ahead of Random: not "like Random"
    bad[NO_NOISE] = [0.38, 0.39, 0.37]    # 0.08 behind MF + k-means, and behind Full: position 3 after 2
    verdicts = {item.text: item.holds for item in acceptance.criteria(_measured("synthetic", bad))}
    assert verdicts == {
        "eps = 0.1: private - Random within +-0.02": True,
        "eps = 1: private - Random within +-0.02": False,
        "position among the five non-increasing in eps (within 2 SE)": False,
        "eps = 10^4: private beats Random by >= 0.02": True,
        "no noise: private - MF + k-means within +-0.03": False,
    }
    behind = {item.text: item.holds for item in acceptance.criteria(_measured("movielens-100k", bad))}
    assert behind["no noise: private ahead of Full"] is False and behind["no noise: private ahead of Local"] is True
    assert behind["no noise: private - MF + k-means within +-0.01"] is False
    assert behind["eps = 10^4: private - MF + k-means within +-0.01"] is True  # 0.006 behind it


def test_a_rise_within_two_standard_errors_still_counts_as_non_increasing() -> None:
    noisy = dict(GOOD)
    noisy[NO_NOISE] = [0.32, 0.30, 0.36]  # positions 2, 1, 3 after 2, 2, 2: a rise of 0 +- 0.58
    monotone = acceptance.criteria(_measured("synthetic", noisy))[2]
    assert monotone.holds and monotone.result.mean == pytest.approx(0.0)
    rising = dict(GOOD)
    rising[NO_NOISE] = [0.36, 0.37, 0.35]  # positions 3, 3, 3 after 2, 2, 2: +1 with no spread
    assert not acceptance.criteria(_measured("synthetic", rising))[2].holds


def test_the_interval_column_says_when_a_passing_mean_is_not_yet_sure() -> None:
    spread = dict(GOOD)
    spread[0.1] = [0.46, 0.57, 0.51]  # mean +0.01, but the seeds disagree by 0.1
    first = acceptance.criteria(_measured("synthetic", spread))[0]
    assert first.holds and first.sure is False
    assert acceptance.criteria(_measured("synthetic", GOOD))[3].sure is True  # 10^4 beats Random on every seed


def test_the_sentences_say_which_criteria_fail() -> None:
    bad = dict(GOOD)
    bad[NO_NOISE] = [0.38, 0.39, 0.37]
    measured = _measured("synthetic", bad)
    text = " ".join(acceptance.meaning(measured, acceptance.criteria(measured)))
    assert "ranks the held-out entries like Random" in text
    assert "first beats Random by at least 0.02 at epsilon = 10^4" in text
    assert "3 of 5 criteria hold; not holding:" in text and "loses to its non-private counterpart by more than 0.03" in text
    assert "ahead of both Full and Local (the paper's picture) first at epsilon = 10^4" in text
    never = {epsilon: [0.5, 0.52, 0.49] for epsilon in GOOD}
    measured = _measured("movielens-100k", never)
    text = " ".join(acceptance.meaning(measured, acceptance.criteria(measured)))
    assert "never ahead of both Full and Local (the paper's picture) in the grid" in text
    assert "It never beats Random by 0.02 in the grid." in text
    better = dict(GOOD)
    better[NO_NOISE] = [0.28, 0.29, 0.27]  # 0.02 ahead of MF + k-means: outside +-0.01, on the good side
    measured = _measured("movielens-100k", better)
    text = " ".join(acceptance.meaning(measured, acceptance.criteria(measured)))
    assert "it ranks better than its non-private counterpart by more than 0.01" in text
    assert "no noise: private - MF + k-means within +-0.01 (mean -0.020)" in text


def test_a_seeds_baselines_are_the_same_at_every_epsilon() -> None:
    """Why the study computes the baselines once per seed (in its no-noise run)."""
    overrides = [*acceptance.QUICK_SYNTHETIC, *acceptance.QUICK_MODEL, "run.seed=4"]
    low, high = (
        fedrecsim.run(fedrecsim.load_scenario(acceptance.SYNTHETIC, [*overrides, f"protocol.epsilon={epsilon}"])).result
        for epsilon in (0.1, 1e12)
    )
    final = low["metrics"]["final"], high["metrics"]["final"]
    baselines = [name for name in final[0] if name.split("_")[-1] in acceptance.BASELINES]
    assert len(baselines) >= 4 * 4
    assert {name: final[0][name] for name in baselines} == {name: final[1][name] for name in baselines}
    assert final[0]["mean_rank"] != final[1]["mean_rank"]


def test_the_quick_run_prints_both_tables_the_crossover_and_the_sentences(tmp_path: Path) -> None:
    folder = write_movielens_100k(tmp_path / "ml-100k", ["02139", "10001", "19104", "02115", "13021", "07030"] * 5)
    out = tmp_path / "study"
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--data", str(folder), "--out", str(out), "--workers", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    for name in ("synthetic", "movielens-100k"):
        assert len((out / name / "summary.csv").read_text().splitlines()) == 1 + len(acceptance.QUICK_EPSILONS)
    lines = completed.stdout.splitlines()
    rows = [line for line in lines if line.startswith(("synthetic  ", "movielens-100k  "))]
    assert [row.split()[0] for row in rows] == ["synthetic"] * 5 + ["movielens-100k"] * 8
    assert all(" pass" in row or " FAIL" in row for row in rows)
    assert sum(line.startswith("crossover epsilon (") for line in lines) == 2
    assert any(line.startswith("On synthetic data (20 users per silo") for line in lines)
    assert any(line.startswith("On MovieLens-100k zip silos (") for line in lines)
    assert any("criteria hold" in line for line in lines)
    per_epsilon = [line.split()[0] for line in lines if line.split() and line.split()[0] in ("0.1", "1", "10^4", "no")]
    assert per_epsilon == ["0.1", "1", "10^4", "no"] * 2
