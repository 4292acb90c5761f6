"""Party faults against their documented rules (issue 18): crash rules, byzantine forgeries, and what the
network and the ledger do with them -- duplicates scheduled and counted, partitioned messages named,
forged bytes decoded strictly at the receiver, kinds a role never receives rejected."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
import trio

from fedrecsim.clock import VirtualClock
from fedrecsim.errors import ConfigError, ProtocolViolation, WireError
from fedrecsim.network.faults import HUGE, Byzantine, Corruption, Crash, PartyFaults, forge
from fedrecsim.network.ledger import MAX_REJECTIONS, DropReason, Ledger, RejectReason, Rejection, TranscriptRow
from fedrecsim.network.links import Constant, LinkSpec, Links, Partition, link_ends
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role, user
from fedrecsim.network.wire import Array, _unpack_array, decode, encode, message

ALICE, BOB = user(0), user(1)


@message("faultstest.reading")
@dataclass(frozen=True)
class Reading:
    """Floats in every form a field can hold them: a scalar, an array, an optional and a tuple."""

    round: int
    weight: float
    values: Array("float64", ndim=2)
    ids: Array("int32", ndim=1)
    extra: float | None = None
    history: tuple[float, ...] = ()


@message("faultstest.counts")
@dataclass(frozen=True)
class Counts:
    """The same first two fields as a reading's twin below, so a kind swap finds a kind it decodes as."""

    round: int
    ids: Array("int32", ndim=1)


@message("faultstest.tally")
@dataclass(frozen=True)
class Tally:
    round: int
    ids: Array("int32", ndim=1)


@message("faultstest.single")
@dataclass(frozen=True)
class Single:
    values: Array("float32", ndim=1)


def reading(round_index: int = 1) -> Reading:
    return Reading(round_index, 0.5, np.arange(6.0).reshape(3, 2), np.array([4, 5, 6], dtype=np.int32), 2.0, (1.0, 3.0))


def run(scenario) -> None:  # type: ignore[no-untyped-def]
    trio.run(scenario, clock=VirtualClock())


def _network(links: Links | None = None, faults: PartyFaults | None = None, transcript: bool = True) -> Network:
    network = Network(links or Links(1, LinkSpec(Constant(0.5))), Ledger(record_transcript=transcript),
                      resolution_s=0.0, faults=faults)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    return network


# ------------------------------------------------------------------ the rules


def test_a_crash_rule_is_checked_and_says_what_it_does() -> None:
    assert str(Crash(ALICE, "faultstest.reading", 2)) == "user:0 crashes before sending faultstest.reading in round 2"
    assert str(Crash(ALICE)) == "user:0 crashes before sending anything the first time"
    assert Crash(ALICE, restart_after_s=0).restart_after_s == 0
    assert Crash(ALICE).keep_state is True and Crash(ALICE).round is None and Crash(ALICE).restart_after_s is None
    cases = [
        (lambda: Crash("user:0"), "faults.crash.party: must be a party such as user:3, got 'user:0'"),
        (lambda: Crash(ALICE, round=-1), "faults.crash.round: must be a round number >= 0, got -1"),
        (lambda: Crash(ALICE, round=True), "faults.crash.round: must be a round number >= 0, got True"),
        (lambda: Crash(ALICE, round=1.0), "faults.crash.round: must be a round number >= 0, got 1.0"),
        (lambda: Crash(ALICE, restart_after_s=-1.0), "faults.crash.restart_after_s: must be a finite number of seconds >= 0, got -1.0"),
        (lambda: Crash(ALICE, restart_after_s=math.inf), "faults.crash.restart_after_s: must be a finite number of seconds >= 0, got inf"),
        (lambda: Crash(ALICE, restart_after_s="1"), "faults.crash.restart_after_s: must be a finite number of seconds >= 0, got '1'"),
    ]
    for build, problem in cases:
        with pytest.raises(ConfigError, match=f"^{re.escape(problem)}$"):
            build()


def test_a_crash_rule_matches_its_kind_and_round_or_any() -> None:
    assert Crash(ALICE, "k.a", 2).matches("k.a", 2)
    assert not Crash(ALICE, "k.a", 2).matches("k.b", 2) and not Crash(ALICE, "k.a", 2).matches("k.a", 3)
    assert Crash(ALICE, "", 2).matches("k.b", 2) and Crash(ALICE, "k.a").matches("k.a", 7)
    assert Crash(ALICE, round=0).matches("k.z", 0)


def test_a_byzantine_rule_takes_its_corruption_by_name_and_says_what_it_does() -> None:
    rule = Byzantine(ALICE, "nan", "faultstest.reading")  # type: ignore[arg-type]
    assert rule.corrupt is Corruption.NAN
    assert str(rule) == "user:0 sends faultstest.reading corrupted (nan)"
    assert str(Byzantine(BOB, Corruption.KIND)) == "user:1 sends every message corrupted (kind)"
    assert [corruption.value for corruption in Corruption] == ["nan", "huge", "shape", "dtype", "kind"]
    with pytest.raises(ConfigError, match=re.escape("faults.byzantine.party: must be a party such as user:3, got 3")):
        Byzantine(3, Corruption.NAN)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'noise' is not a valid Corruption"):
        Byzantine(ALICE, "noise")  # type: ignore[arg-type]


def test_party_faults_take_only_rules() -> None:
    with pytest.raises(TypeError, match=re.escape("crashes must be Crash rules, got 'user:0'")):
        PartyFaults(crashes=["user:0"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=re.escape("byzantine must be Byzantine rules, got 'user:0'")):
        PartyFaults(byzantine=["user:0"])  # type: ignore[list-item]


def test_each_crash_rule_fires_once_the_first_that_matches_in_order() -> None:
    first, second, other = Crash(ALICE, "k.a"), Crash(ALICE, "", 3), Crash(BOB, "k.a", 1)
    faults = PartyFaults([first, second, other])
    assert faults.crash_now(SERVER, "k.a", 1) is None
    assert faults.crash_now(ALICE, "k.b", 1) is None
    assert faults.crash_now(ALICE, "k.b", 3) is second
    assert faults.crash_now(ALICE, "k.b", 3) is None  # spent
    assert faults.crash_now(ALICE, "k.a", 3) is first
    assert faults.crash_now(ALICE, "k.a", 3) is None
    assert faults.fired == [second, first]
    assert faults.idle_rules() == [other]


def test_restarting_lists_the_parties_that_restart_with_their_state_kept_or_lost() -> None:
    faults = PartyFaults([
        Crash(ALICE, restart_after_s=1.0), Crash(BOB, restart_after_s=1.0, keep_state=False),
        Crash(user(2), keep_state=False), Crash(user(3)),
    ])
    assert faults.restarting(keep_state=True) == {ALICE}
    assert faults.restarting(keep_state=False) == {BOB}
    assert not PartyFaults().forging and PartyFaults(byzantine=[Byzantine(ALICE, Corruption.NAN)]).forging


def test_a_byzantine_party_forges_what_its_first_matching_rule_says_and_counts_it() -> None:
    data = encode(ALICE, SERVER, 1.0, reading())
    rules = [Byzantine(ALICE, Corruption.NAN, "faultstest.counts"), Byzantine(ALICE, Corruption.HUGE), Byzantine(ALICE, Corruption.NAN)]
    faults = PartyFaults(byzantine=rules)
    assert faults.forge(BOB, Reading.KIND, data) is None
    assert faults.forge(ALICE, Reading.KIND, data) == forge(data, Corruption.HUGE)
    counts = encode(ALICE, SERVER, 1.0, Counts(1, np.array([1], dtype=np.int32)))
    assert faults.forge(ALICE, Counts.KIND, counts) is None  # NaN changes no integer: nothing forged
    assert faults.forged == {rules[0]: 0, rules[1]: 1, rules[2]: 0}
    assert faults.idle_rules() == [rules[0], rules[2]]
    faults.forge(ALICE, Reading.KIND, data)
    assert faults.forged[rules[1]] == 2


# ------------------------------------------------------------------ forgeries


def _frame(data: bytes) -> list[object]:
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)


@pytest.mark.parametrize(("corruption", "value"), [(Corruption.NAN, math.nan), (Corruption.HUGE, HUGE)])
def test_nan_and_huge_replace_every_float_and_nothing_else(corruption: Corruption, value: float) -> None:
    data = encode(ALICE, SERVER, 1.5, reading(7))
    forged = forge(data, corruption)
    frame = _frame(forged)
    assert frame[:6] == _frame(data)[:6]  # kind, sender, addressee, send time kept
    round_index, weight, values, ids, extra, history = frame[6:]
    assert round_index == 7
    np.testing.assert_equal([weight, extra, *history], [value] * 4)
    np.testing.assert_equal(_unpack_array(values.data), np.full((3, 2), value))
    np.testing.assert_array_equal(_unpack_array(ids.data), [4, 5, 6])
    if corruption is Corruption.NAN:
        with pytest.raises(WireError, match="NaN|non-finite"):
            decode(forged)
    else:
        body = decode(forged).body
        assert body.weight == HUGE and np.all(body.values == HUGE)


def test_huge_gives_a_float32_array_its_largest_finite_value_not_an_overflow() -> None:
    """1e300 does not fit a float32: it would become inf (a NaN/inf forgery, not a huge one). The wire must let
    the forgery through, so its values are float32's largest finite value."""
    data = encode(ALICE, SERVER, 0.0, Single(np.ones(3, dtype=np.float32)))
    with np.errstate(over="raise"):
        body = decode(forge(data, Corruption.HUGE)).body
    assert body.values.dtype == np.float32
    np.testing.assert_array_equal(body.values, np.full(3, np.float32(3.4028234663852886e38)))


def test_a_message_without_floats_is_not_changed_by_nan() -> None:
    data = encode(ALICE, SERVER, 0.0, Counts(2, np.array([1, 2], dtype=np.int32)))
    assert forge(data, Corruption.NAN) == data


def test_shape_drops_the_last_row_of_the_first_array() -> None:
    forged = decode(forge(encode(ALICE, SERVER, 0.0, reading()), Corruption.SHAPE)).body
    np.testing.assert_array_equal(forged.values, np.arange(4.0).reshape(2, 2))
    np.testing.assert_array_equal(forged.ids, [4, 5, 6])  # only the first array


def test_shape_gives_an_empty_first_array_a_row_and_reaches_into_tuples() -> None:
    empty = Reading(1, 0.5, np.zeros((0, 2)), np.array([], dtype=np.int32))
    assert decode(forge(encode(ALICE, SERVER, 0.0, empty), Corruption.SHAPE)).body.values.shape == (1, 2)
    nested = encode(ALICE, SERVER, 0.0, Nested(1, (np.arange(3.0), np.arange(2.0))))
    body = decode(forge(nested, Corruption.SHAPE)).body
    assert [part.tolist() for part in body.parts] == [[0.0, 1.0], [0.0, 1.0]]


def test_shape_and_dtype_leave_a_message_without_arrays_unchanged() -> None:
    data = encode(ALICE, SERVER, 0.0, Lonely(4))
    assert forge(data, Corruption.SHAPE) == data and forge(data, Corruption.DTYPE) == data
    # A tuple without arrays is passed over: the array after it is the first array.
    mixed = decode(forge(encode(ALICE, SERVER, 0.0, Mixed((1, 2), np.ones(3))), Corruption.SHAPE)).body
    assert mixed.tags == (1, 2) and mixed.values.shape == (2,)


@message("faultstest.mixed")
@dataclass(frozen=True)
class Mixed:
    tags: tuple[int, ...]
    values: Array("float64", ndim=1)


def test_shape_gives_a_scalar_array_one_dimension() -> None:
    data = encode(ALICE, SERVER, 0.0, Loose(np.array(3.0)))
    assert decode(forge(data, Corruption.SHAPE)).body.value.shape == (1,)


def test_an_empty_first_array_gains_a_row_of_its_own_dtype() -> None:
    forged = decode(forge(encode(ALICE, SERVER, 0.0, Counts(1, np.zeros(0, dtype=np.int32))), Corruption.SHAPE)).body
    assert forged.ids.tolist() == [0] and forged.ids.dtype == np.int32


def test_only_the_first_array_changes_even_when_it_sits_in_a_tuple() -> None:
    shallow = encode(ALICE, SERVER, 0.0, Trailing((np.arange(2.0),), np.arange(3.0)))
    deep = encode(ALICE, SERVER, 0.0, Deeper(((np.arange(2.0),),), np.arange(3.0)))
    for data, first_of in ((shallow, lambda frame: frame[6][0]), (deep, lambda frame: frame[6][0][0])):
        for corruption in (Corruption.SHAPE, Corruption.DTYPE):
            frame = _frame(forge(data, corruption))
            first, tail = _unpack_array(first_of(frame).data), _unpack_array(frame[7].data)
            assert (first.shape, first.dtype) != ((2,), np.float64)
            np.testing.assert_array_equal(tail, np.arange(3.0))
            assert tail.dtype == np.float64


@message("faultstest.trailing_deeper")
@dataclass(frozen=True)
class Deeper:
    parts: tuple[tuple[Array("float64", ndim=1), ...], ...]
    tail: Array("float64", ndim=1)


def test_a_forgery_keeps_bytes_fields_bytes() -> None:
    body = Blob(0.5, b"\x00\xffkeep")
    forged = decode(forge(encode(ALICE, SERVER, 0.0, body), Corruption.HUGE)).body
    assert forged == Blob(HUGE, b"\x00\xffkeep")


def test_a_big_endian_array_goes_on_the_wire_little_endian() -> None:
    from fedrecsim.network.faults import _ext

    payload = _ext(np.array([1.5, -2.0], dtype=">f8"))
    np.testing.assert_array_equal(_unpack_array(payload.data), [1.5, -2.0])


def test_a_kind_swap_looks_among_every_kind_of_the_protocol_the_prefix_before_the_first_dot_names() -> None:
    forged = forge(encode(ALICE, SERVER, 0.0, DeepOne(1)), Corruption.KIND)
    assert decode(forged).kind == "deepproto.b"  # not deepproto.a.two, whose fields it does not fit


def test_a_kind_swap_tries_each_kind_with_its_bytes_fields_as_bytes() -> None:
    forged = decode(forge(encode(ALICE, SERVER, 0.0, BinC(b"\x01\x02")), Corruption.KIND))
    assert (forged.kind, forged.body.blob) == ("binproto.a", b"\x01\x02")


@message("faultstest.trailing")
@dataclass(frozen=True)
class Trailing:
    parts: tuple[Array("float64", ndim=1), ...]
    tail: Array("float64", ndim=1)


@message("blobproto.blob")
@dataclass(frozen=True)
class Blob:
    weight: float
    blob: bytes


@message("deepproto.a.one")
@dataclass(frozen=True)
class DeepOne:
    round: int


@message("deepproto.a.two")
@dataclass(frozen=True)
class DeepTwo:
    label: str
    extra: str


@message("deepproto.b")
@dataclass(frozen=True)
class DeepB:
    round: int


@message("binproto.a")
@dataclass(frozen=True)
class BinA:
    blob: bytes


@message("binproto.b")
@dataclass(frozen=True)
class BinB:
    text: str


@message("binproto.c")
@dataclass(frozen=True)
class BinC:
    blob: bytes


@message("faultstest.nested")
@dataclass(frozen=True)
class Nested:
    round: int
    parts: tuple[Array("float64", ndim=1), ...]


@message("faultstest.loose")
@dataclass(frozen=True)
class Loose:
    value: Array("float64")


def test_dtype_sends_the_first_array_as_another_dtype() -> None:
    data = encode(ALICE, SERVER, 0.0, reading())
    frame = _frame(forge(data, Corruption.DTYPE))
    assert _unpack_array(frame[8].data).dtype == np.float32
    assert _unpack_array(frame[9].data).dtype == np.int32
    with pytest.raises(WireError, match="float32"):
        decode(forge(data, Corruption.DTYPE))
    single = encode(ALICE, SERVER, 0.0, Single(np.ones(2, dtype=np.float32)))
    assert _unpack_array(_frame(forge(single, Corruption.DTYPE))[6].data).dtype == np.float64
    counts = encode(ALICE, SERVER, 0.0, Counts(1, np.array([3], dtype=np.int32)))
    assert _unpack_array(_frame(forge(counts, Corruption.DTYPE))[7].data).dtype == np.float32


def test_kind_swaps_in_the_first_other_kind_of_the_protocol_the_body_decodes_as() -> None:
    counts = encode(ALICE, SERVER, 0.0, Counts(1, np.array([3], dtype=np.int32)))
    forged = decode(forge(counts, Corruption.KIND))
    assert (forged.kind, forged.body.round, forged.body.ids.tolist()) == ("faultstest.tally", 1, [3])
    tally = encode(ALICE, SERVER, 0.0, Tally(1, np.array([3], dtype=np.int32)))
    assert decode(forge(tally, Corruption.KIND)).kind == "faultstest.counts"


def test_kind_takes_the_first_other_kind_when_none_decodes() -> None:
    forged = forge(encode(ALICE, SERVER, 0.0, reading()), Corruption.KIND)
    assert _frame(forged)[0] == "faultstest.counts"  # sorted first of the others; it does not decode
    with pytest.raises(WireError):
        decode(forged)


def test_kind_falls_back_to_a_join_without_another_kind_of_the_protocol() -> None:
    forged = forge(encode(ALICE, SERVER, 0.0, Lonely(1)), Corruption.KIND)
    assert _frame(forged)[0] == "core.join"


@message("loneprotocol.only")
@dataclass(frozen=True)
class Lonely:
    round: int


# ------------------------------------------------------------------ the network


def test_a_duplicated_message_is_delivered_twice_and_counted_as_duplicated() -> None:
    network = _network(Links(1, LinkSpec(Constant(0.5), duplicate=1.0)))

    async def scenario() -> None:
        async with network.open():
            assert network.send(ALICE, SERVER, Counts(1, np.array([1], dtype=np.int32))) > 0
            assert network.links.copy_at is None  # the network took the copy
            await network.sleep(1.0)

    run(scenario)
    ledger = network.ledger
    mailbox = network.mailbox(SERVER)
    assert [envelope.body.round for envelope in mailbox.take_all(Counts.KIND)] == [1, 1]
    assert ledger.duplicated == 1
    totals = ledger.totals()
    assert (totals["sent_msgs"], totals["recv_msgs"], totals["dropped_msgs"]) == (1, 2, 0)
    assert [row.status for row in ledger.transcript] == ["duplicated", "delivered", "delivered"]
    nbytes = ledger.party(ALICE)["sent_bytes"]
    assert ledger.transcript[0] == TranscriptRow(0.0, ALICE, SERVER, Counts.KIND, nbytes, "duplicated")
    assert ledger.transcript[1:] == [TranscriptRow(0.5, ALICE, SERVER, Counts.KIND, nbytes, "delivered")] * 2
    assert ledger.faults()["duplicated"] == 1


def test_a_message_sent_into_a_partition_is_dropped_as_partitioned_and_a_lost_one_as_lost() -> None:
    partition = Partition(0.0, 1.0, link_ends("user:0->server", "k"))
    links = Links(1, LinkSpec(Constant(0.5), loss=math.nextafter(1.0, 0.0)), {(Role.USER, Role.USER): LinkSpec(Constant(0.5))}, partitions=[partition])
    network = _network(links)

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, Tally(1, np.array([1], dtype=np.int32)))
            network.send(BOB, SERVER, Tally(1, np.array([1], dtype=np.int32)))
            network.send(ALICE, BOB, Tally(1, np.array([1], dtype=np.int32)))
            await network.sleep(1.0)

    run(scenario)
    assert network.ledger.dropped_by_reason == {"lost": 1, "offline": 0, "unfinished": 0, "partitioned": 1}
    assert [(row.src, row.dst, row.status) for row in network.ledger.transcript] == [
        (ALICE, SERVER, "dropped:partitioned"), (BOB, SERVER, "dropped:lost"), (ALICE, BOB, "delivered"),
    ]


def test_a_crashed_party_is_silent_offline_and_uncounted_until_it_recovers() -> None:
    crash = Crash(ALICE, Tally.KIND, 0)
    network = _network(faults=PartyFaults([crash]))
    heard: list[Crash] = []
    network.crash_listeners.append(heard.append)
    body = Tally(1, np.array([1], dtype=np.int32))

    async def scenario() -> None:
        async with network.open():
            assert network.send(ALICE, SERVER, Counts(1, np.array([1], dtype=np.int32))) > 0
            assert network.send(ALICE, SERVER, body) == 0  # crashes just before sending it
            assert heard == [crash] and network.is_crashed(ALICE) and not network.is_attached(ALICE)
            assert network.send(ALICE, SERVER, body) == 0 and network.send_many(ALICE, [SERVER, BOB], body) == 0
            network.attach(ALICE)
            assert not network.is_attached(ALICE)  # a crashed party stays down
            network.send(BOB, ALICE, body)  # to a crashed party: dropped at arrival, as to any offline one
            await network.sleep(1.0)
            network.recover(ALICE)
            assert not network.is_crashed(ALICE) and not network.is_attached(ALICE)
            with pytest.raises(ProtocolViolation, match=r"^user:0 is offline and cannot send Tally$"):
                network.send(ALICE, SERVER, body)
            network.attach(ALICE)
            assert network.send(ALICE, SERVER, body) > 0
            await network.sleep(1.0)

    run(scenario)
    assert network.ledger.party(ALICE)["sent_msgs"] == 2
    assert network.ledger.dropped_by_reason["offline"] == 1
    assert network.faults.fired == [crash]


def test_a_crash_rule_waits_for_its_round_and_a_party_offline_by_choice_still_cannot_send() -> None:
    network = _network(faults=PartyFaults([Crash(ALICE, Tally.KIND, 2)]))
    body = Tally(1, np.array([1], dtype=np.int32))

    async def scenario() -> None:
        async with network.open():
            network.ledger.begin_round(1, 2)
            assert network.send(ALICE, SERVER, body) > 0
            network.ledger.begin_round(2, 2)
            assert network.send_many(ALICE, [SERVER, BOB], body) == 0
            network.detach(BOB)
            with pytest.raises(ProtocolViolation, match=r"^user:1 is offline and cannot send Tally$"):
                network.send(BOB, SERVER, body)

    run(scenario)


def test_a_crash_listener_may_remove_itself() -> None:
    network = _network(faults=PartyFaults([Crash(ALICE), Crash(BOB)]))
    calls: list[Party] = []

    def once(crash: Crash) -> None:
        calls.append(crash.party)
        network.crash_listeners.remove(once)

    network.crash_listeners.extend([once, lambda crash: calls.append(crash.party)])

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, Lonely(1))
            network.send(BOB, SERVER, Lonely(1))

    run(scenario)
    assert calls == [ALICE, ALICE, BOB]


def test_a_forged_message_is_decoded_strictly_and_rejected_when_malformed() -> None:
    faults = PartyFaults(byzantine=[Byzantine(ALICE, Corruption.NAN, Reading.KIND)])
    network = _network(Links(1, LinkSpec(Constant(0.5), duplicate=1.0)), faults)

    async def scenario() -> None:
        async with network.open():
            sent = network.send(ALICE, SERVER, reading())
            assert sent == len(forge(encode(ALICE, SERVER, 0.0, reading()), Corruption.NAN))
            network.send(ALICE, SERVER, Counts(1, np.array([1], dtype=np.int32)))  # not its kind: honest
            await network.sleep(1.0)
            assert network._forged == set()

    run(scenario)
    ledger = network.ledger
    mailbox = network.mailbox(SERVER)
    assert mailbox.take_all(Reading.KIND) == [] and len(mailbox.take_all(Counts.KIND)) == 2
    assert ledger.rejected_by_reason == {"malformed": 2, "unexpected": 0, "duplicate": 0, "invalid": 0}
    first = ledger.rejections[0]
    assert (first.time, first.src, first.dst, first.kind, first.reason) == (0.5, ALICE, SERVER, Reading.KIND, RejectReason.MALFORMED)
    assert first.problem.startswith("server:0 expected a valid faultstest.reading from user:0; received bytes that do not decode: ")
    assert ledger.party(SERVER)["recv_msgs"] == 4  # the bytes did arrive


def test_a_forgery_is_held_to_the_networks_size_limit() -> None:
    tally = Tally(1, np.array([1], dtype=np.int32))
    limit = len(encode(ALICE, SERVER, 0.0, tally))  # the forgery is one byte longer: counts, not tally
    network = Network(Links(1, LinkSpec(Constant(0.5))), Ledger(), resolution_s=0.0, max_message_bytes=limit,
                      faults=PartyFaults(byzantine=[Byzantine(ALICE, Corruption.KIND)]))
    for party in (ALICE, SERVER):
        network.attach(party)

    async def scenario() -> None:
        async with network.open():
            assert network.send(ALICE, SERVER, tally) == limit + 1
            await network.sleep(1.0)

    run(scenario)
    [row] = network.ledger.rejections
    assert row.reason is RejectReason.MALFORMED and row.problem.endswith(f"exceeds the limit of {limit}")


def test_a_huge_forgery_decodes_and_reaches_the_mailbox_for_the_receiver_to_judge() -> None:
    network = _network(faults=PartyFaults(byzantine=[Byzantine(ALICE, Corruption.HUGE)]))

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, reading())
            await network.sleep(1.0)

    run(scenario)
    [envelope] = network.mailbox(SERVER).take_all(Reading.KIND)
    assert envelope.body.weight == HUGE and network.ledger.rejections == []


def test_a_forgery_to_an_offline_party_is_dropped_and_forgotten() -> None:
    network = _network(faults=PartyFaults(byzantine=[Byzantine(ALICE, Corruption.NAN)]))

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, reading())
            network.detach(SERVER)
            await network.sleep(1.0)
            assert network._forged == set()

    run(scenario)
    assert network.ledger.dropped_by_reason["offline"] == 1 and network.ledger.rejections == []


def test_forgeries_still_in_flight_when_the_network_closes_are_forgotten() -> None:
    network = _network(faults=PartyFaults(byzantine=[Byzantine(ALICE, Corruption.NAN)]))

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, reading())
            assert len(network._forged) == 1

    run(scenario)
    assert network._forged == set() and network.ledger.dropped_by_reason["unfinished"] == 1


def test_a_party_that_declared_what_it_receives_rejects_any_other_kind() -> None:
    network = _network()
    network.expect(SERVER, [Counts.KIND])  # its mailbox exists already
    network.expect(Party(Role.SILO, 4), [Tally.KIND])  # declared before it is ever attached
    silo = Party(Role.SILO, 4)
    assert network.attach(silo).receives == frozenset({Tally.KIND})
    assert network.mailbox(SERVER).receives == frozenset({Counts.KIND})
    assert network.mailbox(ALICE).receives is None

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, Counts(1, np.array([1], dtype=np.int32)))
            network.send(ALICE, SERVER, Tally(2, np.array([1], dtype=np.int32)))
            network.send(ALICE, silo, Counts(3, np.array([1], dtype=np.int32)))
            network.send(BOB, ALICE, Tally(4, np.array([1], dtype=np.int32)))
            await network.sleep(1.0)

    run(scenario)
    assert [envelope.body.round for envelope in network.mailbox(SERVER).take_all(Counts.KIND)] == [1]
    assert network.mailbox(SERVER).take_all(Tally.KIND) == [] and network.mailbox(silo).take_all(Counts.KIND) == []
    assert len(network.mailbox(ALICE).take_all(Tally.KIND)) == 1
    problems = [(row.time, row.src, row.dst, row.kind, row.reason, row.problem) for row in network.ledger.rejections]
    assert problems == [
        (0.5, ALICE, SERVER, Tally.KIND, RejectReason.UNEXPECTED,
         "server:0 expected one of faultstest.counts; received faultstest.tally from user:0"),
        (0.5, ALICE, silo, Counts.KIND, RejectReason.UNEXPECTED,
         "silo:4 expected one of faultstest.tally; received faultstest.counts from user:0"),
    ]


def test_a_kind_swap_is_judged_by_the_kind_it_arrives_as() -> None:
    network = _network(faults=PartyFaults(byzantine=[Byzantine(ALICE, Corruption.KIND)]))
    network.expect(SERVER, [Counts.KIND, Tally.KIND])

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, Counts(1, np.array([1], dtype=np.int32)))  # arrives as faultstest.tally
            await network.sleep(1.0)

    run(scenario)
    assert network.mailbox(SERVER).take_all(Counts.KIND) == []
    [envelope] = network.mailbox(SERVER).take_all(Tally.KIND)
    assert envelope.kind == Tally.KIND and network.ledger.rejections == []


def test_two_kinds_a_party_does_not_receive_are_named_in_sorted_order() -> None:
    network = _network()
    network.expect(SERVER, [Tally.KIND, Counts.KIND])

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, reading())
            await network.sleep(1.0)

    run(scenario)
    [row] = network.ledger.rejections
    assert row.problem == "server:0 expected one of faultstest.counts, faultstest.tally; received faultstest.reading from user:0"


# ------------------------------------------------------------------ the ledger


def test_the_ledger_counts_rejections_by_reason_and_keeps_the_first_ones_in_full() -> None:
    ledger = Ledger(record_transcript=True)
    for number in range(MAX_REJECTIONS + 5):
        ledger.record_rejected(float(number), ALICE, SERVER, "k.a", RejectReason.INVALID, f"problem {number}")
    ledger.record_rejected(9.5, BOB, SERVER, "k.b", RejectReason.DUPLICATE, "twice")
    assert MAX_REJECTIONS == 100
    assert ledger.rejected_by_reason == {"malformed": 0, "unexpected": 0, "duplicate": 1, "invalid": MAX_REJECTIONS + 5}
    assert len(ledger.rejections) == MAX_REJECTIONS
    assert ledger.rejections[0] == Rejection(0.0, ALICE, SERVER, "k.a", RejectReason.INVALID, "problem 0")
    assert ledger.rejections[-1].problem == "problem 99"
    assert ledger.transcript[-1] == type(ledger.transcript[-1])(9.5, BOB, SERVER, "k.b", 0, "rejected:duplicate")
    assert len(ledger.transcript) == MAX_REJECTIONS + 6
    faults = ledger.faults()
    assert faults["rejected"] == ledger.rejected_by_reason and faults["duplicated"] == 0
    assert faults["dropped"] == {"lost": 0, "offline": 0, "unfinished": 0, "partitioned": 0}
    assert faults["rejections"][0] == {
        "time_s": 0.0, "src": "user:0", "dst": "server:0", "kind": "k.a", "reason": "invalid", "problem": "problem 0",
    }
    assert len(faults["rejections"]) == MAX_REJECTIONS
    assert ledger.summary()["faults"] == faults
    # A rejection is not a drop: the counters every message adds up to are untouched.
    assert ledger.totals() == {"sent_bytes": 0, "recv_bytes": 0, "sent_msgs": 0, "recv_msgs": 0, "dropped_msgs": 0}


def test_the_ledger_without_a_transcript_still_counts_duplicates_and_rejections() -> None:
    ledger = Ledger()
    ledger.record_duplicated(1.0, ALICE, SERVER, "k.a", 10)
    ledger.record_duplicated(2.0, ALICE, SERVER, "k.a", 10)
    ledger.record_rejected(2.0, ALICE, SERVER, "k.a", RejectReason.MALFORMED, "bad")
    assert ledger.duplicated == 2 and ledger.rejected_by_reason["malformed"] == 1 and ledger.transcript is None
    assert DropReason.PARTITIONED.value == "partitioned"
