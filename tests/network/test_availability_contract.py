"""Availability draws recomputed from the documented generator keys (issue 13), and trace file errors."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from fedrecsim.errors import DatasetError
from fedrecsim.network.availability import BernoulliChurn, LogNormalCompute, MarkovChurn, MidRoundDropout, Trace
from fedrecsim.network.party import SERVER, Party, Role, user
from fedrecsim.seeding import Stream, generator

# Sub-stream tags of the module docstring's table.
INITIAL, ROUND, PARTY = 0, 1, 2


def _uniform(seed: int, stream: Stream, ids: tuple[int, ...], party: Party, count: int) -> float:
    """Party ``role:i``'s number: draw ``count`` (= max index + 1) uniforms from its role's generator."""
    return float(generator(seed, stream, *ids, party.role.code).random(count)[party.index])


def test_lognormal_compute_times_are_median_times_exp_sigma_z_of_each_partys_normal() -> None:
    parties = [user(0), user(3), Party(Role.SILO, 1), user(5)]
    compute = LogNormalCompute(median_s=2.0, sigma=0.5)
    got = compute.delays(12, 4, parties)
    expected = []
    for party in parties:
        count = 6 if party.role is Role.USER else 2
        z = generator(12, Stream.STRAGGLER, ROUND, 4, party.role.code).standard_normal(count)[party.index]
        expected.append(2.0 * math.exp(0.5 * z))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_a_party_is_slow_iff_its_uniform_is_below_the_slow_fraction() -> None:
    parties = [user(index) for index in range(8)]
    u = [_uniform(3, Stream.STRAGGLER, (INITIAL,), party, 8) for party in parties]
    # With the fraction exactly at party 4's uniform, party 4 is not slow (strictly below), the others by rule.
    fraction = u[4]
    slow = LogNormalCompute(1.0, 0.0, slow_fraction=fraction, slow_factor=3.0)
    assert slow.is_slow(3, parties).tolist() == [value < fraction for value in u]
    assert slow.delays(3, 0, parties).tolist() == [3.0 if value < fraction else 1.0 for value in u]


def test_bernoulli_coins_are_each_partys_uniform_compared_strictly() -> None:
    parties = [user(index) for index in range(10)]
    online = frozenset(parties[::2])
    coins = [_uniform(5, Stream.AVAILABILITY, (ROUND, 7), party, 10) for party in parties]
    # Each probability exactly at one party's coin (party 1 offline, party 0 online); the other at 1.0, so
    # that the exact one is below the larger of the two and the party's own comparison decides.
    joined, left = BernoulliChurn(coins[1], 1.0).between_rounds(5, 7, parties, online)
    assert joined == {p for p, c in zip(parties, coins) if p not in online and c < coins[1]}
    assert left == online and parties[1] not in joined
    joined, left = BernoulliChurn(1.0, coins[0]).between_rounds(5, 7, parties, online)
    assert left == {p for p, c in zip(parties, coins) if p in online and c < coins[0]}
    assert joined == frozenset(parties) - online and parties[0] not in left
    initial = [_uniform(5, Stream.AVAILABILITY, (INITIAL,), party, 10) for party in parties]
    p = initial[3]
    assert BernoulliChurn(0.1, 0.1, initial_online=p).initial_online(5, parties) == {
        party for party, value in zip(parties, initial) if value < p
    }


def test_dropout_is_each_partys_uniform_below_p() -> None:
    parties = [user(index) for index in range(10)] + [SERVER]
    u = [_uniform(8, Stream.DROPOUT, (ROUND, 2), party, 10 if party.role is Role.USER else 1) for party in parties]
    p = u[6]
    assert MidRoundDropout(p).crashes(8, 2, parties) == {party for party, value in zip(parties, u) if value < p}


def test_a_markov_party_starts_online_iff_its_first_uniform_is_below_the_stationary_fraction() -> None:
    churn = MarkovChurn(mean_on_s=30.0, mean_off_s=10.0)
    parties = [user(index) for index in range(40)]
    first = {party: generator(4, Stream.AVAILABILITY, PARTY, party.role.code, party.index).random() for party in parties}
    assert churn.initial_online(4, parties) == {party for party in parties if first[party] < 0.75}
    # Its first change comes after its first period: an exponential of the state's mean from the same generator.
    party = parties[0]
    rng = generator(4, Stream.AVAILABILITY, PARTY, party.role.code, party.index)
    online = rng.random() < 0.75
    means = (30.0, 10.0) if online else (10.0, 30.0)
    periods = rng.standard_exponential(16) * np.resize(means, 16)
    changes = list(itertools.islice(churn.timeline(4, [party], 1e9), 3))
    np.testing.assert_allclose([t.time_s for t in changes], np.cumsum(periods)[:3], rtol=1e-12)
    assert [t.online for t in changes] == [not online, online, not online]


def test_bernoulli_churn_is_hashable_by_value() -> None:
    assert hash(BernoulliChurn(0.1, 0.2, 0.3)) == hash(BernoulliChurn(0.1, 0.2, 0.3))
    assert len({BernoulliChurn(0.1, 0.2, 0.3), BernoulliChurn(0.1, 0.2, 0.3), BernoulliChurn(0.1, 0.2)}) == 2


def test_a_trace_prints_its_size() -> None:
    trace = Trace([(user(0), 0, 1), (user(0), 5, 6), (user(1), 2, 3), (user(2), 4, 4)])
    assert repr(trace) == "Trace(<2 parties, 3 sessions>)"


def test_a_trace_file_may_start_with_a_utf8_byte_order_mark(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes("party,online_from_s,online_until_s\r\nuser:1,0,5\r\n".encode("utf-8-sig"))
    assert Trace.from_csv(path).intervals(user(1)) == ((0.0, 5.0),)


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        (b"party,online_from_s,online_until_s\nuser:0,1\n", 2,
         "expected 3 fields (party,online_from_s,online_until_s), got 2"),
        (b"party,from\nuser:0,1\n", 1, "expected the header line party,online_from_s,online_until_s, got ['party', 'from']"),
        (b"party,online_from_s,online_until_s\n", None, "holds no sessions after the header"),
        (b"party,online_from_s,online_until_s\nuser:0,0,\xe9\n", None, "not UTF-8 text: "),
        (b"party,online_from_s,online_until_s\nuser:0,0," + b"9" * 200_000 + b"\n", None, "not valid CSV: "),
    ],
)
def test_trace_file_errors_name_the_file_the_line_and_the_problem(tmp_path, content: bytes, line: int | None, problem: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(content)
    with pytest.raises(DatasetError) as caught:
        Trace.from_csv(path)
    assert caught.value.path == str(path) and caught.value.line == line
    assert caught.value.problem.startswith(problem) and (problem.endswith(": ") or caught.value.problem == problem)


def test_an_unreadable_trace_names_the_file(tmp_path) -> None:
    with pytest.raises(DatasetError) as caught:
        Trace.from_csv(tmp_path / "absent.csv")
    assert caught.value.path == str(tmp_path / "absent.csv") and caught.value.problem.startswith("cannot read the trace: ")


def test_parameters_are_stored_as_floats() -> None:
    compute = LogNormalCompute(median_s=2, sigma=0, slow_fraction=0, slow_factor=1)
    assert [(type(value), value) for value in (compute.median_s, compute.sigma, compute.slow_fraction, compute.slow_factor)] == [
        (float, 2.0), (float, 0.0), (float, 0.0), (float, 1.0)
    ]
    assert type(MidRoundDropout(1).p) is float
    markov = MarkovChurn(3, 1)
    assert (type(markov.mean_on_s), type(markov.mean_off_s)) == (float, float)


@pytest.mark.parametrize(
    ("build", "key_path", "problem"),
    [
        (lambda: LogNormalCompute(0.0, 0.5), "availability.compute.median_s", "must be a finite number > 0 seconds, got 0.0"),
        (lambda: LogNormalCompute("1", 0.5), "availability.compute.median_s", "must be a number, got '1'"),
        (lambda: LogNormalCompute(1.0, "x"), "availability.compute.sigma", "must be a number, got 'x'"),
        (lambda: LogNormalCompute(1.0, math.inf), "availability.compute.sigma", "must be a finite number >= 0, got inf"),
        (lambda: LogNormalCompute(1.0, 0.5, slow_factor="x"), "availability.compute.slow_factor", "must be a number, got 'x'"),
        (lambda: LogNormalCompute(1.0, 0.5, slow_factor=0.99), "availability.compute.slow_factor", "must be a finite number >= 1, got 0.99"),
        (lambda: LogNormalCompute(1.0, 0.5, slow_fraction=-0.5), "availability.compute.slow_fraction", "must be in [0, 1], got -0.5"),
        (lambda: MarkovChurn(-1.0, 1.0), "availability.mean_on_s", "must be a finite number > 0 seconds, got -1.0"),
        (lambda: MidRoundDropout(2), "availability.dropout", "must be in [0, 1], got 2"),
    ],
)
def test_invalid_parameters_say_what_was_expected(build, key_path: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    from fedrecsim.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        build()
    assert (caught.value.key_path, caught.value.problem) == (key_path, problem)


def test_a_slow_factor_of_one_is_allowed_and_changes_nothing() -> None:
    parties = [user(index) for index in range(20)]
    plain = LogNormalCompute(1.0, 0.5).delays(2, 1, parties)
    np.testing.assert_array_equal(LogNormalCompute(1.0, 0.5, slow_fraction=0.5, slow_factor=1.0).delays(2, 1, parties), plain)


def test_a_bad_quoted_trace_field_is_reported_verbatim_with_its_line_break(tmp_path) -> None:
    # The file is read as written (newline=""): a quoted field keeps its CRLF and the error shows it as is.
    path = tmp_path / "trace.csv"
    path.write_bytes(b'party,online_from_s,online_until_s\r\nuser:0,"1\r\n2",3\r\n')
    with pytest.raises(DatasetError) as caught:
        Trace.from_csv(path)
    assert caught.value.problem == "times must be numbers of seconds, got '1\\r\\n2', '3'"
    assert caught.value.line == 3


def _markov_reference(seed: int, party: Party, mean_on: float, mean_off: float, count: int) -> tuple[bool, list[float]]:
    """The documented process: one uniform for the initial state, then alternating exponential periods."""
    rng = generator(seed, Stream.AVAILABILITY, PARTY, party.role.code, party.index)
    online = bool(rng.random() < mean_on / (mean_on + mean_off))
    means = [mean_on, mean_off] if online else [mean_off, mean_on]
    periods = rng.standard_exponential(count) * np.array([means[k % 2] for k in range(count)])
    return online, np.cumsum(periods).tolist()


def test_markov_changes_alternate_exponential_periods_from_either_initial_state() -> None:
    churn = MarkovChurn(mean_on_s=3.0, mean_off_s=1.0)
    states = {}
    for index in range(12):
        party = user(index)
        online, times = _markov_reference(6, party, 3.0, 1.0, 40)
        states[online] = True
        changes = list(itertools.islice(churn.timeline(6, [party], 1e12), 40))
        np.testing.assert_allclose([t.time_s for t in changes], times, rtol=1e-12)
        assert [t.online for t in changes] == [(not online) if k % 2 == 0 else online for k in range(40)]
        # The horizon is exclusive: a change exactly at it is not listed.
        assert list(churn.timeline(6, [party], times[0])) == []
        assert [t.time_s for t in churn.timeline(6, [party], times[2])] == times[:2]
    assert set(states) == {True, False}  # both initial states were checked


def test_a_markov_party_is_online_at_start_only_if_its_uniform_is_strictly_below_the_fraction() -> None:
    # mean_on = u, mean_off = 1 - u (exact for u >= 0.5): the stationary fraction is exactly u.
    for index in range(50):
        party = user(index)
        u = float(generator(2, Stream.AVAILABILITY, PARTY, party.role.code, party.index).random())
        if u >= 0.5:
            break
    assert u >= 0.5
    churn = MarkovChurn(u, 1.0 - u)
    assert churn.stationary_online == u
    assert churn.initial_online(2, [party]) == frozenset()
    assert MarkovChurn(math.nextafter(u, 2.0), 1.0 - u).stationary_online > u


def test_a_trace_change_exactly_at_the_horizon_is_not_listed() -> None:
    trace = Trace([(user(0), 0.0, 10.0), (user(1), 10.0, 20.0)])
    assert list(trace.timeline(0, [user(0), user(1)], 10.0)) == []
    assert [(t.time_s, t.party) for t in trace.timeline(0, [user(0), user(1)], 10.5)] == [(10.0, user(0)), (10.0, user(1))]


@pytest.mark.parametrize(("horizon", "name"), [(True, "True"), ("5", "'5'"), (-1.0, "-1.0"), (math.nan, "nan")])
def test_a_horizon_must_be_a_finite_non_negative_number(horizon: object, name: str) -> None:
    for churn in (MarkovChurn(1.0, 1.0), Trace([(user(0), 0.0, 1.0)])):
        with pytest.raises(ValueError, match=f"^horizon_s must be a finite number of seconds >= 0, got {re.escape(name)}$"):
            churn.timeline(1, [user(0)], horizon)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ((user(0), "1", 2.0), "online_from_s must be a number of seconds, got '1'"),
        ((user(0), 1.0, True), "online_until_s must be a number of seconds, got True"),
        ((user(0), 1.0, None), "online_until_s must be a number of seconds, got None"),
    ],
)
def test_a_trace_row_names_the_time_that_is_not_a_number(row: tuple[object, ...], problem: str) -> None:
    with pytest.raises(ValueError, match=f"^trace row 0: {re.escape(problem)}$"):
        Trace([row])  # type: ignore[list-item]


def test_markov_mean_off_is_checked_by_name() -> None:
    from fedrecsim.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        MarkovChurn(1.0, 0.0)
    assert (caught.value.key_path, caught.value.problem) == ("availability.mean_off_s", "must be a finite number > 0 seconds, got 0.0")
