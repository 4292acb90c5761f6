"""W8 at a tiny size: the simulated PriviRec-k and the centralized floor agree on NDCG@20; the line's fields."""

from __future__ import annotations

import re

from benchmarks import w8_privirec
from benchmarks.common import Options


def test_the_shape_is_gowallas() -> None:
    items, interactions = w8_privirec.shape(29_858)
    assert (items, interactions) == (40_981, 1_027_370)
    assert w8_privirec.shape(1000) == (1373, 34409)
    assert 12.0 < w8_privirec.full_traffic_tb() < 13.0


def test_simulated_and_centralized_agree() -> None:
    assert w8_privirec.ours(40, 6)["ndcg"] == w8_privirec.floor(40, 6)["ndcg"]


def test_the_quick_line() -> None:
    (line,) = list(w8_privirec.run(Options(quick=True)))
    assert re.fullmatch(
        r"W8 privirec_k sim_s=\d+\.\d{3} floor_s=\d+\.\d{3} ratio=\d+\.\d users=60 items=82 interactions=2065 k=8 "
        r"ndcg@20=\d\.\d{4} user_bytes=\d+ full_traffic_tb=12\.5",
        line,
    )
