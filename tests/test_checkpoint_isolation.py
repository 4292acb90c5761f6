"""Parties stay isolated across a checkpoint (`fedrecsim.checkpoint`, issue 32): the receivers of a broadcast
share one decoded, read-only body (`Network.send_many`, `wire.SharedBody`), and a checkpoint taken after
some copies were delivered -- sitting in the receivers' mailboxes, not yet taken -- saves those decoded
bodies. After the restore every array a receiver holds must still be read-only and impossible to make
writable, so that no party can change what another sees; the parties that shared one body may still
share it (the pickle's memo keeps one object), but never a writable one.

The checks run through `Checkpoints.save` and `Checkpoints.restore`, the file written and read back as a
run's resume does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import trio

from fedrecsim.checkpoint import Checkpoints, load
from fedrecsim.clock import VirtualClock
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import SHARED_BODY_BYTES, Array, message


@message("test.isolation_vector")
@dataclass(frozen=True)
class Vector:
    step: int
    values: Array("float64", ndim=1)  # type: ignore[valid-type]


@message("test.isolation_matrix")
@dataclass(frozen=True)
class Matrix:
    values: Array("float32", ndim=2)  # type: ignore[valid-type]


RECEIVERS = [Party(Role.USER, index) for index in (0, 1, 2, 3, 200, 201)]
#: Their links are busy with a 2 MB message until t = 2 s: at the checkpoint (t = 1 s) their copies are in flight.
LATE = (RECEIVERS[2], RECEIVERS[5])
BACKLOG = np.zeros(250_000)
SMALL = np.arange(5.0)  # a body the network shares between receivers (`_SharedDecoding`)
LARGE = np.linspace(0.0, 1.0, SHARED_BODY_BYTES // 8 + 3)  # one the wire shares (`SharedBody`)
GRID = np.arange(12, dtype=np.float32).reshape(3, 4)


class Keeper:
    """A user standing in for an actor that keeps what it received (as PriviRec's users keep P~)."""


def _network() -> Network:
    network = Network(Links(5, LinkSpec(Constant(0.01), bandwidth_bps=8e6)), Ledger())
    for party in (SERVER, *RECEIVERS):
        network.attach(party)
    return network


def _world(network: Network) -> tuple[SimpleNamespace, SimpleNamespace]:
    ctx = SimpleNamespace(network=network, model_use=SimpleNamespace(), train=object(), test=object())
    population = SimpleNamespace(
        users={party: Keeper() for party in RECEIVERS[:2]}, not_at_rest=list,
        checkpoint_state=dict, restore_state=lambda state: None,
    )
    return ctx, population


def _arrays(value: Any) -> list[np.ndarray]:
    """The arrays in a message body, an envelope or an actor's attributes."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [array for item in value for array in _arrays(item)]
    if isinstance(value, dict):
        return [array for item in value.values() for array in _arrays(item)]
    if hasattr(value, "__dataclass_fields__"):
        return [array for name in value.__dataclass_fields__ for array in _arrays(getattr(value, name))]
    return []


def _cannot_be_made_writable(array: np.ndarray) -> bool:
    if array.flags.writeable:
        return False
    try:
        array.flags.writeable = True
    except ValueError:
        return True
    array.flags.writeable = False
    return False


def _saved_mid_broadcast(tmp_path, keep: dict[Party, dict[str, Any]]) -> Any:  # type: ignore[no-untyped-def]
    """A run's world at t = 1 s: three broadcasts and a unicast delivered to the prompt receivers' mailboxes
    (untaken), the late receivers' copies in flight; the two kept users hold what ``keep`` gives them
    (functions of the first user's delivered bodies). Saved by `Checkpoints.save` and loaded back."""
    network = _network()
    ctx, population = _world(network)
    checkpoints = Checkpoints(tmp_path, 1, "scenario", False)

    async def main() -> None:
        async with network.open():
            for party in LATE:
                network.send(SERVER, party, Vector(0, BACKLOG))
            network.send_many(SERVER, RECEIVERS, Vector(1, SMALL))
            network.send_many(SERVER, RECEIVERS, Vector(2, LARGE))
            network.send_many(SERVER, RECEIVERS, Matrix(GRID))
            network.send(SERVER, RECEIVERS[0], Vector(3, LARGE))
            await network.sleep_until(1.0)
            bodies = [envelope.body for envelope in network.mailbox(RECEIVERS[0]).queue(Vector.KIND)]
            bodies += [envelope.body for envelope in network.mailbox(RECEIVERS[0]).queue(Matrix.KIND)]
            for party, make in keep.items():
                vars(population.users[party]).update(make(bodies))
            network.ledger.fold()
            await checkpoints.save(ctx, 1, population, {}, {}, ())

    trio.run(main, clock=VirtualClock())
    return load(tmp_path)


def _restored(saved: Any) -> tuple[Network, SimpleNamespace]:
    network = _network()
    ctx, population = _world(network)
    Checkpoints(Path("."), 1, "scenario", False, resumed=saved).restore(ctx, population, {})
    return network, population


def test_the_bodies_waiting_in_mailboxes_come_back_read_only_and_shared_by_nobody_writable(tmp_path) -> None:
    saved = _saved_mid_broadcast(tmp_path, {})
    network, _ = _restored(saved)
    held: dict[int, set[Party]] = {}
    prompt = [party for party in RECEIVERS if party not in LATE]
    for party in prompt:
        mailbox = network.mailbox(party)
        vectors = [envelope.body for envelope in mailbox.queue(Vector.KIND)]
        [matrix] = [envelope.body for envelope in mailbox.queue(Matrix.KIND)]
        assert [body.step for body in vectors] == ([1, 2, 3] if party == RECEIVERS[0] else [1, 2])
        np.testing.assert_array_equal(vectors[0].values, SMALL)
        np.testing.assert_array_equal(vectors[1].values, LARGE)
        np.testing.assert_array_equal(matrix.values, GRID)
        assert matrix.values.dtype == np.float32 and matrix.values.shape == (3, 4)
        for array in _arrays([vectors, matrix]):
            assert _cannot_be_made_writable(array), (party, array.shape)
            held.setdefault(id(array), set()).add(party)
    assert any(len(parties) > 1 for parties in held.values()), "the memo keeps the shared bodies shared"
    for party in LATE:
        assert not network.mailbox(party).queue(Vector.KIND)  # still in flight at the checkpoint
    assert network.in_flight == 2 + 3 * len(LATE)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_a_read_only_array_two_users_keep_comes_back_read_only_whatever_its_layout(tmp_path, layout: str) -> None:
    """Two users keep one read-only array derived from a broadcast body (a view of it, as a protocol may
    keep a row or the transpose of a received matrix): after the restore they may still share it, but
    neither can write to it -- numpy pickles a non-contiguous array as a fresh writable copy."""
    view = {"contiguous": lambda a: a, "transposed": lambda a: a.T, "strided": lambda a: a[:, ::2]}[layout]
    seen: dict[str, np.ndarray] = {}

    def kept(bodies: list[Any]) -> dict[str, Any]:
        seen.setdefault("array", view(bodies[-1].values))
        return {"kept": seen["array"]}

    saved = _saved_mid_broadcast(tmp_path, {RECEIVERS[0]: kept, RECEIVERS[1]: kept})
    assert not seen["array"].flags.writeable
    _, population = _restored(saved)
    first, second = (population.users[party].kept for party in RECEIVERS[:2])
    np.testing.assert_array_equal(first, view(GRID))
    assert first is second
    assert _cannot_be_made_writable(first)


def test_a_writable_array_of_a_users_own_stays_writable_and_its_own(tmp_path) -> None:
    """What a party owns and may change (its model, its counts) comes back writable, and not shared."""
    saved = _saved_mid_broadcast(tmp_path, {
        RECEIVERS[0]: lambda bodies: {"model": np.ones((2, 3)), "rows": np.ones((4, 4))[:, 1]},
        RECEIVERS[1]: lambda bodies: {"model": np.zeros((2, 3))},
    })
    _, population = _restored(saved)
    mine, theirs = (population.users[party] for party in RECEIVERS[:2])
    for array in (mine.model, mine.rows, theirs.model):
        assert array.flags.writeable
    mine.model += 1.0
    np.testing.assert_array_equal(theirs.model, np.zeros((2, 3)))
