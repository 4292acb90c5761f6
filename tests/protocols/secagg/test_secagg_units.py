"""Secure aggregation's small pieces at their edges: the graph's degenerate degrees, the ideal functionality's
bookkeeping, the messages' own checks and the parameters' validation."""

from __future__ import annotations

import numpy as np
import pytest

from fedrecsim.errors import ConfigError, ProtocolViolation
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import WireError, decode, encode
from fedrecsim.protocols.secagg import IdealSum, SecAggParams, graph
from fedrecsim.protocols.secagg.ideal import IdealUser
from fedrecsim.protocols.secagg.crypto import CIPHERTEXT_BYTES, KEY_BYTES
from fedrecsim.protocols.secagg.messages import Ciphertexts, Keys, Reveal, Shares
from fedrecsim.protocols.secagg.protocol import SecAggConfig, _params
from fedrecsim.protocols.secagg.shamir import SHARE_BYTES

# ------------------------------------------------------------------ graphs


def _users(n: int) -> list[Party]:
    return [Party(Role.USER, 2 * index + 1) for index in range(n)]


def test_degree_one_pairs_each_user_with_the_one_opposite_it() -> None:
    users = _users(6)
    neighbours = graph.harary(users, 1, np.random.default_rng(3))
    assert all(len(found) == 1 for found in neighbours.values())
    assert all(neighbours[found[0]] == (party,) for party, found in neighbours.items())  # a perfect matching


@pytest.mark.parametrize(("n", "k"), [(6, 4), (8, 6), (10, 8)])
def test_degree_n_minus_two_is_a_sparse_graph_not_the_complete_one(n: int, k: int) -> None:
    neighbours = graph.harary(_users(n), k, np.random.default_rng(0))
    assert all(len(found) == k for found in neighbours.values())


@pytest.mark.parametrize("k", [7, 8, 12])
def test_a_degree_of_n_minus_one_or_more_is_complete_and_draws_nothing(k: int) -> None:
    """The complete graph needs no placement, so the server's generator is left as it was."""
    rng = np.random.default_rng(5)
    assert graph.harary(_users(8), k, rng) == graph.complete(_users(8))
    assert rng.random() == np.random.default_rng(5).random()


# ------------------------------------------------------------------ the ideal functionality


def test_a_deposit_is_a_copy_the_depositor_cannot_change_afterwards() -> None:
    ring = Ring(32, 16)
    ideal = IdealSum()
    x = np.array([1, 2, 3], dtype=ring.dtype)
    ideal.deposit(4, 0, x)
    x[:] = 100
    assert ideal.total(4, [0], ring, 3).tolist() == [1, 2, 3]


def test_forgetting_a_session_drops_its_inputs_only() -> None:
    ring = Ring(32, 16)
    ideal = IdealSum()
    ideal.deposit(1, 5, np.array([7], dtype=ring.dtype))
    ideal.deposit(2, 1, np.array([9], dtype=ring.dtype))
    ideal.deposit(2, 5, np.array([11], dtype=ring.dtype))
    ideal.forget(1)
    assert ideal.total(2, [1, 5], ring, 1).tolist() == [20]
    with pytest.raises(ProtocolViolation, match="^user:5 sent no masked input in session 1$"):
        ideal.total(1, [5], ring, 1)


def test_the_ideal_server_gets_the_sum_over_the_revealed_users_then_the_session_is_forgotten() -> None:
    ring = Ring(32, 16)
    ideal = IdealSum()
    for index, value in ((0, 3), (1, 4), (2, 5)):
        y = IdealUser(index, ideal, 9, ring).mask(np.array([value, 1], dtype=ring.dtype), [])
        assert y.size == 0 and y.dtype == ring.dtype  # nothing travels: the bytes are booked as padding
    ideal.deposit(10, 0, np.array([1, 1], dtype=ring.dtype))  # another session, untouched
    total = ideal.release(9, [0, 2], ring, 2)
    assert total.tolist() == [8, 2]  # users 0 and 2: user 1 revealed nothing, it is not in U3
    with pytest.raises(ProtocolViolation, match="session 9"):
        ideal.total(9, [0], ring, 2)
    assert ideal.total(10, [0], ring, 2).tolist() == [1, 1]


# ------------------------------------------------------------------ messages


def _ids(count: int) -> np.ndarray:
    return np.arange(count, dtype=np.int32)


def _rows(count: int, width: int) -> np.ndarray:
    return np.zeros((count, width), dtype=np.uint8)


def _message(kind: str, owners: int, first: int, second: int) -> object:
    """A message of ``kind`` with ``owners`` indices and row arrays of ``first`` and ``second`` rows."""
    if kind == "secagg.keys":
        return Keys(3, _ids(owners), _rows(first, KEY_BYTES), _rows(second, KEY_BYTES))
    if kind == "secagg.shares":
        return Shares(3, _ids(owners), _rows(first, CIPHERTEXT_BYTES))
    if kind == "secagg.ciphertexts":
        return Ciphertexts(3, _ids(owners), _rows(first, CIPHERTEXT_BYTES))
    # Reveal: ``owners`` b-owners with ``first`` rows; one s^SK owner with ``second`` rows.
    return Reveal(3, _ids(owners), _rows(first, SHARE_BYTES), _ids(1), _rows(second, SHARE_BYTES))


@pytest.mark.parametrize(
    ("kind", "counts", "valid"),
    [("secagg.keys", (2, 2, 2), True), ("secagg.keys", (2, 1, 2), False), ("secagg.keys", (2, 2, 3), False),
     ("secagg.keys", (0, 1, 1), False),
     ("secagg.shares", (3, 3, 0), True), ("secagg.shares", (3, 2, 0), False), ("secagg.shares", (0, 1, 0), False),
     ("secagg.ciphertexts", (1, 1, 0), True), ("secagg.ciphertexts", (1, 0, 0), False),
     ("secagg.ciphertexts", (0, 2, 0), False),
     ("secagg.reveal", (2, 2, 1), True), ("secagg.reveal", (2, 3, 1), False), ("secagg.reveal", (3, 2, 1), False),
     ("secagg.reveal", (2, 2, 0), False), ("secagg.reveal", (2, 2, 2), False)],
)
def test_a_message_needs_one_row_per_index_in_every_row_array(kind: str, counts: tuple[int, int, int], valid: bool) -> None:
    body = _message(kind, *counts)
    user = Party(Role.USER, 0)
    if valid:
        body.validate()  # type: ignore[attr-defined]
        decoded = decode(encode(user, SERVER, 0.0, body)).body
        assert type(decoded) is type(body) and len(encode(user, SERVER, 0.0, decoded)) == len(encode(user, SERVER, 0.0, body))
        return
    problem = f"{kind}: every row array must have one row per index"
    with pytest.raises(ValueError, match=f"^{problem}$"):
        body.validate()  # type: ignore[attr-defined]
    with pytest.raises(WireError, match=f"^{kind}: {problem}$"):
        encode(user, SERVER, 0.0, body)


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [("graph", "ring", "must be 'complete' or 'sparse', got 'ring'"), ("neighbours", -1, "must be >= 0, got -1"),
     ("threshold", 1.0, "must lie in [0, 1), got 1.0"), ("threshold", 1.5, "must lie in [0, 1), got 1.5"),
     ("threshold", -0.1, "must lie in [0, 1), got -0.1"), ("stage_timeout_s", 0.0, "must be > 0, got 0.0"),
     ("corrupt_fraction", 1.0, "must lie in [0, 1), got 1.0"), ("dropout_fraction", -0.1, "must lie in [0, 1), got -0.1"),
     ("security_bits", 0.0, "must be > 0, got 0.0"), ("correctness_bits", -1.0, "must be > 0, got -1.0"),
     ("sizing", "huge", "must be 'log2' or 'secure', got 'huge'"),
     ("sizing", "secure", "'secure' chooses a sparse graph's k and t: set graph = 'sparse'")],
)
def test_invalid_parameters_name_the_key_and_the_problem(field: str, value: object, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        SecAggParams(**{field: value})  # type: ignore[arg-type]
    assert raised.value.key_path == f"secagg.{field}" and raised.value.problem == problem


def test_the_edges_of_the_valid_ranges_are_accepted() -> None:
    # theta = 0: a single share reconstructs; a timeout below one second is still a timeout.
    assert SecAggParams(threshold=0.0).threshold_for(10) == 1
    assert SecAggParams(stage_timeout_s=0.5).stage_timeout_s == 0.5
    assert SecAggParams(threshold=0.99).threshold_for(10) == 10


def test_a_sparse_degree_is_capped_at_n_minus_one() -> None:
    assert [SecAggParams(graph="sparse").degree(n) for n in (2, 5, 16, 17)] == [1, 4, 8, 10]
    assert [SecAggParams(graph="sparse", neighbours=6).degree(n) for n in (5, 7, 8, 100)] == [4, 6, 6, 6]
    assert SecAggParams(graph="complete", neighbours=6).degree(12) == 11
    assert SecAggParams(graph="sparse", neighbours=6).threshold_for(100) == 4  # floor(0.5 * 7) + 1


def test_the_scenarios_parameters_are_the_protocol_tables() -> None:
    params = _params(SecAggConfig(mode="ideal", graph="sparse", neighbours=5, threshold=0.3, bits=64, frac_bits=20,
                                  stage_timeout_s=3.5), 12)
    assert params == SecAggParams(ring=Ring(64, 20), graph="sparse", neighbours=5, threshold=0.3, ideal=True,
                                  stage_timeout_s=3.5, population=12)
    assert not _params(SecAggConfig(mode="real"), 12).ideal
    assert _params(SecAggConfig(bits=32, frac_bits=30), 12).ring.frac_bits == 30  # one integer bit is enough
    with pytest.raises(ConfigError) as raised:
        _params(SecAggConfig(bits=32, frac_bits=31), 12)
    assert raised.value.key_path == "protocol.frac_bits"
