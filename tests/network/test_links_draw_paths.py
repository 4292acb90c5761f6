"""`Links.transit`'s short cuts (issue 32) draw exactly what the documented contract gives.

The contract (links.py's module docstring): message ``n`` on ``src -> dst`` is lost when the first uniform of
``draw_bits(seed, src, dst, n, LOSS_DRAW)`` is below ``loss``, else it leaves the link when its last byte is
sent and travels for the model's `Latency.sample` of the two uniforms of its `LATENCY_DRAW` block, plus the
sender's slow delay. `transit` reaches the same numbers by other routes: the counter words of the first
message numbers come from a table, and a log-normal latency is computed in place rather than through the
model. Each expected value here is rebuilt from the public pieces, with ``==`` (bit-identical), over many
links, across the table's end, with loss, bandwidth and slow senders on.
"""

from __future__ import annotations

import itertools

import pytest

from fedrecsim.network import links as links_module
from fedrecsim.network.links import (
    LATENCY_DRAW,
    LOSS_DRAW,
    Empirical,
    LinkSpec,
    Links,
    LogNormal,
    Uniform,
    draw_bits,
    uniforms,
)
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role, user

SEED = 2026
SLOW = {user(1): 0.25, SERVER: 0.125}
SIZES = (0, 40, 1500)


def expected_arrivals(
    spec: LinkSpec, src: Party, dst: Party, first: int, sends: list[tuple[float, int]], extra_s: float
) -> list[float | None]:
    """The contract's arrivals of messages ``first, first + 1, ...`` sent at ``(now, nbytes)`` on a link
    that was idle before them."""
    busy, seen = -float("inf"), []
    for n, (now, nbytes) in enumerate(sends, start=first):
        sent = now
        if spec.bandwidth_bps:
            sent = busy = max(now, busy) + nbytes * (8.0 / spec.bandwidth_bps)
        if spec.loss and uniforms(draw_bits(SEED, src, dst, n, LOSS_DRAW))[0] < spec.loss:
            seen.append(None)
            continue
        seen.append(sent + (spec.latency.sample(*uniforms(draw_bits(SEED, src, dst, n, LATENCY_DRAW))) + extra_s))
    return seen


SPECS = [
    LinkSpec(LogNormal(0.05, 0.5)),
    LinkSpec(LogNormal(0.02, 1.5), loss=0.3),
    LinkSpec(LogNormal(0.05, 0.5), bandwidth_bps=1e6, loss=0.1),
    LinkSpec(Uniform(0.01, 0.2), bandwidth_bps=8e5, loss=0.2),
    LinkSpec(Empirical((0.01, 0.03, 0.07)), loss=0.05),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: f"{spec.latency.model}-loss{spec.loss}-bw{spec.bandwidth_bps}")
@pytest.mark.parametrize("first", [0, links_module._TABLED_COUNTERS - 20])
def test_transit_draws_the_contracts_arrival_on_every_link(spec: LinkSpec, first: int) -> None:
    """Many links (both directions, several roles, slow and not), 40 messages each from message ``first``:
    from 0 inside the counter table, or across its end into packed counters."""
    links = Links(SEED, spec, slow=SLOW)
    parties = [SERVER, THIRD_PARTY, *(user(index) for index in (0, 1, 2, 70_000))]
    pairs = [(src, dst) for src, dst in itertools.permutations(parties, 2)]
    if first:
        links.restore_state({pair: (-float("inf"), first) for pair in pairs})
    sends = {pair: [(0.5 * (step // 3), SIZES[(step + position) % 3]) for step in range(40)]
             for position, pair in enumerate(pairs)}
    seen: dict[tuple[Party, Party], list[float | None]] = {pair: [] for pair in pairs}
    for step in range(40):  # the links interleaved, as a run uses them
        for pair in pairs:
            now, nbytes = sends[pair][step]
            seen[pair].append(links.transit(*pair, nbytes, now))
    for pair in pairs:
        assert seen[pair] == expected_arrivals(spec, *pair, first, sends[pair], SLOW.get(pair[0], 0.0)), pair
    if spec.loss:
        lost = sum(arrival is None for sequence in seen.values() for arrival in sequence)
        assert 0 < lost < 40 * len(pairs)


def test_the_counter_tables_hold_the_packed_counters_of_their_purpose() -> None:
    pack = links_module._COUNTER.pack
    for table, purpose in ((links_module._LATENCY_COUNTERS, LATENCY_DRAW), (links_module._LOSS_COUNTERS, LOSS_DRAW)):
        assert len(table) == links_module._TABLED_COUNTERS
        assert all(word == pack(message, purpose) for message, word in enumerate(table))


def test_a_lognormal_link_of_a_role_pair_override_is_drawn_in_place_with_its_own_parameters() -> None:
    """The in-place log-normal reads its link's own median and sigma, not the default's."""
    override = LinkSpec(LogNormal(0.3, 0.1))
    links = Links(SEED, LinkSpec(LogNormal(0.05, 0.5)), {(Role.USER, Role.SERVER): override})
    arrivals = [links.transit(user(5), SERVER, 10, 1.0) for _ in range(30)]
    assert arrivals == expected_arrivals(override, user(5), SERVER, 0, [(1.0, 10)] * 30, 0.0)
    assert links.transit(Party(Role.SERVER, 0), user(5), 10, 1.0) == expected_arrivals(
        LinkSpec(LogNormal(0.05, 0.5)), SERVER, user(5), 0, [(1.0, 10)], 0.0
    )[0]
