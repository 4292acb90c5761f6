"""The ``__init__`` `wire.message` gives a plain message class (`wire._direct_init`): the dataclass's own,
built cheaper -- the same signature, defaults and errors, the same instance -- and only where that is safe."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, dataclass, field

import numpy as np
import pytest

from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, decode, decode_trusted, encode, message


def _twins(register: bool, **options: bool) -> type:
    @dataclass(frozen=True, **options)
    class Plain:
        round: int
        items: Array("int32", ndim=1)
        label: str = "x"
        seed: bytes | None = None

    return message("test.init_plain")(Plain) if register else Plain


def test_a_plain_message_gets_an_init_of_its_own_with_the_dataclass_signature_and_the_same_instances() -> None:
    registered, reference = _twins(True), _twins(False)
    assert registered.__init__.__code__.co_filename == "<wire test.init_plain>"
    assert inspect.signature(registered.__init__) == inspect.signature(reference.__init__)
    items = np.arange(3, dtype=np.int32)
    for args, kwargs in (((1, items), {}), ((2, items, "y"), {"seed": b"s"}), ((), {"items": items, "round": 3})):
        built, expected = registered(*args, **kwargs), reference(*args, **kwargs)
        assert vars(built) == vars(expected) and list(vars(built)) == list(vars(expected))
        assert repr(built).split("(", 1)[1] == repr(expected).split("(", 1)[1]
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.round = 9  # type: ignore[misc]
    wrong = (((1,), {}), ((1, items, "y", None, 5), {}), ((1, items), {"other": 1}), ((1, items), {"round": 2}))
    for args, kwargs in wrong:
        with pytest.raises(TypeError) as ours:
            registered(*args, **kwargs)
        with pytest.raises(TypeError) as theirs:
            reference(*args, **kwargs)
        assert str(ours.value) == str(theirs.value)
    body = registered(4, items, "z")
    data = encode(Party(Role.USER, 3), SERVER, 1.0, body)
    for decoded in (decode(data).body, decode_trusted(data).body):
        assert type(decoded) is registered and list(vars(decoded)) == list(vars(body))
        assert (decoded.round, decoded.label, decoded.seed) == (4, "z", None)
        assert np.array_equal(decoded.items, items)


def test_keyword_only_fields_keep_their_kind() -> None:
    @message("test.init_kw_only")
    @dataclass(frozen=True)
    class KwOnly:
        round: int
        label: str = field(default="a", kw_only=True)
        first: int = 0
        second: int = 0

    assert KwOnly.__init__.__code__.co_filename == "<wire test.init_kw_only>"
    assert str(inspect.signature(KwOnly.__init__)) == (
        "(self, round: 'int', first: 'int' = 0, second: 'int' = 0, *, label: 'str' = 'a') -> None"
    )
    assert vars(KwOnly(1, 2, label="b")) == {"round": 1, "label": "b", "first": 2, "second": 0}
    with pytest.raises(TypeError):
        KwOnly(1, 2, 3, "b")  # type: ignore[misc]


def test_a_class_that_is_not_plain_keeps_the_init_it_has() -> None:
    @dataclass(frozen=True)
    class OwnInit:
        round: int

        def __init__(self, round: int) -> None:  # noqa: A002 -- the field's name
            object.__setattr__(self, "round", round + 1)

    @dataclass(frozen=True)
    class Factory:
        labels: tuple[str, ...] = field(default_factory=tuple)

    @dataclass(frozen=True)
    class WithInitVar:
        round: int
        scale: InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class Slotted:
        round: int

    @dataclass(frozen=True)
    class Small:  # fewer fields than _DIRECT_INIT_FIELDS: the dataclass's own is cheaper
        round: int

    kept = (("own", OwnInit), ("factory", Factory), ("initvar", WithInitVar), ("slots", Slotted), ("small", Small))
    for kind, cls in kept:
        before = cls.__init__
        assert message(f"test.init_{kind}")(cls).__init__ is before
    assert OwnInit(1).round == 2 and Factory().labels == ()
