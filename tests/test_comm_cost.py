"""Communication cost as users read it (issue 28): per-round bytes apart from the set-up, per role and
round in result.json, metrics.csv and transcript.csv; the paper's figures on the paper's population;
inspect's set-up and its checks; dpmf's ``frac_bits = "auto"``."""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.data import prepare_data
from fedrecsim.errors import ConfigError
from fedrecsim.inspect import inspect_scenario, inspection_text
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.network.ledger import COUNTER_NAMES
from fedrecsim.runner import RunResult
from fedrecsim.summary import summary_text

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
#: hua_comm_cost.toml at a tenth of its users: every user online and served, 20 ratings each.
TINY_HUA = [
    "data.users=30", "data.items=300", "data.ratings=600", "protocol.max_users=30", "protocol.k_presharing=5",
    "protocol.baseline_rounds=1", "protocol.replay=false",
]


def _sets(overrides: list[str]) -> list[str]:
    return [argument for override in overrides for argument in ("--set", override)]


def _run_cli(tmp_path: Path, name: str, scenario: Path, overrides: list[str], capsys, *extra: str) -> tuple[dict, str]:
    out = tmp_path / name
    assert main(["run", str(scenario), "--out", str(out), "--quiet", *extra, *_sets(overrides)]) == 0
    printed = capsys.readouterr().out
    return json.loads((out / "result.json").read_text()), printed


def _summary_user_upload(printed: str) -> float:
    """The per-user upload per round, mean over users, as the summary prints it."""
    match = re.search(r"^  upload(?: per round)?\s+([\d,.]+)\s", printed, re.MULTILINE)
    assert match is not None, printed
    return float(match.group(1).replace(",", ""))


def _round_mean(document: dict, role: str, counter: str) -> float:
    rounds = [entry for entry in document["ledger"]["rounds_by_role"] if entry["round"] >= 1]
    return sum(entry["roles"].get(role, {}).get(counter, 0) for entry in rounds) / len(rounds)


def test_a_1_round_and_a_10_round_run_report_the_same_upload_per_round(tmp_path, capsys) -> None:
    """Metamorphic: every round of this scenario carries the same messages, so the upload per user and
    round cannot depend on how many rounds ran -- unless the set-up is spread over the rounds."""
    scenario = SCENARIOS / "hua_comm_cost.toml"
    one, one_text = _run_cli(tmp_path, "one", scenario, [*TINY_HUA, "run.rounds=1"], capsys)
    ten, ten_text = _run_cli(tmp_path, "ten", scenario, [*TINY_HUA, "run.rounds=10"], capsys)
    assert _summary_user_upload(one_text) == _summary_user_upload(ten_text)
    assert _round_mean(one, "user", "sent_bytes") == _round_mean(ten, "user", "sent_bytes") > 0
    assert _round_mean(one, "user", "recv_bytes") == _round_mean(ten, "user", "recv_bytes") > 0
    # ... and it is the mean over the 30 users of the rounds' upload, the set-up shown apart.
    assert _summary_user_upload(ten_text) == pytest.approx(_round_mean(ten, "user", "sent_bytes") / 30, abs=0.05)
    setup = ten["ledger"]["rounds_by_role"][0]
    assert setup["round"] == 0 and setup["roles"]["user"]["sent_bytes"] > 0
    assert f"{setup['roles']['user']['sent_bytes'] / 30:,.1f}" in ten_text.split("set-up (round 0) upload")[1].splitlines()[0]


CHURN_FCF = [
    "data.users=25", "data.items=30", "data.ratings=300", "protocol.d=3", "run.rounds=4",
    'availability.model="bernoulli"', "availability.p_join=0.3", "availability.p_leave=0.3", "availability.dropout=0.2",
    "network.loss=0.05",
]


def test_each_role_s_rounds_add_up_to_its_totals_and_round_0_is_the_set_up(tmp_path, capsys) -> None:
    """With churn, dropout and loss (messages dropped, joins between rounds, no gap between rounds so
    that messages arrive in the next round), per role and counter: round 0 + rounds 1..R = the whole
    run; in each round every message sent is received or dropped (a message counts in the round it was
    sent in, on every account); the parties' set-up sums to round 0; metrics.csv holds the same."""
    document, _ = _run_cli(tmp_path, "run", SCENARIOS / "fcf_churn.toml", [*CHURN_FCF, "run.round_gap_s=0.02"], capsys)
    ledger = document["ledger"]
    by_round = ledger["rounds_by_role"]
    assert [entry["round"] for entry in by_round] == [0, 1, 2, 3, 4]
    for entry in by_round:
        counts = entry["roles"].values()
        assert sum(c["sent_msgs"] for c in counts) == sum(c["recv_msgs"] + c["dropped_msgs"] for c in counts), entry
        assert sum(c["sent_bytes"] for c in counts) >= sum(c["recv_bytes"] for c in counts)
    for role, totals in ledger["roles"].items():
        for counter in COUNTER_NAMES:
            setup = by_round[0]["roles"].get(role, {}).get(counter, 0)
            rounds = sum(entry["roles"].get(role, {}).get(counter, 0) for entry in by_round[1:])
            assert setup + rounds == totals[counter], (role, counter)
            parties = sum(counts[counter] for party, counts in ledger["setup_parties"].items() if party.startswith(f"{role}:"))
            assert parties == setup, (role, counter)
    assert sum(entry["roles"]["user"]["dropped_msgs"] for entry in by_round) > 0
    assert by_round[0]["roles"]["user"]["sent_msgs"] > 0 and by_round[0]["roles"]["server"]["recv_msgs"] > 0
    # per_round's bytes and msgs are the sent ones, every role together.
    for entry, row in zip(by_round, ledger["per_round"]):
        assert row["bytes"] == sum(counts["sent_bytes"] for counts in entry["roles"].values())
        assert row["msgs"] == sum(counts["sent_msgs"] for counts in entry["roles"].values())
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert [int(row["round"]) for row in rows] == [0, 1, 2, 3, 4]
    for entry, row in zip(by_round, rows):
        for role in ("server", "user"):
            for counter in COUNTER_NAMES:
                assert int(row[f"{role}.{counter}"]) == entry["roles"].get(role, {}).get(counter, 0)
    assert rows[0]["train_rmse"] == "" and rows[-1]["train_rmse"] != ""


def test_transcript_csv_s_round_column_agrees_with_the_ledger(tmp_path, capsys) -> None:
    """A message's row carries the round it was sent in: summed by round and role, the rows give the
    ledger's counters (sent = delivered + dropped rows of the sender; received = delivered rows)."""
    document, _ = _run_cli(tmp_path, "run", SCENARIOS / "fcf_churn.toml", CHURN_FCF, capsys, "--transcript")
    counted: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTER_NAMES, 0))
    with open(tmp_path / "run" / "transcript.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            index, size = int(row["round"]), int(row["bytes"])
            sender, receiver = counted[index, row["src"].split(":")[0]], counted[index, row["dst"].split(":")[0]]
            if row["status"] == "delivered" or row["status"].startswith("dropped:"):
                sender["sent_msgs"] += 1
                sender["sent_bytes"] += size
            if row["status"] == "delivered":
                receiver["recv_msgs"] += 1
                receiver["recv_bytes"] += size
            elif row["status"].startswith("dropped:"):
                sender["dropped_msgs"] += 1
    expected = {
        (entry["round"], role): counts for entry in document["ledger"]["rounds_by_role"] for role, counts in entry["roles"].items()
    }
    assert {key: value for key, value in counted.items() if any(value.values())} == expected
    assert {index for index, _ in expected} == {0, 1, 2, 3, 4}


def _write_ratings(path: Path) -> None:
    """24 users over 60 items: users 3 and 17 rated 40 items each, everyone else 3 to 12."""
    lines, item = [], 0
    for user in range(1, 25):
        count = 40 if user in (3, 17) else 3 + user % 10
        for _ in range(count):
            item = item % 60 + 1
            lines.append(f"{user}\t{item}\t{1 + (user + item) % 5}\t0")
    path.write_text("\n".join(lines) + "\n")


POPULATION_SCENARIO = """
[run]
name = "paper-population"
protocol = "dpmf"
seed = 3
rounds = 2
[data]
source = "movielens-100k"
path = "{path}"
test_fraction = 0.05
[availability]
model = "always"
[protocol]
scenario = "S3"
max_users = 24
k_presharing = 4
d = 4
ring_bits = 32
frac_bits = "auto"
baseline_rounds = 1
replay = false
"""


def test_the_paper_s_user_figures_are_for_users_with_at_most_20_rated_items(tmp_path, capsys) -> None:
    """Hua et al. state their bytes for "a user [who] rated no more than 20 items": the figure is the
    mean (and largest) per iteration over the served users with at most 20 training items, recomputed
    here from transcript.csv; the two heavy users appear only beside it, labelled."""
    _write_ratings(tmp_path / "u.data")
    scenario_path = tmp_path / "s.toml"
    scenario_path.write_text(POPULATION_SCENARIO.format(path=tmp_path / "u.data"))
    document, printed = _run_cli(tmp_path, "run", scenario_path, [], capsys, "--transcript")
    train, _ = prepare_data(fedrecsim.load_scenario(scenario_path).data, 3)
    rated = train.user_counts()
    assert (rated > 20).sum() == 2 and (rated <= 20).sum() == 22
    served: dict[int, set[str]] = defaultdict(set)
    up: dict[tuple[int, str], int] = defaultdict(int)
    down: dict[tuple[int, str], int] = defaultdict(int)
    with open(tmp_path / "run" / "transcript.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            index = int(row["round"])
            if row["kind"] == "dpmf.item_vectors" and row["status"] == "delivered":
                served[index].add(row["dst"])
            if row["src"].startswith("user:") and row["status"] != "duplicated" and not row["status"].startswith("rejected"):
                up[index, row["src"]] += int(row["bytes"])
            if row["dst"].startswith("user:") and row["status"] == "delivered":
                down[index, row["dst"]] += int(row["bytes"])
    samples = [(index, user) for index in (1, 2) for user in sorted(served[index]) if rated[int(user.split(":")[1])] <= 20]
    heavy = [(index, user) for index in (1, 2) for user in sorted(served[index]) if rated[int(user.split(":")[1])] > 20]
    assert len(samples) == 44 and len(heavy) == 4
    download, upload, _ = (figure for figure in document["paper_figures"] if figure["unit"] == "B")
    for figure, sizes in ((download, down), (upload, up)):
        assert figure["measured"] == sum(sizes[key] for key in samples) / len(samples)
        assert figure["measured_max"] == max(sizes[key] for key in samples)
        assert figure["population"].startswith("served users with at most 20 rated items")
        assert (figure["population_size"], figure["population_samples"]) == (22, 44)
        # The heaviest served user is one of the two heavy ones, shown beside the figure, not as it.
        assert figure["heaviest"] == max(sizes[key] for key in heavy) > figure["measured_max"]
        assert "heaviest served user of any number of rated items" in figure["heaviest_label"]
    mean_line = f"mean {download['measured']:,.0f} B ({download['measured'] / 1024:,.1f} KiB), largest {download['measured_max']:,.0f} B"
    assert mean_line in printed
    assert f"not the paper's condition -- {download['heaviest_label']}: {download['heaviest']:,.0f} B" in printed


SECAGG_SMALL = ["data.users=12", "run.rounds=3"]


def test_inspect_keeps_the_set_up_apart_however_many_rounds_it_calibrates(tmp_path, capsys) -> None:
    """secagg declares no traffic plan: inspect measures. Its set-up is the run's round 0 (the users'
    joins) at 2 and at 3 calibration rounds, and with the run's own rounds its round is the run's mean."""
    scenario = fedrecsim.load_scenario(SCENARIOS / "secagg_small.toml", SECAGG_SMALL)
    estimates = {rounds: inspect_scenario(scenario, calibration_rounds=rounds).estimate for rounds in (2, 3)}
    assert estimates[2].setup.roles["user"]["sent_msgs"] == estimates[3].setup.roles["user"]["sent_msgs"] == 12
    document, _ = _run_cli(tmp_path, "run", SCENARIOS / "secagg_small.toml", SECAGG_SMALL, capsys)
    setup = document["ledger"]["rounds_by_role"][0]["roles"]
    assert setup["user"]["sent_msgs"] == 12
    for estimate in estimates.values():
        assert estimate.setup.roles == {
            role: {counter: float(counts[counter]) for counter in ("sent_msgs", "sent_bytes", "recv_msgs", "recv_bytes")}
            for role, counts in setup.items()
        }
    for role in ("server", "user"):
        for counter in ("sent_msgs", "sent_bytes", "recv_msgs", "recv_bytes"):
            assert estimates[3].per_round.roles[role][counter] == pytest.approx(_round_mean(document, role, counter))
    assert main(["inspect", str(SCENARIOS / "secagg_small.toml"), *_sets(SECAGG_SMALL), "--calibrate", "2"]) == 0
    joins = setup["user"]["sent_bytes"]
    assert f"set-up (round 0): 12.0 msgs, {joins:,} B" in capsys.readouterr().out


def _auto_frac_bits(tmp_path: Path, capsys, overrides: list[str]) -> tuple[dict, str]:
    return _run_cli(tmp_path, "auto", SCENARIOS / "hua_comm_cost.toml", [*overrides, "run.rounds=1"], capsys)


def test_frac_bits_auto_takes_the_most_the_headroom_allows_and_inspect_refuses_what_run_refuses(tmp_path, capsys) -> None:
    """hua_comm_cost.toml's frac_bits = "auto": the chosen value F is recorded in privacy.ring and the
    summary; a run with F set is the same run; F + 1 is refused by run -- and by inspect, which checks
    what run checks before it estimates (exit 2, the same one line)."""
    document, printed = _auto_frac_bits(tmp_path, capsys, TINY_HUA)
    ring = document["privacy"]["ring"]
    chosen = ring["frac_bits"]
    assert ring["frac_bits_from"].startswith("auto") and f"frac_bits: {chosen}" in printed
    assert Ring(32, chosen).max_abs >= ring["needed_abs"] > Ring(32, chosen + 1).max_abs
    pinned, _ = _run_cli(tmp_path, "pinned", SCENARIOS / "hua_comm_cost.toml", [*TINY_HUA, "run.rounds=1", f"protocol.frac_bits={chosen}"], capsys)
    assert pinned["transcript_xxh3_128"] == document["transcript_xxh3_128"]
    too_fine = [*TINY_HUA, "run.rounds=1", f"protocol.frac_bits={chosen + 1}"]
    assert main(["run", str(SCENARIOS / "hua_comm_cost.toml"), "--out", str(tmp_path / "refused"), *_sets(too_fine)]) == 2
    refused_by_run = capsys.readouterr().err.strip()
    assert refused_by_run.startswith("fedrecsim: error: protocol.frac_bits: a 32-bit ring with")
    assert f"frac_bits <= {chosen}" in refused_by_run and not (tmp_path / "refused").exists()
    assert main(["inspect", str(SCENARIOS / "hua_comm_cost.toml"), *_sets(too_fine), "--calibrate", "0"]) == 2
    assert capsys.readouterr().err.strip() == refused_by_run
    assert main(["inspect", str(SCENARIOS / "hua_comm_cost.toml"), *_sets([*TINY_HUA, "run.rounds=1"]), "--calibrate", "0"]) == 0
    assert f'protocol.frac_bits = "auto": {chosen} fractional bits' in capsys.readouterr().out


def test_the_api_refuses_one_fractional_bit_more_than_auto_picks() -> None:
    scenario = fedrecsim.load_scenario(SCENARIOS / "hua_comm_cost.toml", [*TINY_HUA, "run.rounds=1"])
    notes = inspection_text(inspect_scenario(scenario, calibration_rounds=0))
    chosen = int(re.search(r'"auto": (\d+) fractional bits', notes).group(1))
    with pytest.raises(ConfigError, match=r"^protocol\.frac_bits: a 32-bit ring with"):
        inspect_scenario(
            fedrecsim.load_scenario(SCENARIOS / "hua_comm_cost.toml", [*TINY_HUA, f"protocol.frac_bits={chosen + 1}"]),
            calibration_rounds=0,
        )


def test_a_ledger_without_rounds_is_labelled_whole_run_in_the_summary(tmp_path, capsys) -> None:
    """A ledger that cannot tell the rounds apart (a TCP run's, or a protocol of one's own that never
    begins a round) keeps the whole run over the rounds, and the summary says so rather than calling it
    a round's traffic."""
    document, printed = _run_cli(tmp_path, "run", SCENARIOS / "fcf_churn.toml", CHURN_FCF, capsys)
    assert "upload per round" in printed and "traffic per role: set-up (round 0)" in printed
    document["ledger"]["rounds_by_role"] = [entry for entry in document["ledger"]["rounds_by_role"] if entry["round"] == 0]
    text = summary_text(RunResult(document, None, None, {}))
    assert "whole run, set-up included, / 4 rounds: the ledger does not tell the rounds apart" in text
    assert "upload per round" not in text and "traffic per role: set-up (round 0)" not in text
    users = [counts for party, counts in document["ledger"]["parties"].items() if party.startswith("user:")]
    assert f"{sum(c['sent_bytes'] for c in users) / len(users) / 4:,.1f}" in text
