"""Link policies: seeded latency, FIFO bandwidth, loss, role-pair overrides and config errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.network import links as links_module
from fedrecsim.network.links import (
    LATENCY_DRAW,
    LOSS_DRAW,
    Constant,
    Empirical,
    LinkSpec,
    Links,
    LogNormal,
    Partition,
    Uniform,
    draw_bits,
    latency_from_table,
    link_ends,
    uniforms,
)
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role, user


def arrivals(links: Links, src: Party, dst: Party, count: int, nbytes: int = 100) -> list[float | None]:
    return [links.transit(src, dst, nbytes, 0.0) for _ in range(count)]


# ------------------------------------------------------------------ determinism


def test_draws_do_not_depend_on_which_link_is_used_first():
    spec = LinkSpec(LogNormal(0.05, 0.5), loss=0.2)
    pairs = [(user(0), SERVER), (SERVER, user(0)), (user(1), SERVER), (user(0), user(1))]
    forward, backward = Links(11, spec), Links(11, spec)
    seen_forward = {pair: arrivals(forward, *pair, 50) for pair in pairs}
    seen_backward = {pair: arrivals(backward, *pair, 50) for pair in reversed(pairs)}
    interleaved = Links(11, spec)
    seen_interleaved: dict[tuple[Party, Party], list[float | None]] = {pair: [] for pair in pairs}
    for _ in range(50):
        for pair in pairs:
            seen_interleaved[pair].append(interleaved.transit(*pair, 100, 0.0))
    assert seen_forward == seen_backward == seen_interleaved
    # Each direction and each pair has its own stream.
    assert len({tuple(sequence) for sequence in seen_forward.values()}) == len(pairs)


def test_another_seed_gives_other_draws():
    spec = LinkSpec(LogNormal(0.05, 0.5))
    assert arrivals(Links(1, spec), user(0), SERVER, 10) != arrivals(Links(2, spec), user(0), SERVER, 10)


def test_draws_are_a_function_of_seed_link_and_message_number():
    """The documented contract, reproduced by hand: message n is lost if the first uniform of its loss
    block is below p, else its latency is the model's sample of the two uniforms of its latency block."""
    median, sigma, loss = 0.05, 0.5, 0.3
    links = Links(5, LinkSpec(LogNormal(median, sigma), loss=loss))
    src, dst = user(7), SERVER
    expected: list[float | None] = []
    for n in range(200):
        if uniforms(draw_bits(5, src, dst, n, LOSS_DRAW))[0] < loss:
            expected.append(None)
        else:
            u, v = uniforms(draw_bits(5, src, dst, n, LATENCY_DRAW))
            expected.append(median * math.exp(sigma * math.sqrt(-2 * math.log(v)) * math.cos(2 * math.pi * u)))
    assert arrivals(links, src, dst, 200) == expected
    assert 0 < expected.count(None) < 200


def test_a_message_number_counts_lost_messages_and_every_draw_is_its_own():
    links = Links(5, LinkSpec(Uniform(0.0, 1.0), loss=0.5))
    seen = arrivals(links, user(1), SERVER, 100, nbytes=0)
    for n, arrival in enumerate(seen):
        if arrival is not None:
            assert arrival == uniforms(draw_bits(5, user(1), SERVER, n, LATENCY_DRAW))[0]
    # The uniforms of the two purposes of one message, and of neighbouring messages, are all distinct.
    bits = {draw_bits(5, user(1), SERVER, n, purpose) for n in range(100) for purpose in (LATENCY_DRAW, LOSS_DRAW)}
    assert len(bits) == 200


def test_uniforms_cover_their_ranges_at_the_extremes():
    assert uniforms(0) == (0.0, 2.0**-53)
    top = (1 << 128) - 1
    u, v = uniforms(top)
    assert u == 1.0 - 2.0**-53 and v == 1.0


def test_constant_link_without_loss_draws_nothing(monkeypatch):
    def refuse(*args: object) -> None:
        raise AssertionError("a deterministic link drew random bits")

    monkeypatch.setattr(links_module, "_hash128", refuse)
    links = Links(3, LinkSpec(Constant(0.25), bandwidth_bps=8_000))
    assert links.transit(user(0), SERVER, 1000, 2.0) == pytest.approx(3.25)


def test_each_latency_model_draws_from_bits_what_sample_gives_for_their_uniforms():
    models = [Constant(0.3), Uniform(0.1, 0.4), LogNormal(0.05, 0.7), Empirical((0.01, 0.02, 0.5))]
    for bits in (0, 1, (1 << 128) - 1, 0x0123456789ABCDEF_FEDCBA9876543210, 1 << 75, (1 << 53) - 1):
        for model in models:
            assert model._from_bits()(bits) == model.sample(*uniforms(bits))


# ------------------------------------------------------------------ distributions


def test_lognormal_median_and_sigma_are_recovered():
    median, sigma, n = 0.05, 0.5, 20_000
    links = Links(2024, LinkSpec(LogNormal(median, sigma)))
    logs = np.log(np.array(arrivals(links, user(0), SERVER, n, nbytes=0), dtype=float))
    # log(delay) ~ Normal(log(median), sigma). Standard errors: sigma / sqrt(n) = 0.0035 for the mean,
    # sigma / sqrt(2n) = 0.0025 for the standard deviation; we allow 5 standard errors.
    assert abs(logs.mean() - math.log(median)) < 5 * sigma / math.sqrt(n)
    assert abs(logs.std(ddof=1) - sigma) < 5 * sigma / math.sqrt(2 * n)
    # Fixed seed, so this p-value is a constant; it would collapse to ~0 for a wrong distribution.
    assert stats.kstest(np.exp(logs), stats.lognorm(s=sigma, scale=median).cdf).pvalue > 0.01


def test_loss_rate_matches_p():
    p, n = 0.1, 20_000
    lost = sum(arrival is None for arrival in arrivals(Links(9, LinkSpec(loss=p)), user(1), SERVER, n))
    # Binomial(n, p): mean 2000, standard deviation 42.4; tolerance 4 standard deviations.
    assert abs(lost - n * p) < 4 * math.sqrt(n * p * (1 - p))


def test_uniform_latency_stays_in_its_range_and_is_uniform():
    values = np.array(arrivals(Links(4, LinkSpec(Uniform(0.1, 0.3))), user(0), SERVER, 5000), dtype=float)
    assert values.min() >= 0.1 and values.max() < 0.3
    # Fixed seed; a wrong distribution gives a p-value near 0.
    assert stats.kstest(values, stats.uniform(loc=0.1, scale=0.2).cdf).pvalue > 0.01


def test_empirical_latency_picks_each_sample_equally_often():
    samples = (0.01, 0.02, 0.04, 0.08)
    values = arrivals(Links(8, LinkSpec(Empirical(samples))), user(0), SERVER, 8000)
    counts = [values.count(sample) for sample in samples]
    assert sum(counts) == 8000
    # Fixed seed; chi-square against equal frequencies, would be ~0 if one sample were favoured.
    assert stats.chisquare(counts).pvalue > 0.01


# ------------------------------------------------------------------ bandwidth


def test_back_to_back_messages_are_serialized_on_one_link():
    links = Links(0, LinkSpec(Constant(0.5), bandwidth_bps=8_000))  # 1000 bytes per second
    first = links.transit(user(0), SERVER, 500, 10.0)
    second = links.transit(user(0), SERVER, 500, 10.0)
    assert first == pytest.approx(10.0 + 0.5 + 0.5)
    assert second == pytest.approx(first + 0.5)  # waited for the first, then its own 500 bytes


def test_links_do_not_share_bandwidth_and_an_idle_link_starts_at_once():
    links = Links(0, LinkSpec(Constant(0.0), bandwidth_bps=8_000))
    links.transit(user(0), SERVER, 1000, 0.0)  # busy until 1.0
    assert links.transit(SERVER, user(0), 1000, 0.0) == pytest.approx(1.0)  # the other direction
    assert links.transit(user(1), SERVER, 1000, 0.0) == pytest.approx(1.0)  # another sender
    assert links.transit(user(0), SERVER, 1000, 0.5) == pytest.approx(2.0)  # queued behind the first
    assert links.transit(user(0), SERVER, 1000, 5.0) == pytest.approx(6.0)  # idle again


def test_a_lost_message_still_occupies_the_link():
    links = Links(21, LinkSpec(Constant(0.0), bandwidth_bps=8_000, loss=0.5))
    results = arrivals(links, user(0), SERVER, 40, nbytes=1000)  # one second each, all sent at t = 0
    assert any(result is None for result in results)
    for position, result in enumerate(results):
        if result is not None:
            assert result == pytest.approx(position + 1.0)


# ------------------------------------------------------------------ role pairs


def test_role_pair_override_applies_to_the_directed_pair_only():
    links = Links(
        1,
        LinkSpec(Constant(0.1)),
        {(Role.USER, Role.SERVER): LinkSpec(Constant(1.0)), (Role.SERVER, Role.THIRD_PARTY): LinkSpec(loss=0.99)},
    )
    assert links.transit(user(3), SERVER, 10, 0.0) == pytest.approx(1.0)
    assert links.transit(SERVER, user(3), 10, 0.0) == pytest.approx(0.1)
    assert links.transit(user(3), user(4), 10, 0.0) == pytest.approx(0.1)
    assert links.spec(Role.SERVER, Role.THIRD_PARTY).loss == 0.99
    assert links.spec(Role.THIRD_PARTY, Role.SERVER) == LinkSpec(Constant(0.1))
    assert sum(links.transit(SERVER, THIRD_PARTY, 10, 0.0) is None for _ in range(100)) > 90


def test_links_of_one_role_pair_share_a_behaviour_but_not_a_slow_delay_a_partition_or_a_count():
    """Links of one role pair are built from one shared behaviour (issue 32): whichever link of the pair
    opens first, a slow sender keeps its own delay, a partitioned link its own interval, and every link
    its own message count and busy time -- each arrival is the documented draw of its own link."""
    median, sigma, bandwidth = 0.05, 0.5, 8000.0
    partition = Partition(1.0, 2.0, link_ends("user:2->server", "network.partitions"))
    links = Links(
        5, LinkSpec(LogNormal(median, sigma), bandwidth_bps=bandwidth), partitions=[partition], slow={user(1): 3.0}
    )
    sent: dict[Party, int] = {}
    for sender in (user(1), user(0), user(2), user(1), user(2), user(0), user(3)):
        n = sent[sender] = sent.get(sender, -1) + 1
        now = 1.5 if sender == user(2) and n == 1 else 0.0
        u, v = uniforms(draw_bits(5, sender, SERVER, n, LATENCY_DRAW))
        latency = median * math.exp(sigma * math.sqrt(-2 * math.log(v)) * math.cos(2 * math.pi * u))
        sent_at = 0.1 * (n + 1)  # 100 bytes at 8,000 bit/s each, back to back from 0
        expected = None if now == 1.5 else sent_at + (latency + (3.0 if sender == user(1) else 0.0))
        assert links.transit(sender, SERVER, 100, now) == expected, (sender, n)
    assert links.is_down(user(2), SERVER, 1.5) and not links.is_down(user(0), SERVER, 1.5)


def test_links_refuse_malformed_arguments():
    with pytest.raises(TypeError, match="LinkSpec"):
        Links(0, Constant(0.1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Role, Role"):
        Links(0, LinkSpec(), {("user", "server"): LinkSpec()})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="seed"):
        Links(-1, LinkSpec())


# ------------------------------------------------------------------ validation and tables


@pytest.mark.parametrize(
    ("build", "key_path"),
    [
        (lambda: Constant(-0.1), "network.latency.seconds"),
        (lambda: Constant(math.inf), "network.latency.seconds"),
        (lambda: Uniform(0.2, 0.1), "network.latency.high_s"),
        (lambda: LogNormal(0.0, 0.5), "network.latency.median_s"),
        (lambda: LogNormal(0.05, -1.0), "network.latency.sigma"),
        (lambda: LogNormal(0.05, math.nan), "network.latency.sigma"),
        (lambda: Empirical(()), "network.latency.samples_s"),
        (lambda: Empirical((0.1, -0.2)), "network.latency.samples_s"),
        (lambda: LinkSpec(loss=1.0), "network.loss"),
        (lambda: LinkSpec(loss=True), "network.loss"),
        (lambda: LinkSpec(bandwidth_bps=-1), "network.bandwidth_bps"),
        (lambda: LinkSpec(latency=0.05), "network.latency"),
    ],
)
def test_invalid_values_name_their_key(build, key_path):
    with pytest.raises(ConfigError) as caught:
        build()
    assert caught.value.key_path == key_path


@pytest.mark.parametrize(
    "latency",
    [Constant(0.0), Uniform(0.01, 0.02), LogNormal(0.05, 0.5), Empirical((0.1, 0.2))],
)
def test_to_table_round_trips(latency):
    assert latency_from_table(latency.to_table(), "network.latency") == latency


def test_table_values_are_normalised_to_floats():
    latency = latency_from_table({"model": "uniform", "low_s": 0, "high_s": 1}, "network.latency")
    assert latency == Uniform(0.0, 1.0) and isinstance(latency.low_s, float)


@pytest.mark.parametrize(
    ("table", "key_path", "fragment"),
    [
        ({"model": "gamma"}, "run.net.latency.model", '"lognormal"'),
        ({"median_s": 0.05}, "run.net.latency.model", "is missing"),
        ({"model": ["lognormal"]}, "run.net.latency.model", "allowed models"),
        ({"model": "lognormal", "median_s": 0.05}, "run.net.latency.sigma", "required"),
        ({"model": "lognormal", "median_s": 0.05, "sigma": 0.5, "mean_s": 1}, "run.net.latency.mean_s", "sigma"),
        ({"model": "lognormal", "median_s": "50ms", "sigma": 0.5}, "run.net.latency.median_s", "number"),
        ({"model": "constant", "seconds": True}, "run.net.latency.seconds", "number"),
        ({"model": "lognormal", "median_s": -1.0, "sigma": 0.5}, "run.net.latency.median_s", ">= 0"),
        ({"model": "uniform", "low_s": 2.0, "high_s": 1.0}, "run.net.latency.high_s", "low_s"),
        ({"model": "empirical", "samples_s": "0.1"}, "run.net.latency.samples_s", "list"),
        ({"model": "empirical", "samples_s": [0.1], "file": "x.txt"}, "run.net.latency.file", "not both"),
        ({"model": "empirical", "file": 3}, "run.net.latency.file", "path"),
        ({"model": "empirical"}, "run.net.latency.samples_s", "file"),
    ],
)
def test_table_errors_name_the_full_key_path(table, key_path, fragment):
    with pytest.raises(ConfigError) as caught:
        latency_from_table(table, "run.net.latency")
    assert caught.value.key_path == key_path
    assert fragment in str(caught.value)


def test_a_table_that_is_not_a_table_is_refused():
    with pytest.raises(ConfigError, match="network.latency: must be a table"):
        latency_from_table(0.05, "network.latency")  # type: ignore[arg-type]


def test_empirical_samples_from_a_file(tmp_path):
    (tmp_path / "ping.txt").write_text("0.010\n\n0.030\n0.020\n")
    absolute = latency_from_table({"model": "empirical", "file": str(tmp_path / "ping.txt")}, "network.latency")
    relative = latency_from_table({"model": "empirical", "file": "ping.txt"}, "network.latency", base_dir=tmp_path)
    assert absolute == relative == Empirical((0.01, 0.03, 0.02))


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [("0.01\n0.02\nfast\n", 3, "'fast'"), ("0.01\n-0.5\n", 2, ">= 0"), ("nan\n", 1, "finite")],
)
def test_a_bad_sample_line_names_file_and_line(tmp_path, content, line, fragment):
    path = tmp_path / "ping.txt"
    path.write_text(content)
    with pytest.raises(DatasetError) as caught:
        latency_from_table({"model": "empirical", "file": str(path)}, "network.latency")
    assert caught.value.line == line and caught.value.path == str(path)
    assert f"ping.txt:{line}" in str(caught.value) and fragment in str(caught.value)


def test_a_missing_or_empty_sample_file_is_a_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="cannot read"):
        latency_from_table({"model": "empirical", "file": str(tmp_path / "absent.txt")}, "network.latency")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DatasetError, match="no latency samples"):
        latency_from_table({"model": "empirical", "file": str(tmp_path / "empty.txt")}, "network.latency")


@given(
    median=st.floats(1e-4, 10.0),
    sigma=st.floats(0.0, 3.0),
    sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=20),
    bandwidth=st.sampled_from([0.0, 1e3, 1e6]),
)
def test_arrivals_are_never_before_the_send_and_keep_fifo_order_when_bandwidth_bound(median, sigma, sizes, bandwidth):
    links = Links(0, LinkSpec(LogNormal(median, sigma), bandwidth_bps=bandwidth))
    now, finished = 0.0, 0.0
    for nbytes in sizes:
        arrival = links.transit(user(0), SERVER, nbytes, now)
        assert arrival is not None and arrival >= now
        if bandwidth:
            # The transmission of this message ends after the previous one's.
            finished = max(now, finished) + 8 * nbytes / bandwidth
            assert arrival >= finished
        now += 0.001
