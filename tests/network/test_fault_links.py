"""Link faults against their documented rules (issue 18): duplication, reordering delay, partitions and
slow parties, each drawn from the link's own counter-based bits -- and nothing drawn when not configured."""

from __future__ import annotations

import math
import re

import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.network.links import (
    COPY_LATENCY_DRAW,
    DUPLICATE_DRAW,
    LATENCY_DRAW,
    LOSS_DRAW,
    REORDER_DRAW,
    Constant,
    LinkEnds,
    LinkSpec,
    Links,
    Partition,
    Uniform,
    draw_bits,
    link_ends,
    uniforms,
)
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role, user

ALICE, BOB = user(0), user(1)


def _u(seed: int, src: Party, dst: Party, message: int, purpose: int) -> tuple[float, float]:
    return uniforms(draw_bits(seed, src, dst, message, purpose))


def test_the_draw_purposes_are_numbered_after_latency_and_loss() -> None:
    assert (LATENCY_DRAW, LOSS_DRAW, REORDER_DRAW, DUPLICATE_DRAW, COPY_LATENCY_DRAW) == (0, 1, 2, 3, 4)


# ------------------------------------------------------------------ LinkSpec


def test_fault_probabilities_and_the_reorder_delay_are_stored_as_floats() -> None:
    spec = LinkSpec(Constant(0.1), duplicate=1, reorder=1, reorder_delay_s=2)
    assert (spec.duplicate, spec.reorder, spec.reorder_delay_s) == (1.0, 1.0, 2.0)
    assert [type(value) for value in (spec.duplicate, spec.reorder, spec.reorder_delay_s)] == [float, float, float]
    assert (LinkSpec().duplicate, LinkSpec().reorder, LinkSpec().reorder_delay_s) == (0.0, 0.0, 0.0)
    assert LinkSpec(duplicate=0.0, reorder=0.0, reorder_delay_s=0.0).reorder_delay_s == 0.0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LinkSpec(duplicate=-0.5), "network.duplicate: must be in [0, 1], got -0.5"),
        (lambda: LinkSpec(duplicate=1.5), "network.duplicate: must be in [0, 1], got 1.5"),
        (lambda: LinkSpec(reorder=-0.5, reorder_delay_s=1.0), "network.reorder: must be in [0, 1], got -0.5"),
        (lambda: LinkSpec(reorder=1.5, reorder_delay_s=1.0), "network.reorder: must be in [0, 1], got 1.5"),
        (lambda: LinkSpec(duplicate="often"), 'network.duplicate: must be a number, got "often"'),
        (lambda: LinkSpec(reorder_delay_s=-1.0), "network.reorder_delay_s: must be >= 0 seconds, got -1.0"),
        (lambda: LinkSpec(reorder=0.5), "network.reorder_delay_s: must be > 0 seconds when reorder = 0.5 > 0"),
    ],
)
def test_invalid_fault_values_name_their_key(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build()


# ------------------------------------------------------------------ reordering and duplication


def test_without_faults_a_link_draws_only_latency_and_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    purposes: list[int] = []
    links = Links(3, LinkSpec(Uniform(0.0, 1.0), loss=0.5))
    from fedrecsim.network import links as module

    real = module._hash128
    monkeypatch.setattr(module, "_hash128", lambda data: purposes.append(data[-8]) or real(data))
    for _ in range(20):
        links.transit(ALICE, SERVER, 10, 0.0)
    assert set(purposes) <= {LATENCY_DRAW, LOSS_DRAW} and LATENCY_DRAW in purposes
    assert links.copy_at is None


def test_a_reordered_message_gets_its_extra_delay_from_its_own_reorder_bits() -> None:
    links = Links(4, LinkSpec(Constant(0.5), reorder=0.5, reorder_delay_s=3.0))
    held = 0
    for n in range(60):
        u, v = _u(4, ALICE, SERVER, n, REORDER_DRAW)
        extra = v * 3.0 if u < 0.5 else 0.0
        held += u < 0.5
        assert links.transit(ALICE, SERVER, 0, 10.0) == 10.5 + extra
    assert 15 < held < 45  # about half of 60: the draw decides, not every message
    assert links.copy_at is None  # reordering never duplicates


def test_a_message_whose_reorder_uniform_equals_the_probability_is_not_held() -> None:
    u = _u(6, ALICE, SERVER, 0, REORDER_DRAW)[0]
    assert Links(6, LinkSpec(Constant(0.5), reorder=u, reorder_delay_s=9.0)).transit(ALICE, SERVER, 0, 0.0) == 0.5
    held = Links(6, LinkSpec(Constant(0.5), reorder=math.nextafter(u, 1.0), reorder_delay_s=9.0)).transit(ALICE, SERVER, 0, 0.0)
    assert held == 0.5 + 9.0 * _u(6, ALICE, SERVER, 0, REORDER_DRAW)[1]


def test_reordering_lets_a_later_message_overtake_an_earlier_one() -> None:
    links = Links(1, LinkSpec(Constant(0.01), reorder=1.0, reorder_delay_s=1.0))
    arrivals = [links.transit(ALICE, SERVER, 0, 0.001 * n) for n in range(20)]
    assert arrivals != sorted(arrivals)
    assert all(0.001 * n + 0.01 <= arrival < 0.001 * n + 1.01 for n, arrival in enumerate(arrivals))


def test_a_duplicated_message_has_a_copy_with_its_own_latency_draw() -> None:
    links = Links(9, LinkSpec(Uniform(0.0, 2.0), duplicate=0.5))
    copies = 0
    for n in range(60):
        arrival = links.transit(ALICE, SERVER, 0, 5.0)
        assert arrival == 5.0 + 2.0 * _u(9, ALICE, SERVER, n, LATENCY_DRAW)[0]
        if _u(9, ALICE, SERVER, n, DUPLICATE_DRAW)[0] < 0.5:
            copies += 1
            assert links.copy_at == 5.0 + 2.0 * _u(9, ALICE, SERVER, n, COPY_LATENCY_DRAW)[0]
            links.copy_at = None  # the caller takes it
        else:
            assert links.copy_at is None
    assert 15 < copies < 45


def test_a_duplicate_on_a_constant_link_arrives_with_the_original_and_is_not_reordered() -> None:
    links = Links(2, LinkSpec(Constant(0.25), duplicate=1.0, reorder=1.0, reorder_delay_s=4.0))
    arrival = links.transit(ALICE, SERVER, 0, 1.0)
    assert arrival == 1.25 + 4.0 * _u(2, ALICE, SERVER, 0, REORDER_DRAW)[1]
    assert links.copy_at == 1.25


def test_a_message_whose_duplicate_uniform_equals_the_probability_has_no_copy() -> None:
    u = _u(8, ALICE, SERVER, 0, DUPLICATE_DRAW)[0]
    links = Links(8, LinkSpec(Constant(0.5), duplicate=u))
    links.transit(ALICE, SERVER, 0, 0.0)
    assert links.copy_at is None
    links = Links(8, LinkSpec(Constant(0.5), duplicate=math.nextafter(u, 1.0)))
    links.transit(ALICE, SERVER, 0, 0.0)
    assert links.copy_at == 0.5


def test_a_lost_message_is_not_duplicated() -> None:
    links = Links(5, LinkSpec(Constant(0.5), loss=math.nextafter(1.0, 0.0), duplicate=1.0))
    assert links.transit(ALICE, SERVER, 0, 0.0) is None
    assert links.copy_at is None


def test_a_copy_leaves_when_the_original_has_left_the_sender() -> None:
    # 1,000 bytes at 8,000 bit/s: the original leaves at 1 s, the copy is made of it, not sent again.
    links = Links(2, LinkSpec(Constant(0.5), bandwidth_bps=8000, duplicate=1.0))
    assert links.transit(ALICE, SERVER, 1000, 0.0) == 1.5
    assert links.copy_at == 1.5
    links.copy_at = None
    assert links.transit(ALICE, SERVER, 1000, 0.0) == 2.5  # the copy did not occupy the link
    assert links.copy_at == 2.5


def test_duplication_and_reordering_follow_the_role_pair_override() -> None:
    links = Links(1, LinkSpec(Constant(0.5)), {(Role.USER, Role.SERVER): LinkSpec(Constant(0.5), duplicate=1.0)})
    links.transit(SERVER, ALICE, 0, 0.0)
    assert links.copy_at is None
    links.transit(ALICE, SERVER, 0, 0.0)
    assert links.copy_at == 0.5


# ------------------------------------------------------------------ partitions


def test_link_ends_parse_roles_and_parties_in_one_or_both_directions() -> None:
    assert link_ends("user->server", "k") == (LinkEnds(Role.USER, Role.SERVER),)
    assert link_ends("user - server:0", "k") == (LinkEnds(Role.USER, SERVER), LinkEnds(SERVER, Role.USER))
    assert link_ends(" user:3->third_party ", "k") == (LinkEnds(Party(Role.USER, 3), Role.THIRD_PARTY),)
    assert str(LinkEnds(Role.USER, SERVER)) == "user->server:0"
    assert str(LinkEnds(Party(Role.USER, 3), Role.PROXY)) == "user:3->proxy"


@pytest.mark.parametrize("text", ["userserver", "usr-server", "user:x-server", "user:-server", "user->", 5, "user-server-silo"])
def test_link_ends_refuse_anything_else_naming_the_key(text: object) -> None:
    roles = "proxy, server, silo, third_party, user"
    message = f"k.links[0]: expected A->B or A-B, each a role ({roles}) or a party such as user:3, got {text!r}"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        link_ends(text, "k.links[0]")  # type: ignore[arg-type]


def test_link_ends_cover_a_whole_role_or_exactly_one_party() -> None:
    role_wide = LinkEnds(Role.USER, Role.SERVER)
    assert role_wide.covers(ALICE, SERVER) and role_wide.covers(BOB, SERVER)
    assert not role_wide.covers(SERVER, ALICE) and not role_wide.covers(ALICE, THIRD_PARTY)
    one = LinkEnds(BOB, SERVER)
    assert one.covers(BOB, SERVER) and not one.covers(ALICE, SERVER) and not one.covers(BOB, THIRD_PARTY)


def test_a_partition_is_checked_and_stored_normalised() -> None:
    partition = Partition(1, 2, [LinkEnds(Role.USER, Role.SERVER)])  # type: ignore[arg-type]
    assert (partition.from_s, partition.until_s, partition.links) == (1.0, 2.0, (LinkEnds(Role.USER, Role.SERVER),))
    assert (type(partition.from_s), type(partition.until_s)) == (float, float)
    cases = [
        (lambda: Partition(-1.0, 2.0, link_ends("user-server", "k")), "network.partitions.from_s: must be >= 0 seconds, got -1.0"),
        (lambda: Partition(2.0, 2.0, link_ends("user-server", "k")), "network.partitions.until_s: must be > from_s = 2.0, got 2.0"),
        (lambda: Partition(0.0, "x", link_ends("user-server", "k")), 'network.partitions.until_s: must be a number, got "x"'),
        (lambda: Partition(0.0, 1.0, ()), "network.partitions.links: must name at least one link (A->B or A-B), got ()"),
        (lambda: Partition(0.0, 1.0, ("user-server",)), "network.partitions.links: must name at least one link (A->B or A-B), got ('user-server',)"),
    ]
    for build, message in cases:
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            build()


def test_a_message_sent_while_its_link_is_down_is_lost_before_any_draw() -> None:
    links = Links(3, LinkSpec(Constant(0.5)), partitions=[Partition(1.0, 2.0, link_ends("user->server", "k"))])
    assert links.transit(ALICE, SERVER, 0, 0.999) == 1.499
    assert links.transit(ALICE, SERVER, 0, 1.0) is None  # from_s is inside
    assert links.transit(ALICE, SERVER, 0, 1.999) is None
    assert links.transit(ALICE, SERVER, 0, 2.0) == 2.5  # until_s is not
    assert links.transit(SERVER, ALICE, 0, 1.5) == 2.0  # the other direction is up
    assert links.is_down(ALICE, SERVER, 1.5) and not links.is_down(ALICE, SERVER, 2.0)
    assert not links.is_down(SERVER, ALICE, 1.5)


def test_a_partition_counts_the_lost_message_and_keeps_its_bandwidth() -> None:
    # The third message's draws are those of message number 2: a partitioned message was a message.
    partition = Partition(1.0, 2.0, link_ends("user:0-server", "k"))
    links = Links(7, LinkSpec(Uniform(0.0, 1.0), bandwidth_bps=8000), partitions=[partition])
    assert links.transit(ALICE, SERVER, 1000, 0.0) == 1.0 + _u(7, ALICE, SERVER, 0, LATENCY_DRAW)[0]
    assert links.transit(ALICE, SERVER, 1000, 1.5) is None  # leaves at 2.5, but was sent while down
    assert links.transit(ALICE, SERVER, 1000, 2.0) == 3.5 + _u(7, ALICE, SERVER, 2, LATENCY_DRAW)[0]
    assert links.transit(BOB, SERVER, 0, 1.5) == 1.5 + _u(7, BOB, SERVER, 0, LATENCY_DRAW)[0]


def test_asking_whether_a_link_is_down_keeps_its_count_and_its_queue() -> None:
    links = Links(4, LinkSpec(Uniform(0.0, 1.0), bandwidth_bps=8000), partitions=[Partition(1.0, 2.0, link_ends("user->server", "k"))])
    assert links.transit(ALICE, SERVER, 1000, 0.0) == 1.0 + _u(4, ALICE, SERVER, 0, LATENCY_DRAW)[0]
    assert links.is_down(ALICE, SERVER, 1.5) and not links.is_down(ALICE, SERVER, 0.5)
    # The next message is number 1 and waits behind the first: the link's state was kept.
    assert links.transit(ALICE, SERVER, 1000, 0.0) == 2.0 + _u(4, ALICE, SERVER, 1, LATENCY_DRAW)[0]


def test_a_link_never_used_is_down_when_a_partition_says_so() -> None:
    links = Links(4, LinkSpec(), partitions=[Partition(1.0, 2.0, link_ends("user->server", "k"))])
    assert links.is_down(ALICE, SERVER, 1.0) and not links.is_down(SERVER, ALICE, 1.0)


def test_several_partitions_take_their_own_links_down_in_their_own_intervals() -> None:
    partitions = [Partition(0.0, 1.0, link_ends("user:0->server", "k")), Partition(5.0, 6.0, link_ends("user->server", "k"))]
    links = Links(1, LinkSpec(Constant(0.1)), partitions=partitions)
    assert [links.is_down(ALICE, SERVER, t) for t in (0.5, 3.0, 5.5)] == [True, False, True]
    assert [links.is_down(BOB, SERVER, t) for t in (0.5, 3.0, 5.5)] == [False, False, True]
    assert links.transit(BOB, SERVER, 0, 0.5) == 0.6 and links.transit(BOB, SERVER, 0, 5.5) is None


def test_partitions_must_be_partitions() -> None:
    with pytest.raises(TypeError, match=re.escape("partitions must be Partition objects, got (0, 1)")):
        Links(0, LinkSpec(), partitions=[(0, 1)])  # type: ignore[list-item]


# ------------------------------------------------------------------ slow parties


def test_a_slow_party_adds_its_delay_to_everything_it_sends() -> None:
    links = Links(2, LinkSpec(Constant(0.5), duplicate=1.0), slow={ALICE: 3.0})
    assert links.transit(ALICE, SERVER, 0, 1.0) == 4.5
    assert links.copy_at == 4.5  # the copy is of a slow party's message too
    assert links.transit(SERVER, ALICE, 0, 1.0) == 1.5  # what it receives is not slowed
    assert links.transit(BOB, SERVER, 0, 1.0) == 1.5


def test_a_slow_party_on_a_random_link_adds_its_delay_to_each_draw() -> None:
    links = Links(5, LinkSpec(Uniform(0.0, 1.0)), slow={BOB: 2.0})
    for n in range(5):
        assert links.transit(BOB, SERVER, 0, 0.0) == 2.0 + _u(5, BOB, SERVER, n, LATENCY_DRAW)[0]
        assert links.transit(ALICE, SERVER, 0, 0.0) == _u(5, ALICE, SERVER, n, LATENCY_DRAW)[0]


def test_slow_parties_are_checked() -> None:
    with pytest.raises(TypeError, match=re.escape("slow must map parties to seconds, got the key 'user:0'")):
        Links(0, LinkSpec(), slow={"user:0": 1.0})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=re.escape("faults.slow.delay_s: must be >= 0 seconds, got -1.0")):
        Links(0, LinkSpec(), slow={ALICE: -1.0})
