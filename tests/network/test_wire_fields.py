"""The wire's field codecs and registry, exercised on messages registered inside the tests (issue 13).

A message class is compiled into codecs when it is registered. Classes registered at import time are
compiled before any test runs, so every test here registers its messages afresh (`_register`): each
registration replaces the previous one of the same class (same module and qualified name), and the
tests then see the codecs that registration built.

Expected bytes are what msgpack's own packer makes of the documented frame
``[kind, src_role, src_index, dst_role, dst_index, sent_at, field_1, ..., field_n]`` with arrays as ext
type 1 (``uint8`` dtype code, ``uint8`` ndim, ``uint32`` shape, then the little-endian elements).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import warnings
from dataclasses import dataclass
from typing import Optional

import msgpack
import numpy as np
import pytest

from fedrecsim.errors import WireError
from fedrecsim.network import wire
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.wire import Array, ArraySpec, decode, decode_trusted, encode, kind_of, message, registered_kinds

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bool"]
USER = Party(Role.USER, 7)
PROXY = Party(Role.PROXY, 5)
LONG_KIND = "test.fields_pair_with_a_kind_name_longer_than_thirty_one"  # a str8 in msgpack, raw16 in old msgpack
POST_INITS: list[str] = []


def _register() -> types.SimpleNamespace:
    """Register (again) the messages of these tests and return their classes."""

    @message("test.fields_all")
    @dataclass(frozen=True)
    class All:
        n: int
        x: float
        flag: bool
        label: str
        blob: bytes
        who: Party
        ints: tuple[int, ...]
        floats: tuple[float, ...]
        flags: tuple[bool, ...]
        labels: tuple[str, ...]
        blobs: tuple[bytes, ...]
        parties: tuple[Party, ...]
        arrays: tuple[Array("int32"), ...]
        maybe_int: int | None
        maybe_party: Party | None
        maybe_parties: tuple[Party | None, ...]
        maybe_ints: tuple[Optional[int], ...]
        maybe_array: Array("float64", ndim=1) | None

    @message("test.fields_arrays")
    @dataclass(frozen=True)
    class Arrays:
        strict: Array("float64", ndim=2)
        shaped: Array("int16", shape=(2, None))
        loose: Array("float32", allow_nan=True)
        plain: Array("float64")

    @message("test.fields_empty")
    @dataclass(frozen=True)
    class Empty:
        pass

    @message("test.fields_one")
    @dataclass(frozen=True)
    class One:
        a: int

    @message(LONG_KIND)
    @dataclass(frozen=True)
    class Pair:
        a: int
        b: str

    @message("test.fields_checked")
    @dataclass(frozen=True)
    class Checked:
        low: int
        high: int

        def validate(self) -> None:
            if self.low > self.high:
                raise ValueError(f"low {self.low} above high {self.high}")

    @message("test.fields_slotted")
    @dataclass(frozen=True, slots=True)
    class Slotted:
        a: int
        who: Party

    @message("test.fields_post_init")
    @dataclass(frozen=True)
    class PostInit:
        label: str

        def __post_init__(self) -> None:
            POST_INITS.append(self.label)

    return types.SimpleNamespace(**{cls.__name__: cls for cls in (All, Arrays, Empty, One, Pair, Checked, Slotted, PostInit)})


def _all(m: types.SimpleNamespace, **overrides: object) -> object:
    values: dict[str, object] = {
        "n": -3, "x": 0.25, "flag": True, "label": "ü" * 40, "blob": b"\x00\xff" * 20, "who": THIRD_PARTY,
        "ints": (1, -2, 70_000), "floats": (0.5, -1.0), "flags": (True, False), "labels": ("a", ""),
        "blobs": (b"", b"\x01"), "parties": (SERVER, PROXY), "arrays": (np.arange(3, dtype=np.int32),),
        "maybe_int": 5, "maybe_party": PROXY, "maybe_parties": (None, SERVER), "maybe_ints": (None, 2),
        "maybe_array": np.array([1.5, -2.0]),
    }
    values.update(overrides)
    return m.All(**values)


def _arrays(m: types.SimpleNamespace, **overrides: object) -> object:
    values: dict[str, object] = {
        "strict": np.arange(6.0).reshape(2, 3), "shaped": np.arange(6, dtype=np.int16).reshape(2, 3),
        "loose": np.array([np.nan, np.inf, 1.0], dtype=np.float32), "plain": np.zeros(2),
    }
    values.update(overrides)
    return m.Arrays(**values)


def _packable(value: object) -> object:
    if isinstance(value, np.ndarray):
        little = value.astype(value.dtype.newbyteorder("<"))
        header = bytes((DTYPES.index(value.dtype.name), value.ndim)) + np.asarray(value.shape, "<u4").tobytes()
        return msgpack.ExtType(1, header + little.tobytes())
    if isinstance(value, Party):
        return [value.role.code, value.index]
    if isinstance(value, tuple):
        return [_packable(element) for element in value]
    return value


def _reference(src: Party, dst: Party, sent_at: float, kind: str, fields: list[object]) -> bytes:
    frame = [kind, src.role.code, src.index, dst.role.code, dst.index, sent_at, *map(_packable, fields)]
    return msgpack.packb(frame, use_bin_type=True)


def _fields(body: object) -> list[object]:
    return [getattr(body, field.name) for field in dataclasses.fields(body)]


def _assert_same_body(got: object, want: object) -> None:
    assert type(got) is type(want)
    for field in dataclasses.fields(want):
        _assert_same_value(getattr(got, field.name), getattr(want, field.name))


def _assert_same_value(got: object, want: object) -> None:
    assert type(got) is type(want), (got, want)
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, tuple):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _assert_same_value(a, b)
    else:
        assert got == want


def _forged(kind: str, *fields: object, src: tuple[int, int] = (0, 7), dst: tuple[int, int] = (2, 0)) -> bytes:
    return msgpack.packb([kind, *src, *dst, 0.0, *fields], use_bin_type=True)


def _exactly(text: str) -> str:
    return f"^{re.escape(text)}$"


# ------------------------------------------------------------------ bytes and round trips


def test_every_field_type_encodes_to_what_msgpack_packs_and_round_trips_both_ways() -> None:
    m = _register()
    bodies = [
        _all(m),
        _all(m, maybe_int=None, maybe_party=None, maybe_array=None, ints=tuple(range(20)), parties=()),
        _arrays(m),
        m.Empty(),
        m.One(300),
        m.Pair(-40_000, "x" * 300),
        m.Checked(1, 2),
        m.Slotted(9, PROXY),
    ]
    for body in bodies:
        data = encode(USER, SERVER, 1.5, body)
        assert data == _reference(USER, SERVER, 1.5, body.KIND, _fields(body)), body.KIND
        for decoder in (decode, decode_trusted):
            envelope = decoder(data)
            assert (envelope.kind, envelope.src, envelope.dst, envelope.sent_at) == (body.KIND, USER, SERVER, 1.5)
            _assert_same_body(envelope.body, body)


def test_the_kind_is_packed_as_a_msgpack_str() -> None:
    m = _register()
    data = encode(USER, SERVER, 0.0, m.Pair(1, "b"))
    # fixarray of 8, then str8 (0xd9) of the kind's length: an old-style raw16 would read as another kind.
    assert data[:3] == bytes((0x98, 0xD9, len(LONG_KIND))) and data[3 : 3 + len(LONG_KIND)] == LONG_KIND.encode()


def test_a_bytes_field_travels_as_msgpack_bin() -> None:
    m = _register()
    body = _all(m, blob=b"\xff\xfe")
    assert decode(encode(USER, SERVER, 0.0, body)).body.blob == b"\xff\xfe"
    assert b"\xc4\x02\xff\xfe" in encode(USER, SERVER, 0.0, body)  # bin 8, length 2


def test_trusted_decoding_rebuilds_parties_and_tuples_of_the_declared_types() -> None:
    m = _register()
    envelope = decode_trusted(encode(USER, SERVER, 0.0, _all(m)))
    body = envelope.body
    assert type(body.who) is Party and body.who == THIRD_PARTY
    assert body.parties == (SERVER, PROXY) and all(type(p) is Party for p in body.parties)
    assert body.maybe_party == PROXY and type(body.maybe_party) is Party
    assert body.maybe_parties == (None, SERVER) and type(body.maybe_parties[1]) is Party
    assert type(body.ints) is tuple and body.ints == (1, -2, 70_000)
    assert type(body.maybe_ints) is tuple and body.maybe_ints == (None, 2)
    slotted = decode_trusted(encode(USER, SERVER, 0.0, m.Slotted(4, THIRD_PARTY))).body
    assert type(slotted) is m.Slotted and (slotted.a, slotted.who) == (4, THIRD_PARTY)
    assert type(slotted.who) is Party


def test_trusted_decoding_of_a_class_with_post_init_runs_it() -> None:
    m = _register()
    data = encode(USER, SERVER, 0.0, m.PostInit("hello"))
    POST_INITS.clear()
    for decoder in (decode, decode_trusted):
        assert decoder(data).body == m.PostInit("hello")
    assert POST_INITS == ["hello", "hello", "hello", "hello"]  # two decodes, and the two bodies compared with


def test_a_malformed_party_in_bytes_given_to_decode_trusted_is_still_a_wire_error_naming_it() -> None:
    m = _register()
    data = _forged(m.Slotted.KIND, 1, [9, 0])
    with pytest.raises(WireError, match=_exactly("party: unknown role code 9")):
        decode_trusted(data)


# ------------------------------------------------------------------ encode errors name the field


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"n": "1"}, "n: expected int, got str"),
        ({"x": "0.5"}, "x: expected float, got str"),
        ({"flag": 1}, "flag: expected bool, got int"),
        ({"label": b"x"}, "label: expected str, got bytes"),
        ({"blob": "x"}, "blob: expected bytes, got str"),
        ({"who": (0, 1)}, "who: expected Party, got tuple"),
        ({"ints": 3}, "ints: expected a tuple of int, got int"),
        ({"ints": (1, "2")}, "ints: expected int, got str"),
        ({"floats": "ab"}, "floats: expected a tuple of float, got str"),
        ({"flags": None}, "flags: expected a tuple of bool, got NoneType"),
        ({"labels": "ab"}, "labels: expected a tuple of str, got str"),
        ({"blobs": b"ab"}, "blobs: expected a tuple of bytes, got bytes"),
        ({"parties": SERVER.role}, "parties: expected a tuple of Party, got Role"),
        ({"parties": (SERVER, "user:1")}, "parties: expected Party, got str"),
        ({"arrays": np.zeros(2, np.int32)}, "arrays: expected a tuple of ndarray[int32], got ndarray"),
        ({"arrays": ([1, 2],)}, "arrays: expected ndarray of int32, got list"),
        ({"arrays": (np.zeros(2),)}, "arrays: encode: expected dtype int32, got float64"),
        ({"maybe_int": 1.0}, "maybe_int: expected int, got float"),
        ({"maybe_party": 3}, "maybe_party: expected Party, got int"),
        ({"maybe_parties": 1}, "maybe_parties: expected a tuple of Party | None, got int"),
        ({"maybe_ints": 1}, "maybe_ints: expected a tuple of int | None, got int"),
        ({"maybe_array": np.zeros((1, 1))}, "maybe_array: encode: expected 1 dimensions, got shape (1, 1)"),
    ],
)
def test_an_encode_error_names_the_kind_the_field_and_the_problem(overrides: dict[str, object], problem: str) -> None:
    m = _register()
    with pytest.raises(WireError, match=_exactly(f"test.fields_all.{problem}")):
        encode(USER, SERVER, 0.0, _all(m, **overrides))


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"strict": np.zeros((2, 3), np.float32)}, "strict: encode: expected dtype float64, got float32"),
        ({"strict": np.zeros(6)}, "strict: encode: expected 2 dimensions, got shape (6,)"),
        ({"shaped": np.zeros((3, 3), np.int16)}, "shaped: encode: expected length 2 on axis 0, got shape (3, 3)"),
        ({"shaped": np.zeros(2, np.int16)}, "shaped: encode: expected 2 dimensions, got shape (2,)"),
        ({"strict": np.array([[0.0, np.inf]])}, "strict: encode: array holds NaN or Inf"),
        ({"plain": np.array([np.nan])}, "plain: encode: array holds NaN or Inf"),
        ({"plain": [0.0]}, "plain: expected ndarray of float64, got list"),
    ],
)
def test_an_array_encode_error_names_the_field_and_the_rule_broken(overrides: dict[str, object], problem: str) -> None:
    m = _register()
    with pytest.raises(WireError, match=_exactly(f"test.fields_arrays.{problem}")):
        encode(USER, SERVER, 0.0, _arrays(m, **overrides))


def test_arrays_that_keep_the_rules_are_accepted_whatever_their_layout_or_byte_order() -> None:
    m = _register()
    body = _arrays(
        m,
        strict=np.arange(6.0, dtype=">f8").reshape(2, 3),  # big-endian float64 is a float64
        shaped=np.arange(10, dtype=np.int16).reshape(2, 5)[:, ::2],  # any length on axis 1, not contiguous
        loose=np.array([np.nan, -np.inf], dtype=np.float32),  # allow_nan
        plain=np.array([1e308, 1e308]),  # its sum overflows; its elements are finite
    )
    envelope = decode(encode(USER, SERVER, 0.0, body))
    _assert_same_value(envelope.body.strict, np.arange(6.0).reshape(2, 3))
    _assert_same_value(envelope.body.shaped, np.array([[0, 2, 4], [5, 7, 9]], dtype=np.int16))
    np.testing.assert_array_equal(envelope.body.loose, body.loose)
    _assert_same_value(envelope.body.plain, body.plain)


def test_a_large_array_with_one_non_finite_element_is_refused_even_when_its_sum_is_finite_or_not() -> None:
    m = _register()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a sum that overflows or meets inf - inf must not warn either
        _large_arrays_are_checked_element_by_element(m)


def _large_arrays_are_checked_element_by_element(m: types.SimpleNamespace) -> None:
    for size in (4096, 4097, 10_000):
        for bad in (np.nan, np.inf):
            values = np.zeros(size)
            values[size // 2] = bad
            with pytest.raises(WireError, match=_exactly("test.fields_arrays.plain: encode: array holds NaN or Inf")):
                encode(USER, SERVER, 0.0, _arrays(m, plain=values))
    # Opposite infinities: the sum is NaN; finite huge values whose sum overflows are fine (tested above).
    values = np.zeros(5000)
    values[:2] = (np.inf, -np.inf)
    with pytest.raises(WireError, match="NaN or Inf"):
        encode(USER, SERVER, 0.0, _arrays(m, plain=values))
    huge = np.full(5000, 1e308)
    np.testing.assert_array_equal(decode(encode(USER, SERVER, 0.0, _arrays(m, plain=huge))).body.plain, huge)


def test_a_large_float_array_with_a_nan_is_refused_on_decode_too() -> None:
    m = _register()
    values = np.zeros(5000)
    values[4999] = np.nan
    data = _forged(m.Arrays.KIND, *[_packable(v) for v in (np.zeros((1, 1)), np.zeros((2, 0), np.int16), np.zeros(0, np.float32), values)])
    with pytest.raises(WireError, match=_exactly("test.fields_arrays.plain: array holds NaN or Inf")):
        decode(data)


def test_cross_field_validation_runs_on_encode_and_decode() -> None:
    m = _register()
    with pytest.raises(WireError, match=_exactly("test.fields_checked: low 3 above high 2")):
        encode(USER, SERVER, 0.0, m.Checked(3, 2))
    with pytest.raises(WireError, match=_exactly("test.fields_checked: low 3 above high 2")):
        decode(_forged(m.Checked.KIND, 3, 2))


# ------------------------------------------------------------------ decode errors name the field


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"n": 1.0}, "n: expected int, got float"),
        ({"n": None}, "n: expected int, got NoneType"),
        ({"x": 1}, "x: expected float, got int"),
        ({"x": math.inf}, "x: non-finite float inf"),
        ({"x": -math.inf}, "x: non-finite float -inf"),
        ({"flag": 0}, "flag: expected bool, got int"),
        ({"label": b"x"}, "label: expected str, got bytes"),
        ({"blob": "x"}, "blob: expected bytes, got str"),
        ({"who": 5}, "who: expected a party [role, index]"),
        ({"who": [0]}, "who: expected a party [role, index]"),
        ({"who": [0, 1, 2]}, "who: expected a party [role, index]"),
        ({"who": [0, -2]}, "who: malformed party (0, -2)"),
        ({"who": [0, "1"]}, "who: malformed party (0, '1')"),
        ({"who": [7, 1]}, "who: unknown role code 7"),
        ({"ints": 3}, "ints: expected a sequence of int, got int"),
        ({"ints": [1, 2, "3"]}, "ints[2]: expected int, got str"),
        ({"floats": [0.5, math.nan]}, "floats[1]: non-finite float nan"),
        ({"parties": [[2, 0], [0]]}, "parties[1]: expected a party [role, index]"),
        ({"arrays": [msgpack.ExtType(1, b"\x02\x01\x01\x00\x00\x00" + b"\x00" * 4), 1]}, "arrays[1]: expected ndarray of int32, got int"),
        ({"maybe_int": "x"}, "maybe_int: expected int, got str"),
        ({"maybe_party": [1]}, "maybe_party: expected a party [role, index]"),
        ({"maybe_parties": [None, [0]]}, "maybe_parties[1]: expected a party [role, index]"),
        ({"maybe_ints": [None, 1.5]}, "maybe_ints[1]: expected int, got float"),
        ({"maybe_array": msgpack.ExtType(1, b"\x09\x00" + b"\x00" * 8)}, "maybe_array: expected 1 dimensions, got shape ()"),
    ],
)
def test_a_decode_error_names_the_kind_the_field_and_the_problem(overrides: dict[str, object], problem: str) -> None:
    m = _register()
    fields = {name: _packable(value) for name, value in zip([f.name for f in dataclasses.fields(m.All)], _fields(_all(m)))}
    fields.update(overrides)
    with pytest.raises(WireError, match=_exactly(f"test.fields_all.{problem}")):
        decode(_forged(m.All.KIND, *fields.values()))


@pytest.mark.parametrize(
    ("position", "value", "problem"),
    [
        (0, msgpack.ExtType(1, b"\x08\x02\x01\x00\x00\x00\x01\x00\x00\x00" + b"\x00" * 4), "strict: expected dtype float64, got float32"),
        (0, msgpack.ExtType(1, b"\x09\x01\x01\x00\x00\x00" + b"\x00" * 8), "strict: expected 2 dimensions, got shape (1,)"),
        (1, msgpack.ExtType(1, b"\x01\x02\x03\x00\x00\x00\x01\x00\x00\x00" + b"\x00" * 6), "shaped: expected length 2 on axis 0, got shape (3, 1)"),
        (3, msgpack.ExtType(1, b"\x09\x01\x01\x00\x00\x00" + np.array([np.inf]).tobytes()), "plain: array holds NaN or Inf"),
        (3, [0.0], "plain: expected ndarray of float64, got list"),
    ],
)
def test_an_array_decode_error_names_the_field(position: int, value: object, problem: str) -> None:
    m = _register()
    fields = [_packable(v) for v in _fields(_arrays(m))]
    fields[position] = value
    with pytest.raises(WireError, match=_exactly(f"test.fields_arrays.{problem}")):
        decode(_forged(m.Arrays.KIND, *fields))


def test_a_big_endian_array_of_the_declared_dtype_passes_the_decoders_check() -> None:
    # The decoder's own arrays are native; a field check also accepts the big-endian twin of its dtype.
    m = _register()
    field = wire._field_for(Array("float64", ndim=1), "where")
    value = np.arange(3.0, dtype=">f8")
    assert field.unpack(value, "where") is value
    with pytest.raises(WireError, match=_exactly("where: expected dtype float64, got int64")):
        field.unpack(np.arange(3), "where")
    assert m.All.KIND == "test.fields_all"


# ------------------------------------------------------------------ declarations


def test_array_annotations_carry_their_spec_with_the_documented_defaults() -> None:
    (spec,) = Array("int8").__metadata__
    assert spec == ArraySpec("int8", None, None, False)
    (spec,) = Array("float32", 3, None, True).__metadata__
    assert spec == ArraySpec("float32", ndim=3, shape=None, allow_nan=True)
    (spec,) = Array("uint16", shape=(None, 4)).__metadata__
    assert (spec.ndim, spec.shape, spec.allow_nan) == (2, (None, 4), False)
    assert Array("bool").__origin__ is np.ndarray


def test_an_array_spec_checks_its_dtype_and_that_ndim_agrees_with_shape() -> None:
    supported = "['bool', 'float32', 'float64', 'int16', 'int32', 'int64', 'int8', 'uint16', 'uint32', 'uint64', 'uint8']"
    with pytest.raises(ValueError, match=_exactly(f"unsupported array dtype 'complex128'; supported: {supported}")):
        ArraySpec("complex128")
    with pytest.raises(ValueError, match=_exactly("ndim 3 contradicts shape (2, None)")):
        ArraySpec("int8", ndim=3, shape=(2, None))
    assert ArraySpec("int8", ndim=2, shape=(2, None)).ndim == 2
    assert ArraySpec("int8", shape=(1, 2, 3)).ndim == 3
    assert ArraySpec("int8", ndim=4).ndim == 4 and ArraySpec("int8").ndim is None


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        ("typing.Annotated[int, 'meta']", "test.fields_bad.value: Annotated fields must be Array(...) declarations"),
        ("typing.Annotated[np.ndarray, 'meta']", "test.fields_bad.value: Annotated fields must be Array(...) declarations"),
        ("tuple[int, str]", "test.fields_bad.value: only homogeneous tuple[T, ...] fields are supported"),
        ("tuple[int]", "test.fields_bad.value: only homogeneous tuple[T, ...] fields are supported"),
        ("int | str", "test.fields_bad.value: only `T | None` unions are supported"),
        ("int | str | None", "test.fields_bad.value: only `T | None` unions are supported"),
        ("np.ndarray", "test.fields_bad.value: declare arrays with Array(dtype, ...), not a bare np.ndarray"),
        ("complex", "unsupported message field type <class 'complex'>"),
        ("tuple[complex, ...]", "unsupported message field type <class 'complex'>"),
        ("tuple[np.ndarray, ...]", "test.fields_bad.value: declare arrays with Array(dtype, ...), not a bare np.ndarray"),
        ("tuple[int | str, ...]", "test.fields_bad.value: only `T | None` unions are supported"),
        ("tuple[int, str] | None", "test.fields_bad.value: only homogeneous tuple[T, ...] fields are supported"),
        ("np.ndarray | None", "test.fields_bad.value: declare arrays with Array(dtype, ...), not a bare np.ndarray"),
    ],
)
def test_an_unsupported_field_declaration_is_refused_naming_the_field(annotation: str, problem: str) -> None:
    namespace = {"typing": __import__("typing"), "np": np}
    cls = dataclasses.make_dataclass("Bad", [("value", eval(annotation, namespace))], frozen=True)  # noqa: S307
    with pytest.raises(TypeError, match=_exactly(problem)):
        message("test.fields_bad")(cls)
    assert "test.fields_bad" not in registered_kinds()


@pytest.mark.parametrize(
    ("annotation", "sample", "nullable"),
    [
        ("tuple[int, ...]", (1, 2), False),
        ("tuple[typing.Optional[Party], ...]", (None, SERVER), False),
        ("typing.Optional[tuple[Party, ...]]", (SERVER,), True),
        ("None | int", 3, True),
        ("typing.Union[None, Party]", SERVER, True),
    ],
)
def test_supported_composite_declarations_round_trip(annotation: str, sample: object, nullable: bool) -> None:
    namespace = {"typing": __import__("typing"), "Party": Party}
    cls = dataclasses.make_dataclass("Good", [("value", eval(annotation, namespace))], frozen=True)  # noqa: S307
    cls.__module__ = __name__
    message("test.fields_good")(cls)
    for value in (sample, None) if nullable else (sample,):
        for decoder in (decode, decode_trusted):
            got = decoder(encode(USER, SERVER, 0.0, cls(value))).body.value
            assert got == value and type(got) is type(value)


def test_only_frozen_dataclasses_can_be_messages() -> None:
    class Plain:
        value: int

    with pytest.raises(TypeError, match=_exactly("message 'test.fields_plain': Plain must be a frozen dataclass")):
        message("test.fields_plain")(Plain)

    @dataclass
    class Thawed:
        value: int

    with pytest.raises(TypeError, match=_exactly("message 'test.fields_thawed': Thawed must be a frozen dataclass")):
        message("test.fields_thawed")(Thawed)
    assert "test.fields_plain" not in registered_kinds() and "test.fields_thawed" not in registered_kinds()


def test_registration_sets_the_kind_and_a_reregistered_class_replaces_the_old_one() -> None:
    def make() -> type:
        @message("test.fields_reregistered")
        @dataclass(frozen=True)
        class Again:
            value: int

        return Again

    first = make()
    assert first.KIND == "test.fields_reregistered" and kind_of(first) == "test.fields_reregistered"
    assert "test.fields_reregistered" in registered_kinds()
    assert list(registered_kinds()) == sorted(registered_kinds())
    second = make()
    assert second is not first and kind_of(second) == "test.fields_reregistered"
    with pytest.raises(WireError, match=_exactly(f"{first.__qualname__} is not a registered message type")):
        kind_of(first)
    with pytest.raises(WireError, match=_exactly(f"{first.__qualname__} is not a registered message type")):
        encode(USER, SERVER, 0.0, first(1))
    assert type(decode(encode(USER, SERVER, 0.0, second(1))).body) is second


def test_a_class_registered_under_a_second_kind_can_be_taken_back_by_its_first() -> None:
    # A class registered twice encodes as its latest kind; re-registering a class of the same name under
    # the first kind must not fail because that class no longer maps to the first kind.
    def make() -> type:
        @dataclass(frozen=True)
        class Moved:
            value: int

        return Moved

    first = make()
    message("test.fields_moved_a")(first)
    message("test.fields_moved_b")(first)
    assert kind_of(first) == "test.fields_moved_b"
    second = make()
    message("test.fields_moved_b")(second)  # takes kind b; first is no longer registered anywhere
    third = make()
    message("test.fields_moved_a")(third)  # kind a still names first, which maps to nothing now
    assert kind_of(third) == "test.fields_moved_a" and kind_of(second) == "test.fields_moved_b"


def test_a_single_field_and_a_fieldless_message_encode_their_fields() -> None:
    m = _register()
    assert encode(USER, SERVER, 0.0, m.Empty()) == _reference(USER, SERVER, 0.0, "test.fields_empty", [])
    assert encode(USER, SERVER, 0.0, m.One(5)) == _reference(USER, SERVER, 0.0, "test.fields_one", [5])
    assert encode(USER, SERVER, 0.0, m.Pair(5, "b")) == _reference(USER, SERVER, 0.0, LONG_KIND, [5, "b"])


def test_a_tuple_of_tuples_names_its_element_type_in_errors() -> None:
    @message("test.fields_nested")
    @dataclass(frozen=True)
    class Nested:
        rows: tuple[tuple[int, ...], ...]
        maybe_rows: tuple[tuple[int, ...] | None, ...]

    body = Nested(((1, 2), ()), ((3,), None))
    for decoder in (decode, decode_trusted):
        assert decoder(encode(USER, SERVER, 0.0, body)).body == body
    with pytest.raises(WireError, match=_exactly("test.fields_nested.rows: expected a tuple of tuple[int, ...], got int")):
        encode(USER, SERVER, 0.0, Nested(5, ()))
    with pytest.raises(WireError, match=_exactly("test.fields_nested.maybe_rows: expected a tuple of tuple[int, ...] | None, got int")):
        encode(USER, SERVER, 0.0, Nested((), 5))
