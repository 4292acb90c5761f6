"""W4 at its quick size: every side runs, the line has its fields; nothing here looks at how long they took."""

from __future__ import annotations

import re

import numpy as np
import pytest
import xxhash

from benchmarks import w4_fedvae, workloads
from benchmarks.common import Options
from fedrecsim.errors import SimulationError
from fedrecsim.models.multvae import Layout, MultVAEHyper


def test_w4_is_discovered_at_the_papers_ml1m_size() -> None:
    assert workloads()["w4"] == "benchmarks.w4_fedvae"
    standard = w4_fedvae.tables(w4_fedvae.STANDARD)
    assert (standard["data"]["users"], standard["data"]["items"], standard["data"]["ratings"]) == (6034, 3520, 575_259)
    assert standard["protocol"]["users_per_round"] == 250 and standard["protocol"]["secure_filter"] == "none"
    assert Layout.of(3520, MultVAEHyper(hidden=600, latent=200)).size == 4_589_120


def test_the_simulated_round_aggregates_every_sampled_users_gradient() -> None:
    assert w4_fedvae.sim(w4_fedvae.QUICK)["seconds"] > 0
    assert w4_fedvae.sim(w4_fedvae.QUICK, secure_filter="krum")["seconds"] > 0


def test_the_floor_computes_each_users_gradient() -> None:
    floor = w4_fedvae.floor_gradients(w4_fedvae.QUICK)
    size = Layout.of(300, MultVAEHyper(hidden=64, latent=16)).size
    assert floor.gradients.shape == (50, size) and floor.omega.shape == (size,) and floor.seconds > 0
    assert len({row.tobytes() for row in floor.gradients}) == 50  # fifty users, fifty different gradients
    assert floor.batch.size == 50 and floor.noise.eps.shape == (50, 16)


def test_users_one_by_one_compute_the_floors_gradients_and_a_wrong_one_is_refused() -> None:
    floor = w4_fedvae.floor_gradients(w4_fedvae.QUICK)
    assert w4_fedvae.user_by_user(floor) > 0
    # Each row is checked: user 7 given user 8's draws (its own rows) is refused, and so is a floor row changed
    # by much less than a gradient's scale.
    swapped = floor.noise.eps.copy()
    swapped[[7, 8]] = swapped[[8, 7]]
    with pytest.raises(SimulationError, match="user 7 computed alone"):
        w4_fedvae.user_by_user(floor._replace(noise=floor.noise._replace(eps=swapped)))
    nudged = floor.gradients.copy()
    row = nudged[31]
    row[np.argmax(np.abs(row))] *= 1.001
    with pytest.raises(SimulationError, match="user 31 computed alone"):
        w4_fedvae.user_by_user(floor._replace(gradients=nudged))


def test_the_fused_pass_sums_in_row_order_and_checks_every_block() -> None:
    gradients = np.array([[1e8, 1.0, 2.0], [1.0, 1.0, 2.0], [-1e8, 1.0, 2.0]], dtype=np.float32)
    for group in (1, 2, 3):  # (1e8 + 1) - 1e8 in float32, whatever the grouping
        assert w4_fedvae.fused_check_and_sum(gradients, block=2, group=group).tolist() == [0.0, 3.0, 6.0]
    gradients[1, 2] = np.nan
    with pytest.raises(SimulationError, match="gradient 1"):
        w4_fedvae.fused_check_and_sum(gradients, block=2)


def test_the_fused_pass_hashes_every_byte_of_each_row_and_refuses_a_bad_last_block() -> None:
    rows = np.random.default_rng(3).standard_normal((5, 11)).astype(np.float32)
    for block, group in ((3, 2), (4, 5), (11, 1)):  # a short last block; one group; one block per row
        total, digests = w4_fedvae.fused_pass(rows, block=block, group=group)
        assert digests == [xxhash.xxh3_128(row.tobytes()).digest() for row in rows]
        expected = rows[0].copy()
        for row in rows[1:]:
            expected += row
        assert np.array_equal(total, expected)
    for bad in (np.nan, np.inf, np.float32(2e15)):
        broken = rows.copy()
        broken[3, -1] = bad  # in the last, short block of row 3
        with pytest.raises(SimulationError, match="gradient 3"):
            w4_fedvae.fused_pass(broken, block=4, group=2)


def test_the_stream_pass_hashes_the_rows_one_after_the_other_and_refuses_a_bad_block() -> None:
    rows = np.random.default_rng(5).standard_normal((4, 11)).astype(np.float32)
    expected = rows[0].copy()
    for row in rows[1:]:
        expected += row
    for block in (3, 4, 11):  # a short last block; one block per row
        total, digest = w4_fedvae.stream_pass(rows, block=block)
        assert digest == xxhash.xxh3_128(b"".join(row.tobytes() for row in rows)).digest()
        assert np.array_equal(total, expected)
    broken = rows.copy()
    broken[2, 5] = np.inf
    with pytest.raises(SimulationError, match="gradient 2"):
        w4_fedvae.stream_pass(broken, block=4)
    with pytest.raises(ValueError, match="group must be 1"):
        w4_fedvae.fused_pass(rows, block=4, group=2, hashing="stream")


def test_the_line(monkeypatch) -> None:
    calls = []

    def in_process(module: str, function: str, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(function)
        return {**getattr(w4_fedvae, function)(**kwargs), "peak_rss_mb": 100.0}

    monkeypatch.setattr(w4_fedvae, "run_isolated", in_process)
    monkeypatch.setattr(w4_fedvae, "keep_freed_memory", lambda: True)  # the test process keeps glibc's defaults
    (line,) = list(w4_fedvae.run(Options(quick=True)))
    number = r"\d+\.\d{3}"
    assert re.fullmatch(
        rf"W4 fedvae sim_s={number} floor_s={number} ratio=\d+\.\d\d bound=\d+\.\d\d "
        rf"unbatched_bound=\d+\.\d\d stream_bound=\d+\.\d\d users_s={number} fused_s={number} stream_s={number} "
        rf"adam_s={number} hash_s={number} check_sum_s={number} server_sum_s={number} cpu=process_time "
        rf"krum_round_s={number} krum_filter_s={number} "
        r"users_per_round=50 items=300 params=\d+ sim_peak_mb=\d+ messages_mb=\d+ krum_peak_mb=100",
        line,
    ), line
    assert sorted(calls) == ["krum", "measure"]  # the headline's sides share one process; Krum's round has its own


def test_every_side_runs_in_one_process_as_the_command_runs(monkeypatch) -> None:
    kept: list[bool] = []
    monkeypatch.setattr(w4_fedvae, "keep_freed_memory", lambda: kept.append(True))
    result = w4_fedvae.measure(w4_fedvae.QUICK)
    assert kept == [True]
    assert set(result) == {"sim_s", "floor_s", "users_s", "fused_s", "stream_s", "hash_s", "check_sum_s", "adam_s", "server_sum_s", "params",
                           "sim_peak_mb", "messages_mb"}
    assert result["messages_mb"] == 50 * result["params"] * 4 / 2**20
