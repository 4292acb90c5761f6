"""W1 at a tiny size: both simulations do the whole workload, alike, and the ledger counts real bytes.

Nothing here looks at wall-clock times; the benchmark's numbers are for `make bench` to print.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from benchmarks import workloads
from benchmarks.__main__ import main
from benchmarks.w1_rounds import (
    W1Config,
    W1Reply,
    W1Request,
    check_same_work,
    run_fedrecsim,
    run_simpy,
    trio_wake_floor,
)
from fedrecsim.errors import ConfigError, SimulationError
from fedrecsim.network import SERVER, Party, Role
from fedrecsim.network.wire import encode

# 300 users crosses the msgpack boundaries at indices 128 and 256, where a party's encoded index grows
# by a byte: the byte counts below must follow each message's real size.
CONFIG = W1Config(users=300, rounds=3, seed=11)


@pytest.fixture(scope="module")
def ours():
    return run_fedrecsim(CONFIG)


@pytest.fixture(scope="module")
def peer():
    return run_simpy(CONFIG)


def _user(index: int) -> Party:
    return Party(Role.USER, index)


def _sizes(config: W1Config, index: int, round_index: int) -> tuple[int, int]:
    """Encoded sizes of one round's request to and reply from user ``index``."""
    vector = config.server_vector()
    request = len(encode(SERVER, _user(index), 0.0, W1Request(round_index, vector)))
    reply = len(encode(_user(index), SERVER, 0.0, W1Reply(round_index, vector)))
    return request, reply


def test_every_user_replies_in_every_round(ours, peer):
    assert ours.replies == (CONFIG.users,) * CONFIG.rounds
    assert peer.replies == (CONFIG.users,) * CONFIG.rounds


def test_ledger_counts_the_encoded_size_of_every_message(ours):
    ledger = ours.ledger
    server_sent = server_received = 0
    for index in range(CONFIG.users):
        requests = replies = 0
        for round_index in range(CONFIG.rounds):
            request, reply = _sizes(CONFIG, index, round_index)
            requests += request
            replies += reply
        counters = ledger.party(_user(index))
        assert counters == {
            "sent_bytes": replies,
            "recv_bytes": requests,
            "sent_msgs": CONFIG.rounds,
            "recv_msgs": CONFIG.rounds,
            "dropped_msgs": 0,
        }
        server_sent += requests
        server_received += replies
    assert ledger.party(SERVER)["sent_bytes"] == server_sent
    assert ledger.party(SERVER)["recv_bytes"] == server_received
    kinds = ledger.summary()["kinds"]
    assert kinds["bench.w1_request"] == {"msgs": CONFIG.users * CONFIG.rounds, "bytes": server_sent}
    assert kinds["bench.w1_reply"] == {"msgs": CONFIG.users * CONFIG.rounds, "bytes": server_received}
    assert (ours.messages, ours.bytes) == (2 * CONFIG.users * CONFIG.rounds, server_sent + server_received)


def test_simpy_peer_does_the_same_work(ours, peer):
    assert (peer.messages, peer.bytes) == (ours.messages, ours.bytes)
    check_same_work(CONFIG, ours, peer)


def test_virtual_time_is_the_sum_of_each_rounds_slowest_round_trip(ours, peer):
    """Replaying the same per-link latency draws by hand gives the time both simulations ended at."""
    links = CONFIG.links()

    def arrival(src: Party, dst: Party, nbytes: int, now: float) -> float:
        return math.ceil(links.transit(src, dst, nbytes, now) / CONFIG.resolution_s - 1e-9) * CONFIG.resolution_s

    now = 0.0
    for round_index in range(CONFIG.rounds):
        round_end = now
        for index in range(CONFIG.users):
            request, reply = _sizes(CONFIG, index, round_index)
            at_user = arrival(SERVER, _user(index), request, now)
            round_end = max(round_end, arrival(_user(index), SERVER, reply, at_user))
        now = round_end
    # Rounding each hop up to 1 ms: each round takes at least two resolutions.
    assert now >= 2 * CONFIG.rounds * CONFIG.resolution_s
    assert ours.virtual_time_s == pytest.approx(now, abs=1e-9)
    assert peer.virtual_time_s == pytest.approx(now, abs=1e-9)


def test_sides_that_differ_are_refused(ours, peer):
    short = dataclasses.replace(peer, replies=(CONFIG.users - 1, *peer.replies[1:]))
    with pytest.raises(SimulationError, match="did not complete"):
        check_same_work(CONFIG, ours, short)
    lighter = dataclasses.replace(peer, bytes=peer.bytes - 1)
    with pytest.raises(SimulationError, match="different work"):
        check_same_work(CONFIG, ours, lighter)
    later = dataclasses.replace(peer, virtual_time_s=peer.virtual_time_s + 0.001)
    with pytest.raises(SimulationError, match="different delays"):
        check_same_work(CONFIG, ours, later)


@pytest.mark.parametrize("key, value", [("users", 0), ("rounds", -1), ("users", 1.5), ("seed", -3)])
def test_bad_sizes_name_the_key(key, value):
    with pytest.raises(ConfigError, match=f"w1.{key}"):
        W1Config(**{key: value})


def test_w1_is_discovered():
    assert list(workloads())[0] == "w1"
    assert workloads()["w1"] == "benchmarks.w1_rounds"


def test_cli_prints_the_two_w1_lines_and_the_machines_load(capsys):
    assert main(["W1", "--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    number = r"(\d+(?:\.\d+)?)"
    assert len(lines) == 3
    # The last line says how loaded the machine was while the figures were taken.
    assert re.fullmatch(rf"machine cpus=\d+ load_1m_before={number} load_1m_after={number}", lines[2]), lines[2]
    comparison = re.fullmatch(
        rf"W1 fedrecsim rounds_per_s={number} simpy rounds_per_s={number} ratio={number} ratio_cpu={number} "
        rf"ratio_target_min=1\.5 users=100 rounds=10",
        lines[0],
    )
    assert comparison is not None, lines[0]
    ours_rate, peer_rate, ratio, ratio_cpu = map(float, comparison.groups())
    # The printed rates are rounded to 0.1 and the ratio to 0.01, so they agree only to rounding.
    assert ratio == pytest.approx(ours_rate / peer_rate, rel=0.02, abs=0.01)
    assert ratio_cpu > 0
    scale = re.fullmatch(
        rf"W1-scale users=2000 rounds=2 wall_s_per_round={number} trio_floor_s_per_round={number} "
        rf"ratio_floor={number} cpu_s_per_round={number} trio_floor_cpu_s_per_round={number} "
        rf"ratio_floor_cpu={number} ratio_floor_target_max=5 peak_rss_mb={number} "
        rf"cpu_s_per_round_range={number}-{number} floor_rounds=9 trio_floor_cpu_s_per_round_range={number}-{number}",
        lines[1],
    )
    assert scale is not None, lines[1]
    wall, floor, ratio_floor, cpu, floor_cpu, ratio_floor_cpu, peak, low, high, floor_low, floor_high = map(
        float, scale.groups()
    )
    assert all(value > 0 for value in (wall, floor, cpu, floor_cpu, peak))
    # Each CPU figure is a median of its rounds, so it lies within their range (to the printed rounding).
    assert low - 0.001 <= cpu <= high + 0.001
    assert floor_low - 0.001 <= floor_cpu <= floor_high + 0.001
    # Each ratio is the printed figure over its floor, to the printed rounding (3 decimals on a floor of
    # about 0.02 s, and 1 decimal on the ratio).
    assert ratio_floor == pytest.approx(wall / floor, rel=0.15, abs=0.1)
    assert ratio_floor_cpu == pytest.approx(cpu / floor_cpu, rel=0.15, abs=0.1)


def test_trio_wake_floor_wakes_every_task_every_round():
    # It returns only once every task has run in every round (the last one wakes the main task), so a
    # miscount would hang the test rather than pass it.
    wall, cpu = trio_wake_floor(tasks=7, rounds=3)
    assert len(wall) == len(cpu) == 3
    assert all(seconds > 0 for seconds in wall) and all(seconds >= 0 for seconds in cpu)


def test_cli_refuses_an_unknown_workload(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["w99"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "unknown workload(s) w99; known: " in error
    assert "w1" in error.rpartition("known: ")[2].split(", ")
