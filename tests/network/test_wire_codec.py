"""The compiled encoders and the trusted decoders against msgpack, for every built-in message class (issue 32).

`wire.message` compiles the encoders (`wire._compile_encoders`) and the trusted reader
(`wire._compile_reader`) of each message class; the reader reads the common forms inline and leaves every
other value to `wire._read`. Every class the package registers is encoded here from made-up field values --
optional fields absent and present, arrays small and large, contiguous and not, and (with hypothesis) ints,
parties, lengths and offsets of every size -- and the bytes are compared with msgpack's own packer given
the same logical structure and the documented ndarray ext payload; the messages the compiled reader and
`_read` give back must equal the originals and what the strict `decode` gives, with every array read-only.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Annotated, Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrecsim.network import wire
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import ArraySpec, SharedBody, decode, decode_trusted, encode, encode_many
from wire_reference import reference as _reference

MESSAGE_MODULES = [
    "fedrecsim.actors.membership",
    *(f"fedrecsim.protocols.{name}.messages"
      for name in ("dpmf", "fcf", "fedvae", "ldp_implicit", "privirec", "prototypes", "secagg")),
]
USER = Party(Role.USER, 300)


def _classes() -> list[type]:
    classes = []
    for module_name in MESSAGE_MODULES:
        module = importlib.import_module(module_name)
        classes += [value for value in vars(module).values()
                    if isinstance(value, type) and value.__module__ == module_name and hasattr(value, "KIND")]
    return sorted(classes, key=lambda cls: cls.KIND)


CLASSES = _classes()


def _value(annotation: Any, rng: np.random.Generator, variant: str) -> Any:
    """A value of a field type: ``variant`` "none" leaves optionals out, "big" makes arrays of 200 kB,
    "strided" makes them non-contiguous."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        spec = next(extra for extra in typing.get_args(annotation) if isinstance(extra, ArraySpec))
        ndim = spec.ndim if spec.ndim is not None else 2
        lengths = list(spec.shape) if spec.shape is not None else [None] * ndim
        shape = [length if length is not None else 25_000 if variant == "big" and axis == 0 else 3
                 for axis, length in enumerate(lengths)]
        wide = [length * 2 for length in shape] if variant == "strided" else shape
        raw = rng.integers(0, 200, size=wide) if spec.dtype != "bool" else rng.integers(0, 2, size=wide)
        array = (raw / 7 if spec.dtype.startswith("float") else raw).astype(spec.dtype)
        return array[tuple(slice(None, None, 2) for _ in shape)] if variant == "strided" else array
    if origin is tuple:
        item = typing.get_args(annotation)[0]
        return tuple(_value(item, rng, variant) for _ in range(3))
    if origin in (typing.Union, __import__("types").UnionType):
        if variant == "none":
            return None
        return _value(next(arg for arg in typing.get_args(annotation) if arg is not type(None)), rng, variant)
    return {int: 70_000, float: 0.375, bool: True, str: "naïve", bytes: b"\x00\xffkey",
            Party: Party(Role.USER, 130)}[annotation]


def _make(cls: type, variant: str, seed: int = 0) -> Any:
    """An instance of ``cls`` from made-up values, set without ``__init__``/``__post_init__`` (which may hold
    relations between fields the made-up values do not meet)."""
    rng = np.random.default_rng(seed)
    hints = typing.get_type_hints(cls, include_extras=True)
    body = object.__new__(cls)
    for field in dataclasses.fields(cls):
        object.__setattr__(body, field.name, _value(hints[field.name], rng, variant))
    return body


def _aligned(cls: type, name: str) -> bool:
    """Whether the trusted decoder must give field ``name`` of ``cls`` aligned (`ArraySpec.aligned`; True
    for a field that holds no array, or one declared inside an optional)."""
    annotation = typing.get_type_hints(cls, include_extras=True)[name]
    for arg in (annotation, *typing.get_args(annotation)):
        for extra in getattr(arg, "__metadata__", ()):
            if isinstance(extra, ArraySpec):
                return extra.aligned
    return True


def _assert_same(got: Any, want: Any, owned: bool = False, aligned: bool = True) -> None:
    """``got`` equals ``want`` with the same types; its arrays C-contiguous, aligned (unless ``aligned`` is
    False: a field declared so, trusted-decoded) and read-only (writable where ``owned``: the strict
    decoder's)."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert got.flags.c_contiguous and got.flags.writeable == owned
        assert got.flags.aligned or not aligned
        if not owned:
            with pytest.raises(ValueError, match="read-only"):
                got[...] = 0
    elif isinstance(want, tuple) and not isinstance(want, Party):
        assert type(got) is tuple and len(got) == len(want)
        for got_item, want_item in zip(got, want):
            _assert_same(got_item, want_item, owned, aligned)
    else:
        assert type(got) is type(want) and got == want


@pytest.fixture(autouse=True)
def _no_validate(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Made-up values need not meet a message's relations between fields: its ``validate`` is no part here."""
    for cls in CLASSES:
        if callable(getattr(cls, "validate", None)):
            monkeypatch.setattr(cls, "validate", lambda self: None)
    for name in ("_ARRAY_HEADERS", "_PACKED_INTS", "_PARTIES", "_PARTY_BYTES"):
        monkeypatch.setattr(wire, name, {})


def test_every_built_in_message_kind_is_in_the_corpus() -> None:
    package = {kind for kind, codec in wire._BY_KIND.items() if codec.cls.__module__.startswith("fedrecsim.")}
    assert {cls.KIND for cls in CLASSES} == package
    assert {"dpmf.item_vectors", "dpmf.contribution", "core.join"} <= package


@pytest.mark.parametrize("variant", ["none", "some", "strided", "big"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.KIND)
def test_the_compiled_encoder_gives_msgpacks_bytes_and_the_trusted_decoders_give_the_message_back(
    cls: type, variant: str
) -> None:
    body = _make(cls, variant)
    want = _reference(USER, SERVER, 2.5, body)
    for _ in range(2):  # computed, then from the caches
        assert encode(USER, SERVER, 2.5, body) == want
        assert [bytes(copy) for copy in encode_many(USER, [SERVER, SERVER], 2.5, body)] == [want, want]
    _assert_decodes_back(want, USER, SERVER, 2.5, body)


def _assert_decodes_back(data: bytes, src: Party, dst: Party, sent_at: float, body: Any) -> None:
    """``data``, the encoding of ``body`` from ``src`` to ``dst``, decodes to it by the compiled reader, by
    `_read` (which the reader falls back on for any value) and by the strict `decode`."""
    cls = type(body)
    strict = decode(data)
    envelope = decode_trusted(data)
    for got in (envelope, strict):
        assert (got.kind, got.src, got.dst, got.sent_at) == (cls.KIND, src, dst, sent_at)
        assert type(got.src) is Party and type(got.dst) is Party and type(got.body) is cls
    codec = wire._BY_CLASS[cls]
    frame, end = wire._read(data, 0)
    assert end == len(data) and frame[:6] == [cls.KIND, src.role.code, src.index, dst.role.code, dst.index, sent_at]
    for field, field_codec, value in zip(dataclasses.fields(cls), codec.fields, frame[6:]):
        want = getattr(body, field.name)
        _assert_same(getattr(envelope.body, field.name), want, aligned=_aligned(cls, field.name))
        _assert_same(getattr(strict.body, field.name), want, owned=True)
        _assert_same(value if field_codec.convert is None else field_codec.convert(value), want)


def _field_values(annotation: Any) -> st.SearchStrategy[Any]:
    """Any value of a field type: arrays of every declared dtype with lengths either side of the ext 8 /
    ext 16 and fixext sizes, ints, parties and strings of every msgpack size."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        spec = next(extra for extra in typing.get_args(annotation) if isinstance(extra, ArraySpec))
        ndims = st.just(spec.ndim) if spec.ndim is not None else st.integers(0, 3)

        def shapes(ndim: int) -> st.SearchStrategy[tuple[int, ...]]:
            most = {0: 1, 1: 90, 2: 14}.get(ndim, 5)
            lengths = list(spec.shape) if spec.shape is not None else [None] * ndim
            return st.tuples(*(st.just(length) if length is not None else st.integers(0, most) for length in lengths))

        def array(shape: tuple[int, ...], seed: int) -> np.ndarray:
            raw = np.random.default_rng(seed).integers(0, 200, size=shape)
            return ((raw % 2).astype(bool) if spec.dtype == "bool" else raw / 7 if spec.dtype.startswith("float") else raw).astype(spec.dtype)

        return st.builds(array, ndims.flatmap(shapes), st.integers(0, 2**32 - 1))
    if origin is tuple:
        return st.lists(_field_values(typing.get_args(annotation)[0]), max_size=3).map(tuple)
    if origin in (typing.Union, __import__("types").UnionType):
        item = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
        return st.none() | _field_values(item)
    return {
        int: st.integers(-(2**63), 2**64 - 1),
        float: st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        str: st.text(max_size=40),
        bytes: st.binary(max_size=300),
        Party: _parties,
    }[annotation]


_parties = st.builds(Party, st.sampled_from(list(Role)), st.integers(0, 70_000) | st.integers(0, 2**32 - 1))


@st.composite
def _messages(draw: st.DrawFn) -> Any:
    """A message of any built-in class, its fields set as `_make` sets them (no ``__init__``)."""
    cls = draw(st.sampled_from(CLASSES))
    hints = typing.get_type_hints(cls, include_extras=True)
    body = object.__new__(cls)
    for field in dataclasses.fields(cls):
        object.__setattr__(body, field.name, draw(_field_values(hints[field.name])))
    return body


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_messages(), _parties, _parties, st.floats(0, 1e9))
def test_every_message_decodes_back_whatever_its_values_sizes_and_offsets(body: Any, src: Party, dst: Party, sent_at: float) -> None:
    data = encode(src, dst, sent_at, body)
    assert data == _reference(src, dst, sent_at, body)
    _assert_decodes_back(data, src, dst, sent_at, body)


@pytest.mark.parametrize("cls", [cls for cls in CLASSES if dataclasses.fields(cls)], ids=lambda cls: cls.KIND)
def test_a_shared_broadcast_body_decodes_to_the_message_with_read_only_arrays(cls: type) -> None:
    body = _make(cls, "some")
    data = _reference(USER, SERVER, 2.5, body)
    sent_at_at = len(wire._BY_CLASS[cls].head + wire._party_bytes(USER) + wire._party_bytes(SERVER))
    sent_at, decoded = SharedBody(wire._BY_CLASS[cls], data[sent_at_at:]).decoded()
    assert sent_at == 2.5
    for field in dataclasses.fields(cls):
        _assert_same(getattr(decoded, field.name), getattr(body, field.name), aligned=_aligned(cls, field.name))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("length", [20, 4000, 1 << 18], ids=["ext8", "ext16", "ext32"])
@pytest.mark.parametrize("ndim", [1, 2])
def test_an_array_is_read_in_place_when_aligned_and_copied_once_when_not(dtype: str, length: int, ndim: int) -> None:
    # `gradient` starts at a byte offset fixed by the kind's length; a one-byte `pad` moves it by one.
    fields = [("pad", bytes), ("gradient", wire.Array(dtype, ndim=ndim))]
    Gradient = wire.message(f"test.codec_gradient_{ndim}")(dataclasses.make_dataclass("Gradient", fields, frozen=True))  # noqa: N806
    size = np.dtype(dtype).itemsize
    gradient = np.arange(length, dtype=dtype).reshape((length,) if ndim == 1 else (2, length // 2))
    views = 0
    for pad in (b"x" * count for count in range(size)):
        data = encode(USER, SERVER, 0.0, Gradient(pad, gradient))
        got = decode_trusted(data).body.gradient
        np.testing.assert_array_equal(got, gradient)
        assert not got.flags.writeable and got.flags.aligned and got.dtype == gradient.dtype
        buffer = np.frombuffer(data, np.uint8)
        view = np.shares_memory(got, buffer)
        assert view == ((buffer.ctypes.data + len(data) - gradient.nbytes) % size == 0)
        views += view
    # One offset in `size` is aligned: there the array is a view, no copy. A message whose one array holds
    # SHARED_BODY_BYTES or more is padded so that the array is aligned at every offset (wire, "Alignment").
    assert views == (size if gradient.nbytes >= wire.SHARED_BODY_BYTES else 1)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16"])
@pytest.mark.parametrize("length", [2, 20, 4000, 1 << 18], ids=["fixext", "ext8", "ext16", "ext32"])
@pytest.mark.parametrize("ndim", [1, 2, None])
def test_an_array_declared_aligned_false_is_read_in_place_at_every_offset(dtype: str, length: int, ndim: int | None) -> None:
    # The same message as above with the array declared ``aligned=False``, alone and as an optional: the
    # trusted decoders (the compiled reader and a shared broadcast body) give a read-only view of the bytes
    # at every offset, misaligned or not; the strict decoder an aligned array of the receiver's own.
    fields = [("pad", bytes), ("gradient", wire.Array(dtype, ndim=ndim, aligned=False)),
              ("maybe", wire.Array(dtype, ndim=ndim, aligned=False) | None)]
    name = f"test.codec_unaligned_{ndim}"
    Gradient = wire.message(name)(dataclasses.make_dataclass("Gradient", fields, frozen=True))  # noqa: N806
    size = np.dtype(dtype).itemsize
    gradient = np.arange(length, dtype=dtype).reshape((length,) if ndim != 2 else (2, length // 2))
    misaligned = 0
    for pad in (b"x" * count for count in range(size)):
        body = Gradient(pad, gradient, gradient[::-1].copy())
        data = encode(USER, SERVER, 0.0, body)
        sent_at_at = len(wire._BY_CLASS[Gradient].head + wire._party_bytes(USER) + wire._party_bytes(SERVER))
        shared = SharedBody(wire._BY_CLASS[Gradient], data[sent_at_at:])
        for got, buffer in ((decode_trusted(data).body, data), (shared.decoded()[1], shared.data)):
            for array, want in ((got.gradient, body.gradient), (got.maybe, body.maybe)):
                np.testing.assert_array_equal(array, want)
                assert array.dtype == want.dtype and not array.flags.writeable
                assert np.shares_memory(array, np.frombuffer(buffer, np.uint8))
                misaligned += not array.flags.aligned
        strict = decode(data).body
        for array in (strict.gradient, strict.maybe):
            assert array.flags.aligned and array.flags.writeable
            assert not np.shares_memory(array, np.frombuffer(data, np.uint8))
    assert misaligned == 4 * (size - 1)  # the pads move each array through every offset modulo the size


def test_the_arrays_of_a_tuple_field_cannot_be_declared_aligned_false() -> None:
    fields = [("arrays", tuple[wire.Array("float32", aligned=False), ...])]
    with pytest.raises(TypeError, match="tuple field are always decoded aligned"):
        wire.message("test.codec_unaligned_tuple")(dataclasses.make_dataclass("Arrays", fields, frozen=True))


def test_a_field_of_the_wrong_dtype_or_ndim_goes_through_the_checking_path() -> None:
    # The compiled fast path takes only the declared native dtype and ndim; anything else is checked as before.
    from fedrecsim.protocols.dpmf.messages import ItemRequest

    with pytest.raises(wire.WireError, match="^dpmf.item_request.items: encode: expected dtype int32, got int64$"):
        encode(USER, SERVER, 0.0, ItemRequest(np.arange(3)))
    with pytest.raises(wire.WireError, match=r"^dpmf.item_request.items: encode: expected 1 dimensions, got shape \(1, 3\)$"):
        encode(USER, SERVER, 0.0, ItemRequest(np.arange(3, dtype=np.int32)[None]))
    big_endian = np.arange(3, dtype=">i4")
    assert encode(USER, SERVER, 0.0, ItemRequest(big_endian)) == encode(USER, SERVER, 0.0, ItemRequest(np.arange(3, dtype=np.int32)))


@pytest.mark.parametrize(
    "value",
    [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1, -1, -32, -33, -128, -129, -32768, -32769,
     -(2**31), -(2**31) - 1, -(2**63), 0.5, -1e300, True, False, None, "", "k" * 31, "k" * 32, "é" * 300, "k" * 70_000,
     b"", b"\x00" * 255, b"\x01" * 256, b"\x02" * 70_000, list(range(15)), list(range(16)), list(range(70_000))],
    ids=lambda value: f"{type(value).__name__}{len(value) if isinstance(value, (str, bytes, list)) else value}",
)
def test_the_in_place_reader_reads_every_msgpack_form_the_encoder_writes_as_msgpack_does(value: Any) -> None:
    data = b"\xc0" + msgpack.packb(value, use_bin_type=True) + b"\xc0"
    got, end = wire._read(data, 1)
    assert got == value and type(got) is type(value) and end == len(data) - 1

