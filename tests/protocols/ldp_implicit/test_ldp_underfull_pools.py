"""A proxy never releases a pool of fewer than ``min_users`` users, stragglers or not.

The reproduction of issue 11: 60 users, log-normal compute times (median 0.5 s) with 10% of them slow
(x10), one proxy that releases at ``min_users`` and whose pools' deadline is 5 s. Before the fix the
proxy released whatever it held at a pool's deadline: pools of 1-4 users. The checks here read what
the parties received (the recorded views), not what the run reports about itself.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.network.party import SERVER, Party, Role

PROXY = Party(Role.PROXY, 0)
K = 10


def _stragglers(underfull: str, min_users: int) -> dict[str, Any]:
    return {
        "run": {"protocol": "ldp_implicit", "seed": 3, "rounds": 3, "round_timeout_s": 30.0},
        "data": {"source": "synthetic", "feedback": "implicit", "users": 60, "items": 150, "ratings": 600,
                 "split": "leave_one_out"},
        "network": {"latency": {"model": "constant", "seconds": 0.05}},
        "availability": {"model": "always", "compute_median_s": 0.5, "slow_fraction": 0.1},
        # A batch larger than any pool: every ldp.report_batch the server receives is one whole release.
        "protocol": {"k": K, "min_users": min_users, "underfull": underfull, "proxy_wait_s": 5.0,
                     "batch_size": 100_000, "eval_every": 100},
    }


@pytest.mark.parametrize(("underfull", "min_users"), [("hold", 20), ("hold", 25), ("drop", 20)])
def test_no_release_has_fewer_than_min_users_users(underfull: str, min_users: int) -> None:
    result = fedrecsim.run(_stragglers(underfull, min_users), record_views=[SERVER, PROXY])
    received = [e.body for e in result.views[PROXY] if e.kind == "ldp.reports"]
    # Each user sends one message of K reports per epoch, and a pool takes whole messages of one
    # epoch, so a release of r reports holds exactly r / K distinct users.
    assert all(reports.indices.size == K for reports in received)
    senders = Counter((e.src, e.body.epoch) for e in result.views[PROXY] if e.kind == "ldp.reports")
    assert max(senders.values()) == 1
    releases = [e.body for e in result.views[SERVER] if e.kind == "ldp.report_batch"]
    users_per_release = [batch.indices.size / K for batch in releases]
    assert releases and min(users_per_release) >= min_users, users_per_release
    # Every report the proxy took in was released to the server or counted as dropped.
    for row in result.rounds:
        epoch = row["round"]
        at_proxy = sum(r.indices.size for r in received if r.epoch == epoch)
        at_server = sum(b.indices.size for b in releases if b.epoch == epoch)
        assert at_proxy - at_server == row["reports_dropped"], row
    pools = result.result["privacy"]["pools"]
    assert pools["users_per_release_min"] == min(users_per_release) and pools["releases"] == len(releases)
    # Released and dropped are the two fates: together, every report the proxy took in.
    assert pools["reports_released"] + pools["reports_dropped"] == sum(r.indices.size for r in received)
    assert "also among reports_released or reports_dropped" in pools["held"]
    assert pools["reports_dropped"] == sum(row["reports_dropped"] for row in result.rounds)
    # The ledger counts each report the proxy withheld once, under what became of it.
    withheld = result.result["ledger"]["withheld"].get(str(PROXY), {})
    never_released = sum(r.indices.size for r in received) - sum(b.indices.size for b in releases)
    assert withheld.get("reports dropped", 0) + withheld.get("reports held then dropped", 0) == never_released
    assert withheld.get("reports held then released", 0) + withheld.get("reports held then dropped", 0) == pools[
        "reports_held"
    ]
    assert all(row["anonymity_set"] >= min_users for row in result.rounds)


def test_held_stragglers_leave_with_the_pool_they_complete() -> None:
    """min_users 20 of 60: the third pool of each epoch passes its deadline short of 20 and waits for
    the slow users; it is released when they arrive, so nothing is lost."""
    result = fedrecsim.run(_stragglers("hold", 20))
    assert all(row["reports_held"] > 0 and row["reports_dropped"] == 0 for row in result.rounds)
    assert all(row["reports"] == 60 * K for row in result.rounds)
    assert fedrecsim.run(_stragglers("hold", 20)).transcript_xxh3_128 == result.transcript_xxh3_128


def test_dropping_an_underfull_pool_loses_its_reports_and_says_so() -> None:
    result = fedrecsim.run(_stragglers("drop", 20))
    assert all(row["reports_held"] == 0 and row["reports_dropped"] > 0 for row in result.rounds)
    assert all(row["reports"] + row["reports_dropped"] == 60 * K for row in result.rounds)
    assert all(row["reports_missing"] == row["reports_dropped"] for row in result.rounds)


def test_a_pool_that_cannot_fill_is_held_until_its_epoch_ends_then_dropped() -> None:
    """min_users 25 of 60: two pools of 25 leave, the last 10 users are held and never reach 25. The
    held pool is dropped when the next epoch's model passes the proxy; in the last epoch, when the
    run ends. Nothing of it reaches the server."""
    result = fedrecsim.run(_stragglers("hold", 25))
    assert all(row["reports"] == 50 * K and row["reports_dropped"] == 10 * K for row in result.rounds)
    assert all(row["reports_held"] == 10 * K and row["reports_late"] == 0 for row in result.rounds)
    pools = result.outcome.state["closed_pools"][0]
    assert [(pool.epoch, pool.users, pool.fate.value) for pool in pools if pool.fate.value == "dropped"] == [
        (1, 10, "dropped"), (2, 10, "dropped"), (3, 10, "dropped"),
    ]


def test_the_summary_counts_each_withheld_report_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """min_users 25 of 60, held: each epoch's last 10 users are held, then dropped. The summary's line of
    what the proxy withheld adds up to the reports it took in and never released (it said "300 reports
    dropped, 300 reports held" of the same 300 reports)."""
    scenario = tmp_path / "held.toml"
    scenario.write_text(_toml(_stragglers("hold", 25)))
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "withheld:" in line)
    counts = {what: int(count.replace(",", "")) for count, what in re.findall(r"([\d,]+) (reports[a-z ]*)", line)}
    assert counts == {"reports held then dropped": 3 * 10 * K}, line


def test_the_summary_writes_a_flag_as_result_json_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """60 users are far too few for the shuffle bound's precondition: result.json's ``applicable`` is
    false, and the summary prints it so (it printed Python's ``False`` beside JSON's ``null``)."""
    scenario = tmp_path / "small.toml"
    scenario.write_text(_toml(_stragglers("hold", 20)))
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    shuffle = json.loads((tmp_path / "out" / "result.json").read_text())["privacy"]["shuffle"]
    assert shuffle["applicable"] is False
    assert "    applicable: false" in printed and not any(word in line for line in printed for word in ("True", "False"))


def _toml(tables: dict[str, Any]) -> str:
    def literal(value: Any) -> str:
        if isinstance(value, dict):
            return "{ " + ", ".join(f"{key} = {literal(item)}" for key, item in value.items()) + " }"
        return f'"{value}"' if isinstance(value, str) else repr(value)

    return "\n".join(
        f"[{name}]\n" + "\n".join(f"{key} = {literal(value)}" for key, value in table.items())
        for name, table in tables.items()
    )
