"""W8 at a tiny size: the simulated PriviRec-k and the centralized floor agree on NDCG@20; the lines' fields."""

from __future__ import annotations

import re

from benchmarks import w8_privirec
from benchmarks.common import Options
from fedrecsim.network.ledger import Ledger


def test_the_shape_is_gowallas() -> None:
    items, interactions = w8_privirec.shape(29_858)
    assert (items, interactions) == (40_981, 1_027_370)
    assert w8_privirec.shape(1000) == (1373, 34409)
    assert 12.0 < w8_privirec.full_traffic_tb() < 13.0


def test_simulated_and_centralized_agree() -> None:
    assert w8_privirec.ours(40, 6)["ndcg"] == w8_privirec.floor(40, 6)["ndcg"]


def test_the_message_clock_spans_first_sent_to_last_delivered_and_lets_the_ledger_go() -> None:
    sent, delivered = Ledger.record_sent, Ledger.record_delivered
    ours = w8_privirec.ours(40, 6)
    assert 0.0 < ours["protocol_s"] < ours["run_s"]
    with w8_privirec.message_clock() as marks:
        assert marks == []
    assert (Ledger.record_sent, Ledger.record_delivered) == (sent, delivered)


def test_carrying_alone_sends_the_runs_messages_and_bytes() -> None:
    """The floor carries what the run carries: the same messages (but the users' joins) and, to the few bytes
    their setups' and degrees' integers differ by, the same bytes."""
    run = w8_privirec.ours(60, 8)
    carried = w8_privirec.carry_only(60, 8)
    assert carried["messages"] == run["messages"] - 60
    assert abs(carried["bytes"] - run["bytes"]) < 0.01 * run["bytes"]


def test_the_quick_lines() -> None:
    line, exact = list(w8_privirec.run(Options(quick=True)))
    seconds = r"\d+\.\d{3}"
    assert re.fullmatch(
        rf"W8 privirec_k protocol_s={seconds} fit_s={seconds} ratio=\d+\.\d protocol_cpu_s={seconds} "
        rf"fit_cpu_s={seconds} ratio_cpu=\d+\.\d ratio_target_max=3 carry_cpu_s={seconds} msgs=1680 us_per_msg=\d+\.\d "
        rf"floor_ratio_cpu=\d+\.\d floor_ratio_at_15us=\d+\.\d data_s={seconds} evaluate_s={seconds} "
        rf"evaluate_cpu_s={seconds} evaluate_s_target_max=15 run_s={seconds} peak_rss_mb=\d+ users=60 items=82 interactions=2065 k=8 "
        r"ndcg@20=\d\.\d{4} user_bytes=\d+ full_traffic_tb=12\.5",
        line,
    )
    assert re.fullmatch(
        rf"W8 privirec_exact_ml1m ideal_peak_rss_mb=\d+ ideal_cpu_s={seconds} limit_mb=8192 within_limit=1 "
        rf"real_peak_rss_mb_at_4=\d+ real_cpu_s_at_4={seconds} real_peak_rss_mb_at_8=\d+ real_cpu_s_at_8={seconds} "
        r"real_mb_per_user=-?\d+\.\d real_extrapolated_gb=\d+\.\d users=100 items=61 ratings=273 modes=ideal,real",
        exact,
    )
