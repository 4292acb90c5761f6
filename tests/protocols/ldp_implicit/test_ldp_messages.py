"""The ldp_implicit wire format: packed signs, strict validation, and the bytes a report costs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrecsim.errors import WireError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import decode, encode
from fedrecsim.protocols.ldp_implicit.messages import Model, Relayed, ReportBatch, Reports, pack_signs, unpack_signs

USER, PROXY = Party(Role.USER, 3), Party(Role.PROXY, 0)


@given(st.lists(st.sampled_from([-1, 1]), min_size=1, max_size=300))
def test_signs_survive_packing(signs: list[int]) -> None:
    bits = np.array(signs, dtype=np.int8)
    packed = pack_signs(bits)
    assert packed.dtype == np.uint8 and packed.size == (bits.size + 7) // 8
    np.testing.assert_array_equal(unpack_signs(packed, bits.size), bits)


@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.sampled_from([-1, 1])), min_size=1, max_size=200))
def test_reports_roundtrip_through_the_wire(reports: list[tuple[int, int]]) -> None:
    indices = np.array([index for index, _ in reports], dtype=np.int64)
    signs = np.array([sign for _, sign in reports], dtype=np.int8)
    for kind, src, dst in ((Reports, USER, PROXY), (ReportBatch, PROXY, SERVER)):
        envelope = decode(encode(src, dst, 1.0, kind.pack(4, indices, signs)))
        got_indices, got_signs = envelope.body.unpack()
        assert envelope.body.epoch == 4 and envelope.src == src
        np.testing.assert_array_equal(got_indices, indices)
        np.testing.assert_array_equal(got_signs, signs)


def test_a_report_costs_about_four_bytes_and_one_bit() -> None:
    """Sec. 5.3: "each client uploads about 4k bytes"; ours is 4k + ceil(k/8) + a fixed envelope."""
    sizes = {}
    for k in (100, 200):
        message = Reports.pack(1, np.arange(k), np.ones(k, dtype=np.int8))
        sizes[k] = len(encode(USER, PROXY, 1.0, message))
    assert sizes[200] - sizes[100] == 4 * 100 + (200 + 7) // 8 - (100 + 7) // 8
    assert 4 * 100 < sizes[100] < 4 * 100 + 100


@pytest.mark.parametrize(
    "indices, signs, fragment",
    [
        (np.array([], dtype=np.int32), np.array([], dtype=np.uint8), "at least one report"),
        (np.array([1, -2], dtype=np.int32), np.array([0], dtype=np.uint8), "non-negative"),
        (np.array([1, 2], dtype=np.int32), np.array([0, 0], dtype=np.uint8), "need 1 sign bytes"),
        (np.array([1, 2], dtype=np.int32), np.array([0b11100000], dtype=np.uint8), "trailing sign bits"),
    ],
)
def test_malformed_report_messages_are_refused_by_the_wire(indices, signs, fragment) -> None:
    with pytest.raises(WireError, match=fragment):
        decode(encode(USER, PROXY, 0.0, Reports(1, indices, signs)))


def test_epoch_zero_is_refused() -> None:
    with pytest.raises(WireError, match="epoch"):
        decode(encode(USER, PROXY, 0.0, Reports(0, np.array([1], dtype=np.int32), np.array([128], dtype=np.uint8))))


def _i32(values: list[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def _u8(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.uint8)


def test_signs_are_packed_one_bit_each_big_endian_with_plus_as_one() -> None:
    """By hand: + - + then five unused zero bits is 0b10100000; nine signs take a second byte."""
    np.testing.assert_array_equal(pack_signs(np.array([1, -1, 1])), _u8([0b10100000]))
    np.testing.assert_array_equal(pack_signs(np.array([-1] * 8 + [1])), _u8([0, 0b10000000]))
    np.testing.assert_array_equal(unpack_signs(_u8([0b10100000]), 3), np.array([1, -1, 1], dtype=np.int8))


@pytest.mark.parametrize("count", range(1, 10))
def test_every_sign_pattern_of_up_to_nine_reports_crosses_the_wire_unchanged(count: int) -> None:
    """All 2^count patterns, for a user's and a proxy's message; report 0 names entry 0."""
    for pattern in range(2**count):
        signs = np.array([1 if pattern >> bit & 1 else -1 for bit in range(count)], dtype=np.int8)
        for kind, src, dst in ((Reports, USER, PROXY), (ReportBatch, PROXY, SERVER)):
            body = decode(encode(src, dst, 1.0, kind.pack(1, np.arange(count), signs))).body
            assert body.epoch == 1
            np.testing.assert_array_equal(body.unpack()[0], np.arange(count))
            np.testing.assert_array_equal(body.unpack()[1], signs)


@pytest.mark.parametrize("count", [16, 17, 57, 64, 65])
@pytest.mark.parametrize("sign", [1, -1])
def test_long_messages_of_one_sign_cross_the_wire_unchanged(count: int, sign: int) -> None:
    """Several sign bytes: all-plus fills every used bit of every byte, the last one up to its padding."""
    signs = np.full(count, sign, dtype=np.int8)
    body = decode(encode(USER, PROXY, 1.0, Reports.pack(1, np.arange(count), signs))).body
    assert body.signs.size == (count + 7) // 8
    np.testing.assert_array_equal(body.unpack()[1], signs)


@pytest.mark.parametrize("body, problem", [
    (Reports(0, _i32([1]), _u8([128])), "ldp.reports: epoch must be >= 1, got 0"),
    (Reports(1, _i32([]), _u8([])), "ldp.reports: a report message carries at least one report"),
    (Reports(1, _i32([1, -2]), _u8([0])), "ldp.reports: report indices must be non-negative"),
    (Reports(1, _i32(np.arange(8)), _u8([0, 0])), "ldp.reports: 8 reports need 1 sign bytes, got 2"),
    (Reports(1, _i32(np.arange(9)), _u8([0])), "ldp.reports: 9 reports need 2 sign bytes, got 1"),
    (Reports(1, _i32(np.arange(57)), _u8([0] * 9)), "ldp.reports: 57 reports need 8 sign bytes, got 9"),
    (Reports(1, _i32([1, 2]), _u8([0b11000001])), "ldp.reports: the unused trailing sign bits must be zero"),
    (Reports(1, _i32([1, 2]), _u8([0b11100000])), "ldp.reports: the unused trailing sign bits must be zero"),
    (Reports(1, _i32(np.arange(17)), _u8([0, 0, 0b01000000])), "ldp.reports: the unused trailing sign bits must be zero"),
    (ReportBatch(0, _i32([1]), _u8([128])), "ldp.report_batch: epoch must be >= 1, got 0"),
    (ReportBatch(1, _i32([1]), _u8([128]), batch=-1), "ldp.report_batch: batch must be >= 0, got -1"),
    (Model(0, np.zeros((2, 3))), "ldp.model: epoch must be >= 1, got 0"),
    (Relayed(0, 4), "ldp.relayed: epoch must be >= 1, got 0"),
    (Relayed(1, -1), "ldp.relayed: users must be >= 0, got -1"),
], ids=lambda value: "" if isinstance(value, str) else type(value).__name__)
def test_a_malformed_message_is_refused_saying_exactly_what_is_wrong(body: object, problem: str) -> None:
    with pytest.raises(WireError) as caught:
        decode(encode(PROXY, SERVER, 0.0, body))
    assert str(caught.value) == problem


@pytest.mark.parametrize("body", [
    Reports(1, _i32([0]), _u8([0b10000000])),
    Reports(1, _i32(np.arange(8)), _u8([0b10101011])),  # no padding: every bit is a report's
    ReportBatch(1, _i32([0]), _u8([0]), batch=0),
    Model(1, np.zeros((2, 3))),
    Relayed(1, 0),
], ids=lambda value: type(value).__name__)
def test_the_smallest_valid_values_are_accepted(body: object) -> None:
    """Epoch 1, entry 0, batch 0, a relay to nobody, a full last sign byte."""
    received = decode(encode(PROXY, SERVER, 0.0, body)).body
    assert received.epoch == 1 and type(received) is type(body)
