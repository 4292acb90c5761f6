"""Availability: churn between rounds and in continuous time, traces, mid-round dropout, stragglers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.network import availability as availability_module
from fedrecsim.network.availability import (
    AlwaysOnline,
    BernoulliChurn,
    LogNormalCompute,
    MarkovChurn,
    MidRoundDropout,
    NoComputeDelay,
    PartyList,
    Trace,
    Transition,
)
from fedrecsim.network.party import SERVER, Party, Role, user

USERS = [user(index) for index in range(2000)]


def within_binomial(successes: int, trials: int, p: float, sds: float = 4.0) -> bool:
    """``successes`` is within ``sds`` standard deviations of Binomial(trials, p)'s mean."""
    return abs(successes - trials * p) <= sds * math.sqrt(trials * p * (1 - p))


@pytest.fixture
def no_generators(monkeypatch):
    def refuse(*args: object) -> None:
        raise AssertionError("drew from a generator")

    monkeypatch.setattr(availability_module, "generator", refuse)


# ------------------------------------------------------------------ AlwaysOnline / defaults


def test_always_online_keeps_everyone_and_never_changes():
    churn = AlwaysOnline()
    assert churn.initial_online(1, USERS[:5]) == frozenset(USERS[:5])
    assert churn.between_rounds(1, 3, USERS[:5], frozenset(USERS[:5])) == (frozenset(), frozenset())
    assert list(churn.timeline(1, USERS[:5], 100.0)) == []


# ------------------------------------------------------------------ BernoulliChurn


def test_bernoulli_join_and_leave_rates_match_p():
    p_join, p_leave = 0.05, 0.1
    churn = BernoulliChurn(p_join, p_leave, initial_online=0.5)
    online = churn.initial_online(3, USERS)
    # Binomial(2000, 0.5): tolerance 4 standard deviations (= 89 parties).
    assert within_binomial(len(online), len(USERS), 0.5)
    offline_trials = online_trials = joins = leaves = 0
    for round_index in range(60):
        joined, left = churn.between_rounds(3, round_index, USERS, online)
        assert not joined & online and left <= online
        offline_trials += len(USERS) - len(online)
        online_trials += len(online)
        joins, leaves = joins + len(joined), leaves + len(left)
        online = (online | joined) - left
    # Each offline party-round is one Bernoulli(p_join) trial, each online one a Bernoulli(p_leave)
    # trial, all independent; tolerance 4 binomial standard deviations.
    assert within_binomial(joins, offline_trials, p_join)
    assert within_binomial(leaves, online_trials, p_leave)


def test_bernoulli_round_answers_do_not_depend_on_call_order_or_on_other_parties():
    churn = BernoulliChurn(0.2, 0.3)
    online = frozenset(USERS[::2])
    fresh = churn.between_rounds(7, 5, USERS, online)
    for earlier in range(5):
        churn.between_rounds(7, earlier, USERS, online)
    assert churn.between_rounds(7, 5, USERS, online) == fresh
    assert churn.between_rounds(7, 5, list(reversed(USERS)), online) == fresh
    # A party's coin belongs to it: listing only some parties gives each of them the same fate.
    subset = USERS[100:300]
    joined, left = churn.between_rounds(7, 5, subset, online)
    assert joined == fresh[0] & set(subset) and left == fresh[1] & set(subset)
    assert churn.between_rounds(7, 6, USERS, online) != fresh
    assert churn.between_rounds(8, 5, USERS, online) != fresh


def test_a_party_list_draws_what_the_plain_list_draws():
    mixed = PartyList([*USERS[:50], SERVER, *USERS[50:]])
    plain = list(mixed)
    churn = BernoulliChurn(0.2, 0.3, initial_online=0.5)
    online = set(USERS[::3])
    assert churn.between_rounds(7, 5, mixed, online) == churn.between_rounds(7, 5, plain, frozenset(online))
    assert churn.initial_online(7, mixed) == churn.initial_online(7, plain)
    assert MidRoundDropout(0.3).crashes(7, 2, mixed) == MidRoundDropout(0.3).crashes(7, 2, plain)
    assert mixed.indices.tolist() == [party.index for party in plain]


def test_bernoulli_larger_probabilities_select_supersets_at_the_same_seed():
    online = frozenset(USERS[:1000])
    low = BernoulliChurn(0.01, 0.02).between_rounds(4, 9, USERS, online)
    high = BernoulliChurn(0.05, 0.1).between_rounds(4, 9, USERS, online)
    assert low[0] < high[0] and low[1] < high[1]


def test_bernoulli_initial_online_extremes_and_zero_probabilities_draw_nothing(no_generators):
    assert BernoulliChurn(0.1, 0.1).initial_online(1, USERS) == frozenset(USERS)
    assert BernoulliChurn(0.1, 0.1, initial_online=0.0).initial_online(1, USERS) == frozenset()
    assert BernoulliChurn(0.0, 0.0).between_rounds(1, 0, USERS, frozenset(USERS[:9])) == (frozenset(), frozenset())


def test_bernoulli_value_semantics():
    churn = BernoulliChurn(0.005, 0.01, initial_online=0.9)
    assert (churn.p_join, churn.p_leave, churn.p_initial) == (0.005, 0.01, 0.9)
    assert churn == BernoulliChurn(0.005, 0.01, 0.9) and churn != BernoulliChurn(0.005, 0.01)
    assert "initial_online=0.9" in repr(churn)


def test_roles_draw_independently_of_each_other():
    parties = [*USERS[:50], SERVER, Party(Role.SILO, 3)]
    churn = BernoulliChurn(0.5, 0.5)
    with_others = churn.between_rounds(2, 1, parties, frozenset())
    users_only = churn.between_rounds(2, 1, USERS[:50], frozenset())
    assert with_others[0] & set(USERS) == users_only[0]


# ------------------------------------------------------------------ MarkovChurn


def test_markov_starts_stationary_and_spends_the_stationary_fraction_online():
    churn = MarkovChurn(mean_on_s=300.0, mean_off_s=100.0)
    assert churn.stationary_online == 0.75
    online = churn.initial_online(5, USERS)
    # Binomial(2000, 0.75): tolerance 4 standard deviations (= 77 parties).
    assert within_binomial(len(online), len(USERS), 0.75)

    horizon = 2000.0
    timeline = list(churn.timeline(5, USERS, horizon))
    state = {party: party in online for party in USERS}
    since = dict.fromkeys(USERS, 0.0)
    time_in = {True: 0.0, False: 0.0}
    exits = {True: 0, False: 0}
    for transition in timeline:
        was_online = state[transition.party]
        assert was_online != transition.online  # alternates
        time_in[was_online] += transition.time_s - since[transition.party]
        exits[was_online] += 1
        state[transition.party], since[transition.party] = transition.online, transition.time_s
    for party in USERS:
        time_in[state[party]] += horizon - since[party]
    # Time-averaged online fraction: each party's average over 5 cycles has a standard deviation of
    # about 0.14 here, so the mean over 2000 parties has about 0.003; we allow 0.02.
    assert abs(time_in[True] / (horizon * len(USERS)) - 0.75) < 0.02
    # Periods are exponential, censored at the horizon: the maximum-likelihood mean is the time spent in
    # the state over the number of exits from it, with relative standard error 1 / sqrt(exits); 5 of them.
    for is_online, mean in ((True, 300.0), (False, 100.0)):
        assert abs(time_in[is_online] / exits[is_online] - mean) < 5 * mean / math.sqrt(exits[is_online])


def test_markov_timeline_is_sorted_bounded_and_extends_as_a_prefix():
    churn = MarkovChurn(50.0, 20.0)
    short = list(churn.timeline(8, USERS[:100], 500.0))
    long = list(churn.timeline(8, USERS[:100], 5000.0))
    assert short == sorted(short, key=lambda t: (t.time_s, t.party))
    assert all(0 < t.time_s < 500.0 for t in short)
    assert short == [t for t in long if t.time_s < 500.0]
    assert list(churn.timeline(8, USERS[:100], 0.0)) == []


def test_markov_party_process_does_not_depend_on_who_else_is_listed():
    churn = MarkovChurn(50.0, 20.0)
    everyone = list(churn.timeline(2, USERS[:40], 1000.0))
    alone = list(churn.timeline(2, [user(17)], 1000.0))
    assert alone == [t for t in everyone if t.party == user(17)]
    assert churn.initial_online(2, [user(17)]) == churn.initial_online(2, USERS[:40]) & {user(17)}


# ------------------------------------------------------------------ Trace


def write(tmp_path, text: str):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_trace_merges_sessions_and_replays_them(tmp_path):
    path = write(
        tmp_path,
        "party,online_from_s,online_until_s\n"
        "user:0,0,100\n"
        "user:0,50,150\n"  # overlaps the first: merged
        "user:0,150,200\n"  # touches: merged, no leave-and-rejoin at 150
        "user:0,300,inf\n"
        "\n"
        " user:1 , 10 , 20 \n"
        "user:2,5,5\n"  # empty: ignored
        "server:0,0,1000\n",
    )
    trace = Trace.from_csv(path)
    assert trace.intervals(user(0)) == ((0.0, 200.0), (300.0, math.inf))
    assert trace.intervals(user(2)) == ()
    assert trace.parties == {user(0), user(1), SERVER}
    listed = [user(0), user(1), user(2), user(3)]
    assert trace.initial_online(0, listed) == {user(0)}
    assert list(trace.timeline(0, listed, 1000.0)) == [
        Transition(10.0, user(1), True),
        Transition(20.0, user(1), False),
        Transition(200.0, user(0), False),
        Transition(300.0, user(0), True),
    ]
    assert list(trace.timeline(0, listed, 250.0)) == list(trace.timeline(0, listed, 1000.0))[:3]
    assert trace == Trace([(user(0), 0.0, 200.0), (user(0), 300.0, math.inf), (user(1), 10, 20), (SERVER, 0, 1000)])


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("user,from,until\nuser:0,0,1\n", 1, "header"),
        ("", 1, "header"),
        ("party,online_from_s,online_until_s\nuser:0,0,1\nuser:x,0,1\n", 3, "not a party"),
        ("party,online_from_s,online_until_s\nuser:0,0,1\nrobot:1,0,1\n", 3, "not a party"),
        ("party,online_from_s,online_until_s\n\nuser:0,zero,1\n", 3, "numbers"),
        ("party,online_from_s,online_until_s\nuser:0,0\n", 2, "3 fields"),
        ("party,online_from_s,online_until_s\nuser:0,10,5\n", 2, "online_until_s must be >="),
        ("party,online_from_s,online_until_s\nuser:0,-1,5\n", 2, "online_from_s"),
        ("party,online_from_s,online_until_s\nuser:0,nan,5\n", 2, "online_from_s"),
        ("party,online_from_s,online_until_s\nuser:0,0,nan\n", 2, "online_until_s"),
    ],
)
def test_a_malformed_trace_names_file_and_line(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as caught:
        Trace.from_csv(path)
    assert caught.value.line == line and caught.value.path == str(path)
    assert f"trace.csv:{line}" in str(caught.value) and fragment in str(caught.value)


def test_an_unreadable_or_empty_trace_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="cannot read"):
        Trace.from_csv(tmp_path / "absent.csv")
    with pytest.raises(DatasetError, match="no sessions"):
        Trace.from_csv(write(tmp_path, "party,online_from_s,online_until_s\n"))


def test_trace_rows_are_checked_when_built_directly():
    with pytest.raises(ValueError, match="trace row 1: party must be a Party"):
        Trace([(user(0), 0, 1), ("user:1", 0, 1)])
    with pytest.raises(ValueError, match="trace row 0: online_until_s"):
        Trace([(user(0), 5, 1)])
    with pytest.raises(ValueError, match="trace row 0: expected"):
        Trace([(user(0), 5)])


sessions = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 20)).map(
        lambda row: (user(row[0]), float(row[1]), float(row[1] + row[2]))
    ),
    max_size=12,
)


@given(rows=sessions)
def test_merged_trace_is_online_exactly_when_some_session_covers_the_time(rows):
    trace = Trace(rows)
    parties = [user(index) for index in range(4)]
    state = {party: party in trace.initial_online(0, parties) for party in parties}
    timeline = list(trace.timeline(0, parties, 100.0))
    for step in range(0, 200):  # half-second grid, including every integer boundary
        time_s = step / 2
        for transition in timeline:
            if transition.time_s == time_s:
                assert state[transition.party] != transition.online
                state[transition.party] = transition.online
        for party in parties:
            covered = any(p == party and start <= time_s < end for p, start, end in rows)
            assert state[party] == covered


# ------------------------------------------------------------------ MidRoundDropout


def test_dropout_rate_matches_p_and_is_stable_per_round():
    p = 0.1
    dropout = MidRoundDropout(p)
    crashed = [dropout.crashes(6, round_index, USERS) for round_index in range(10)]
    # 10 rounds x 2000 parties = 20000 independent Bernoulli(0.1) trials; 4 standard deviations.
    assert within_binomial(sum(map(len, crashed)), 10 * len(USERS), p)
    assert dropout.crashes(6, 9, USERS) == crashed[9]
    assert dropout.crashes(6, 9, USERS[:500]) == crashed[9] & set(USERS[:500])
    assert MidRoundDropout(0.3).crashes(6, 9, USERS) > crashed[9]


def test_dropout_p_zero_draws_nothing_and_p_one_crashes_everyone(no_generators):
    assert MidRoundDropout(0.0).crashes(1, 0, USERS) == frozenset()
    assert MidRoundDropout(0).p == 0.0


def test_dropout_p_one_crashes_everyone():
    assert MidRoundDropout(1.0).crashes(1, 4, USERS[:10]) == frozenset(USERS[:10])
    assert MidRoundDropout(0.5).crashes(1, 4, []) == frozenset()


# ------------------------------------------------------------------ stragglers


def test_no_compute_delay_is_zero_for_everyone():
    delays = NoComputeDelay().delays(1, 0, USERS[:7])
    assert delays.dtype == np.float64 and delays.shape == (7,) and not delays.any()


def test_lognormal_compute_has_the_stated_median_and_a_stable_slow_subset():
    compute = LogNormalCompute(median_s=2.0, sigma=0.4, slow_fraction=0.1, slow_factor=10.0)
    uniform_speed = LogNormalCompute(median_s=2.0, sigma=0.4)
    slow = compute.is_slow(4, USERS)
    # Binomial(2000, 0.1): 4 standard deviations.
    assert within_binomial(int(slow.sum()), len(USERS), 0.1)
    for round_index in (0, 1, 17):
        delays = compute.delays(4, round_index, USERS)
        assert delays.dtype == np.float64 and delays.shape == (len(USERS),) and (delays > 0).all()
        # The slow parties are the same every round, and only their times are scaled.
        np.testing.assert_allclose(delays / uniform_speed.delays(4, round_index, USERS), np.where(slow, 10.0, 1.0))
    logs = np.log(uniform_speed.delays(4, 3, USERS))
    # log(delay) ~ Normal(log 2, 0.4): standard error of the mean 0.4 / sqrt(2000) = 0.009; 5 of them.
    assert abs(logs.mean() - math.log(2.0)) < 5 * 0.4 / math.sqrt(len(USERS))
    assert not np.array_equal(uniform_speed.delays(4, 3, USERS), uniform_speed.delays(4, 4, USERS))


def test_compute_delays_align_with_the_listed_order():
    compute = LogNormalCompute(1.0, 0.5, slow_fraction=0.5)
    forward = compute.delays(9, 2, USERS[:30])
    backward = compute.delays(9, 2, USERS[29::-1])
    np.testing.assert_array_equal(forward, backward[::-1])


def test_constant_compute_time_draws_nothing(no_generators):
    np.testing.assert_array_equal(LogNormalCompute(0.5, 0.0).delays(1, 0, USERS[:3]), [0.5, 0.5, 0.5])


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("build", "key_path"),
    [
        (lambda: BernoulliChurn(1.5, 0.1), "availability.p_join"),
        (lambda: BernoulliChurn(0.1, -0.01), "availability.p_leave"),
        (lambda: BernoulliChurn(0.1, math.nan), "availability.p_leave"),
        (lambda: BernoulliChurn(0.1, 0.1, initial_online=2), "availability.initial_online"),
        (lambda: BernoulliChurn(True, 0.1), "availability.p_join"),
        (lambda: BernoulliChurn("0.1", 0.1), "availability.p_join"),
        (lambda: MarkovChurn(0.0, 10.0), "availability.mean_on_s"),
        (lambda: MarkovChurn(10.0, math.inf), "availability.mean_off_s"),
        (lambda: MidRoundDropout(-0.1), "availability.dropout"),
        (lambda: LogNormalCompute(0.0, 0.5), "availability.compute.median_s"),
        (lambda: LogNormalCompute(1.0, -0.5), "availability.compute.sigma"),
        (lambda: LogNormalCompute(1.0, 0.5, slow_fraction=1.2), "availability.compute.slow_fraction"),
        (lambda: LogNormalCompute(1.0, 0.5, slow_factor=0.5), "availability.compute.slow_factor"),
    ],
)
def test_invalid_parameters_name_their_key(build, key_path):
    with pytest.raises(ConfigError) as caught:
        build()
    assert caught.value.key_path == key_path


def test_p_join_message_states_the_range():
    with pytest.raises(ConfigError, match=r"availability.p_join: must be in \[0, 1\], got 1.5"):
        BernoulliChurn(1.5, 0.1)


def test_bad_round_index_and_horizon_are_refused():
    with pytest.raises(ValueError, match="round_index"):
        MidRoundDropout(0.5).crashes(1, -1, USERS[:3])
    with pytest.raises(ValueError, match="round_index"):
        BernoulliChurn(0.1, 0.1).between_rounds(1, 1.5, USERS[:3], frozenset())
    with pytest.raises(ValueError, match="horizon_s"):
        list(MarkovChurn(1.0, 1.0).timeline(1, USERS[:3], math.inf))


def test_a_set_of_parties_is_taken_in_sorted_order():
    chosen = {user(5), user(1), user(3)}
    assert MidRoundDropout(0.5).crashes(2, 1, chosen) == MidRoundDropout(0.5).crashes(2, 1, sorted(chosen))
    compute = LogNormalCompute(1.0, 0.5)
    np.testing.assert_array_equal(compute.delays(2, 1, chosen), compute.delays(2, 1, sorted(chosen)))


# ------------------------------------------------------------------ per-party draws (issue 13)


def test_a_partys_draw_in_a_mixed_role_list_equals_its_draw_alone():
    # Non-user roles first and last, so that no role's code is the first or the only one in the list.
    mixed = [SERVER, *USERS[:5], Party(Role.SILO, 3), USERS[40], Party(Role.THIRD_PARTY, 0), Party(Role.PROXY, 2)]
    compute = LogNormalCompute(median_s=1.0, sigma=1.0)
    together = compute.delays(11, 4, mixed)
    alone = [compute.delays(11, 4, [party])[0] for party in mixed]
    assert together.tolist() == alone
    # Different roles with the same index draw from different generators.
    assert len({together[0], together[1]}) == 2  # server:0 and user:0


def test_mid_round_crash_sets_differ_between_rounds():
    dropout = MidRoundDropout(0.5)
    rounds = [dropout.crashes(6, round_index, USERS[:200]) for round_index in range(1, 6)]
    assert len(set(rounds)) == len(rounds)
    # Independent rounds: two Bernoulli(0.5) crash sets share about a quarter of the parties (Binomial(200,
    # 0.25), 4 standard deviations), where one set reused would share half.
    assert within_binomial(len(rounds[0] & rounds[1]), 200, 0.25)
