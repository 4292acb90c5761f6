"""A message kind names one class: another class claiming it is refused at import time; a reload is not."""

from __future__ import annotations

import importlib
import sys
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, decode, encode, kind_of, message

ALICE = Party(Role.USER, 0)

PING_SOURCE = '''
from dataclasses import dataclass

from fedrecsim.network.wire import Array, message


@message("{kind}")
@dataclass(frozen=True)
class Ping:
    values: Array("float64", ndim=1)
'''


@message("test.registration_first")
@dataclass(frozen=True)
class First:
    values: Array("float64", ndim=1)


def test_another_class_taking_a_registered_kind_is_refused_naming_both_and_the_first_stays() -> None:
    with pytest.raises(ValueError) as raised:

        @message("test.registration_first")
        @dataclass(frozen=True)
        class Impostor:
            values: Array("float64", ndim=1)

    text = str(raised.value)
    assert "'test.registration_first'" in text
    assert f"{__name__}.First" in text
    assert f"{__name__}.test_another_class_taking_a_registered_kind_is_refused_naming_both_and_the_first_stays.<locals>.Impostor" in text
    assert kind_of(First) == "test.registration_first"
    decoded = decode(encode(ALICE, SERVER, 0.0, First(np.arange(3.0))))
    assert type(decoded.body) is First


def test_the_same_class_name_from_another_module_is_refused_at_import(tmp_path, monkeypatch) -> None:
    for module in ("registration_a", "registration_b"):
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(PING_SOURCE.format(kind="test.registration_ping")))
    monkeypatch.syspath_prepend(tmp_path)
    importlib.import_module("registration_a")
    with pytest.raises(ValueError) as raised:
        importlib.import_module("registration_b")
    assert "registration_a.Ping" in str(raised.value) and "registration_b.Ping" in str(raised.value)
    assert "registration_b" not in sys.modules  # the failed import left nothing behind


def test_reloading_a_module_re_registers_its_classes(tmp_path, monkeypatch) -> None:
    (tmp_path / "registration_reloaded.py").write_text(
        textwrap.dedent(PING_SOURCE.format(kind="test.registration_reloaded"))
    )
    monkeypatch.syspath_prepend(tmp_path)
    module = importlib.import_module("registration_reloaded")
    before = module.Ping
    module = importlib.reload(module)
    assert module.Ping is not before
    decoded = decode(encode(ALICE, SERVER, 0.0, module.Ping(np.ones(2))))
    assert type(decoded.body) is module.Ping  # the kind now decodes into the reloaded class
