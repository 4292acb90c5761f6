"""The ldp_implicit wire format: packed signs, strict validation, and the bytes a report costs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrecsim.errors import WireError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import decode, encode
from fedrecsim.protocols.ldp_implicit.messages import ReportBatch, Reports, pack_signs, unpack_signs

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
