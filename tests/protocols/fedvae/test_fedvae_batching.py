"""FedVAE's users of one instant computed in one pass (`LocalGradients` through `fedrecsim.actors.batching`):
each gets its own gradient, from its own row and its own draws, equal to what it computes alone up to float32
rounding; runs stay deterministic; a failure of the pass reaches the users."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import pytest
import trio

import fedrecsim
from fedrecsim.clock import VirtualClock
from fedrecsim.errors import SimulationError
from fedrecsim.mechanisms.adam import AdamHyper
from fedrecsim.models.multvae import Batch, Layout, MultVAEHyper, Noise, dense_user_gradients, draw_noise, init_params, user_gradients
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.fedvae.aggregation import FilterSettings
from fedrecsim.protocols.fedvae.roles import CHUNK, FedVAEServer, FedVAEUser, LocalGradients, LocalPass, local_gradients
from fedrecsim.testing import Constant, LinkSpec, open_network

HYPER = MultVAEHyper(hidden=32, latent=8)
ITEMS = 120
LAYOUT = Layout.of(ITEMS, HYPER)

#: How far a user's gradient computed in a batch may be from the one it computes alone, relative to the
#: gradient's largest entry: float32 rounding of sums accumulated in another order (BLAS calls of other
#: shapes), measured at up to ~7 float32 epsilons here and at W4's size; another user's row or another draw
#: differs by the order of the gradient itself.
TOLERANCE = 64 * float(np.finfo(np.float32).eps)


def _rows(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(ITEMS, rng.integers(1, 30), replace=False)) for _ in range(count)]


def _alone(omega: np.ndarray, items: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The user's dense gradient computed alone, a batch of one, from the next draw of ``rng``."""
    batch = Batch.single(items, np.ones(items.size), ITEMS)
    (gradient,) = dense_user_gradients(omega, LAYOUT, batch, draw_noise(rng, batch, HYPER), HYPER)
    return gradient


def _close(batched: np.ndarray, alone: np.ndarray) -> bool:
    return bool(np.max(np.abs(batched - alone)) <= TOLERANCE * np.max(np.abs(alone)))


def test_a_pass_over_many_users_gives_each_its_own_gradient_to_float32_rounding_in_arrays_of_its_own() -> None:
    omega = init_params(np.random.default_rng(0), LAYOUT)
    rows = _rows(12, seed=1)
    users: list[tuple[Batch, Noise]] = []
    for user, items in enumerate(rows):
        batch = Batch.single(items, np.ones(items.size), ITEMS)
        users.append((batch, draw_noise(np.random.default_rng(100 + user), batch, HYPER)))

    dense = LocalGradients(LAYOUT, HYPER)(omega, [LocalPass(*user, dense=True) for user in users])
    sparse = LocalGradients(LAYOUT, HYPER)(omega, [LocalPass(*user, dense=False) for user in users])

    for user, items in enumerate(rows):
        alone = _alone(omega, items, np.random.default_rng(100 + user))
        assert _close(dense[user], alone)
        own = user_gradients(omega, LAYOUT, *users[user], HYPER)
        kept, first_rows = own.kept(0)
        items_sent, rows_sent, rest_sent = sparse[user]
        assert items_sent.dtype == np.int32 and np.array_equal(items_sent, kept)
        assert _close(np.concatenate([rows_sent.ravel(), rest_sent]), np.concatenate([first_rows.ravel(), own.rest[0]]))
    arrays = [*dense, *(array for gradient in sparse for array in gradient)]
    assert not any(np.shares_memory(a, b) for position, a in enumerate(arrays) for b in arrays[position + 1 :])


def test_users_wanting_either_format_in_one_pass_get_the_same_numbers_as_a_pass_of_one_format() -> None:
    """Attackers compute dense in a sparse run: batched with sparse users, each gets, to the bit, what an
    all-dense or all-sparse pass over the same users gives it."""
    omega = init_params(np.random.default_rng(0), LAYOUT)
    users = []
    for user, items in enumerate(_rows(6, seed=4)):
        batch = Batch.single(items, np.ones(items.size), ITEMS)
        users.append((batch, draw_noise(np.random.default_rng(200 + user), batch, HYPER)))
    compute = LocalGradients(LAYOUT, HYPER)

    mixed = compute(omega, [LocalPass(*user, dense=position % 2 == 0) for position, user in enumerate(users)])
    dense = compute(omega, [LocalPass(*user, dense=True) for user in users])
    sparse = compute(omega, [LocalPass(*user, dense=False) for user in users])

    for position in range(len(users)):
        if position % 2 == 0:
            assert np.array_equal(mixed[position], dense[position])
        else:
            assert all(np.array_equal(got, expected) for got, expected in zip(mixed[position], sparse[position]))


async def _one_round(rows: list[np.ndarray], omega: np.ndarray) -> dict[Party, np.ndarray]:
    """One FedVAE round of ``len(rows)`` users (user ``u`` seeded ``20 + u``) on a network of constant
    latency: every user receives ω at the same instant. Returns the gradient each user sent."""
    sent: dict[Party, np.ndarray] = {}
    contribution = FedVAEUser.contribution

    def spy(self: FedVAEUser, round_index: int, gradient: np.ndarray):  # type: ignore[no-untyped-def]
        sent[self.party] = np.array(gradient)
        return contribution(self, round_index, gradient)

    gradients = local_gradients(LAYOUT, HYPER)
    async with open_network(links=LinkSpec(Constant(0.01))) as sim:
        server = FedVAEServer(
            SERVER, sim.network, np.random.default_rng(1), LAYOUT, omega.copy(), users_per_round=len(rows),
            adam=AdamHyper(eta=0.01), settings=FilterSettings("none"), sparse=False,
        )
        users = [
            FedVAEUser(
                Party(Role.USER, user), sim.network, np.random.default_rng(20 + user), items, np.ones(items.size),
                LAYOUT, HYPER, False, gradients=gradients,
            )
            for user, items in enumerate(rows)
        ]
        for user in users:
            user.contribution = spy.__get__(user)  # type: ignore[method-assign]
        sim.attach(SERVER)
        async with sim.population(users).open():
            await trio.sleep(1.0)
            report = await server.round(1, 0.0, trio.current_time() + 10)
    assert report.accepted == tuple(user.party for user in users)
    return sent


def test_users_of_one_instant_are_computed_a_chunk_at_a_time_each_from_its_own_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Users receiving ω at one instant are computed in chunks of `CHUNK` in party order; each sends the
    gradient it computes alone from its own generator's draw, to float32 rounding."""
    passes: list[int] = []
    compute = LocalGradients.__call__

    def counted(self: LocalGradients, weights: np.ndarray, users: Sequence[tuple[Batch, Noise]]):  # type: ignore[no-untyped-def]
        passes.append(len(users))
        return compute(self, weights, users)

    monkeypatch.setattr(LocalGradients, "__call__", counted)
    omega = init_params(np.random.default_rng(0), LAYOUT)
    rows = _rows(CHUNK + 3, seed=2)

    sent = trio.run(_one_round, rows, omega, clock=VirtualClock())

    assert passes == [CHUNK, 3]
    for user, items in enumerate(rows):
        assert _close(sent[Party(Role.USER, user)], _alone(omega, items, np.random.default_rng(20 + user)))


def test_under_the_autojump_clock_each_user_computes_alone_bit_for_bit() -> None:
    """A clock that does not ask who still has work (pytest-trio's ``autojump_clock``, a `MockClock`): each
    user computes its gradient alone, exactly as a batch of one."""
    omega = init_params(np.random.default_rng(0), LAYOUT)
    rows = _rows(4, seed=3)

    sent = trio.run(_one_round, rows, omega, clock=trio.testing.MockClock(autojump_threshold=0))

    for user, items in enumerate(rows):
        assert np.array_equal(sent[Party(Role.USER, user)], _alone(omega, items, np.random.default_rng(20 + user)))


SCENARIO = {
    "run": {"protocol": "fedvae", "seed": 4, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 200, "items": 100, "ratings": 3000, "split": "heldout_users", "test_fraction": 0.1},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"users_per_round": CHUNK + 8, "hidden": 16, "latent": 4, "baseline": False, "byzantine_fraction": 0.1},
}


@pytest.mark.parametrize("sparse", [False, True])
def test_a_batched_run_is_deterministic(sparse: bool) -> None:
    scenario = copy.deepcopy(SCENARIO)
    scenario["protocol"]["sparse"] = sparse
    first, second = (fedrecsim.run(copy.deepcopy(scenario), transcript=True) for _ in range(2))
    assert first.result["transcript_xxh3_128"] == second.result["transcript_xxh3_128"]
    assert first.metrics == second.metrics and first.metrics["gradients"] == CHUNK + 8


def test_a_failing_pass_ends_the_run_with_an_error_naming_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(self: LocalGradients, weights: np.ndarray, users: Sequence[tuple[Batch, Noise]]) -> list[np.ndarray]:
        raise FloatingPointError("overflow in the decoder")

    monkeypatch.setattr(LocalGradients, "__call__", failing)
    with pytest.raises(SimulationError, match=rf"user:\d+'s computation, batched with {CHUNK - 1} other parties', failed: overflow in the decoder"):
        fedrecsim.run(copy.deepcopy(SCENARIO))
