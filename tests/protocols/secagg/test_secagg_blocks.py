"""The pure building blocks of secure aggregation: Shamir sharing (exhaustively over small n), the PRG,
key agreement and the AEAD (tampering is caught), and the communication graphs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import chisquare

from fedrecsim.errors import ProtocolViolation
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.secagg import crypto, graph, prg, shamir


def _is_prime(n: int) -> bool:
    """Miller-Rabin with the first 20 prime bases (deterministic far beyond what a wrong constant could pass)."""
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def test_the_field_is_the_smallest_prime_above_2_to_the_256() -> None:
    assert shamir.PRIME > 2**256 and _is_prime(shamir.PRIME)
    assert not any(_is_prime(candidate) for candidate in range(2**256 + 1, shamir.PRIME, 2))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_every_t_subset_reconstructs_and_no_smaller_subset_does(n: int) -> None:
    rng = np.random.default_rng(n)
    secret = int.from_bytes(rng.bytes(32), "big")
    xs = [3 * x + 1 for x in range(n)]
    for t in range(1, n + 1):
        shares = shamir.split(secret, t, xs, rng)
        assert sorted(shares) == xs
        for subset in itertools.combinations(xs, t):
            chosen = {x: shares[x] for x in subset}
            assert shamir.reconstruct(chosen, t) == secret
            assert shamir.interpolate_at_zero(chosen) == secret
        for size in range(1, t):
            for subset in itertools.combinations(xs, size):
                chosen = {x: shares[x] for x in subset}
                with pytest.raises(shamir.ShamirError, match=f"{size} shares cannot reconstruct a {t}-of-n secret"):
                    shamir.reconstruct(chosen, t)
                # Fewer points interpolate another polynomial: its value at 0 is not the secret.
                assert shamir.interpolate_at_zero(chosen) != secret


def test_more_shares_than_t_reconstruct_from_the_lowest_t() -> None:
    rng = np.random.default_rng(0)
    shares = shamir.split(12345, 3, [1, 2, 3, 4, 5], rng)
    shares[5] = (shares[5] + 1) % shamir.PRIME  # a wrong share above the lowest three is never used
    assert shamir.reconstruct(shares, 3) == 12345


def test_a_threshold_one_sharing_hands_everyone_the_secret() -> None:
    assert shamir.split(99, 1, [1, 2, 7], np.random.default_rng(0)) == {1: 99, 2: 99, 7: 99}


def test_the_top_of_the_field_is_a_valid_secret() -> None:
    rng = np.random.default_rng(1)
    secret = shamir.PRIME - 1
    assert shamir.reconstruct(shamir.split(secret, 2, [1, 2], rng), 2) == secret
    assert shamir.reconstruct(shamir.split(0, 2, [1, 2], rng), 2) == 0


@pytest.mark.parametrize(
    ("secret", "t", "xs", "problem"),
    [
        (-1, 1, [1], "the secret must lie in [0, p)"),
        (shamir.PRIME, 1, [1], "the secret must lie in [0, p)"),
        (5, 0, [1, 2], "threshold 0 must lie in [1, 2] for 2 shareholders"),
        (5, 3, [1, 2], "threshold 3 must lie in [1, 2] for 2 shareholders"),
        (5, 1, [1, 1], "x-coordinates must be distinct"),
        (5, 1, [0, 1], "x-coordinates must lie in [1, p)"),
        (5, 1, [shamir.PRIME], "x-coordinates must lie in [1, p)"),
    ],
)
def test_split_refuses(secret, t, xs, problem) -> None:
    with pytest.raises(shamir.ShamirError, match=f"^{__import__('re').escape(problem)}$"):
        shamir.split(secret, t, xs, np.random.default_rng(0))


def test_interpolation_refuses_no_shares_and_values_outside_the_field() -> None:
    with pytest.raises(shamir.ShamirError, match="^no shares to interpolate$"):
        shamir.interpolate_at_zero({})
    with pytest.raises(shamir.ShamirError, match=r"^a share value lies outside \[0, p\)$"):
        shamir.interpolate_at_zero({1: shamir.PRIME})
    with pytest.raises(shamir.ShamirError, match=r"^a share value lies outside \[0, p\)$"):
        shamir.interpolate_at_zero({1: -1})


def test_share_bytes_round_trip_and_refuse_bad_lengths_and_values() -> None:
    for value in (0, 1, 2**256, shamir.PRIME - 1):
        data = shamir.to_bytes(value)
        assert len(data) == shamir.SHARE_BYTES == 33
        assert shamir.from_bytes(data) == value
    with pytest.raises(shamir.ShamirError, match="^a share is 33 bytes, got 32$"):
        shamir.from_bytes(bytes(32))
    with pytest.raises(shamir.ShamirError, match=r"^a share value lies outside \[0, p\)$"):
        shamir.from_bytes(shamir.PRIME.to_bytes(33, "big"))


def test_polynomial_coefficients_are_uniform_in_the_field() -> None:
    """With t = 2 the share of the secret 0 at x = 1 is the polynomial's random coefficient: its low byte
    is uniform (chi-square, 4,000 draws, fixed seed, rejected below p = 0.001) and it reaches above 2^255."""
    rng = np.random.default_rng(3)
    values = [shamir.split(0, 2, [1, 2], rng)[1] for _ in range(4000)]
    assert all(0 <= value < shamir.PRIME for value in values)
    low = np.array([value & 0xFF for value in values])
    counts = np.bincount(low, minlength=256)
    assert chisquare(counts).pvalue > 1e-3
    assert max(values) > 2**255  # the whole field is reached, not only a 256-bit part of it


# ------------------------------------------------------------------ PRG


def test_the_prg_is_a_pure_function_of_its_seed_and_differs_across_seeds() -> None:
    seed = bytes(range(32))
    first = prg.expand(seed, 10, np.uint64)
    assert first.dtype == np.uint64 and first.shape == (10,)
    np.testing.assert_array_equal(first, prg.expand(seed, 10, np.uint64))
    assert not np.array_equal(first, prg.expand(bytes(32), 10, np.uint64))
    # A longer expansion extends a shorter one (one keystream), and 32-bit words read the same bytes.
    np.testing.assert_array_equal(prg.expand(seed, 20, np.uint64)[:10], first)
    np.testing.assert_array_equal(prg.expand(seed, 20, np.uint32).view(np.uint64), first)
    assert prg.expand(seed, 0, np.uint32).shape == (0,)


def test_the_prg_is_chacha20_keystream() -> None:
    """RFC 8439 section 2.4.2's keystream: key 00..1f; with a zero nonce and counter the first block of
    ChaCha20 for key 00..1f starts with these bytes (cross-checked with cryptography's own ChaCha20)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    key = bytes(range(32))
    reference = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor().update(bytes(64))
    assert prg.expand(key, 16, np.uint32).tobytes() == reference


def test_the_prg_refuses_bad_seeds_and_lengths() -> None:
    with pytest.raises(ValueError, match="^a PRG seed is 32 bytes, got 31$"):
        prg.expand(bytes(31), 1, np.uint32)
    with pytest.raises(ValueError, match="^length must be >= 0, got -1$"):
        prg.expand(bytes(32), -1, np.uint32)


# ------------------------------------------------------------------ key agreement and AEAD


def _pair(seed: int = 0) -> tuple[crypto.KeyPair, crypto.KeyPair]:
    rng = np.random.default_rng(seed)
    return crypto.KeyPair.generate(rng), crypto.KeyPair.generate(rng)


def test_agreement_is_symmetric_and_keys_rebuild_from_their_private_bytes() -> None:
    a, b = _pair()
    assert len(a.public) == len(a.private) == crypto.KEY_BYTES
    assert a.agree(b.public) == b.agree(a.public)
    assert crypto.KeyPair(a.private).public == a.public
    assert a.agree(b.public) != a.agree(crypto.KeyPair.generate(np.random.default_rng(9)).public)


def test_derived_keys_differ_by_purpose_and_session() -> None:
    a, b = _pair()
    shared = a.agree(b.public)
    keys = {crypto.derive(shared, purpose, session) for purpose in (b"encrypt", b"mask") for session in (1, 2)}
    assert len(keys) == 4 and all(len(key) == 32 for key in keys)


def test_an_invalid_public_key_is_a_protocol_violation() -> None:
    a, _ = _pair()
    with pytest.raises(ProtocolViolation, match="an advertised X25519 public key is invalid"):
        a.agree(bytes(31))


def test_sealed_shares_open_for_their_pair_and_session_only() -> None:
    a, b = _pair()
    key = crypto.derive(a.agree(b.public), b"encrypt", 5)
    sealed = crypto.seal(key, 5, 3, 8, shamir.PRIME - 1, 17)
    assert len(sealed) == crypto.CIPHERTEXT_BYTES == 90
    assert crypto.open_sealed(key, 5, 3, 8, sealed) == (shamir.PRIME - 1, 17)
    # The opposite direction uses the same key but another nonce: its ciphertext differs.
    assert crypto.seal(key, 5, 8, 3, shamir.PRIME - 1, 17) != sealed
    for session, sender, recipient in ((6, 3, 8), (5, 8, 3), (5, 3, 9), (5, 4, 8)):
        with pytest.raises(ProtocolViolation, match="could not authenticate"):
            crypto.open_sealed(key, session, sender, recipient, sealed)


def test_every_tampered_byte_of_a_sealed_share_pair_is_detected() -> None:
    a, b = _pair()
    key = crypto.derive(a.agree(b.public), b"encrypt", 1)
    sealed = crypto.seal(key, 1, 0, 1, 123, 456)
    for position in range(len(sealed)):
        tampered = bytearray(sealed)
        tampered[position] ^= 0x01
        with pytest.raises(ProtocolViolation, match=r"^user:1 could not authenticate the shares user:0 sealed for it in session 1$"):
            crypto.open_sealed(key, 1, 0, 1, bytes(tampered))
    with pytest.raises(ProtocolViolation):
        crypto.open_sealed(crypto.derive(a.agree(b.public), b"mask", 1), 1, 0, 1, sealed)


# ------------------------------------------------------------------ graphs


def _users(n: int) -> list[Party]:
    return [Party(Role.USER, 3 * index) for index in range(n)]


def test_the_complete_graph_joins_every_pair() -> None:
    users = _users(5)
    neighbours = graph.complete(list(reversed(users)))
    assert list(neighbours) == users
    for party in users:
        assert neighbours[party] == tuple(other for other in users if other != party)


@pytest.mark.parametrize(("n", "k"), [(10, 2), (10, 4), (11, 6), (30, 10), (10, 3), (12, 5)])
def test_the_harary_graph_is_k_regular_symmetric_and_loop_free(n: int, k: int) -> None:
    users = _users(n)
    neighbours = graph.harary(users, k, np.random.default_rng(n + k))
    assert list(neighbours) == users
    for party, found in neighbours.items():
        assert len(found) == k
        assert party not in found
        assert list(found) == sorted(set(found))
        assert all(party in neighbours[other] for other in found)


def test_the_harary_graph_stays_connected_after_k_minus_one_removals() -> None:
    users = _users(12)
    neighbours = graph.harary(users, 4, np.random.default_rng(0))
    for removed in itertools.combinations(users, 3):
        alive = [party for party in users if party not in removed]
        seen, stack = {alive[0]}, [alive[0]]
        while stack:
            for other in neighbours[stack.pop()]:
                if other not in removed and other not in seen:
                    seen.add(other)
                    stack.append(other)
        assert len(seen) == len(alive)


def test_the_harary_graph_depends_on_the_generator_and_degenerates_to_complete() -> None:
    users = _users(16)
    assert graph.harary(users, 4, np.random.default_rng(1)) == graph.harary(users, 4, np.random.default_rng(1))
    assert graph.harary(users, 4, np.random.default_rng(1)) != graph.harary(users, 4, np.random.default_rng(2))
    assert graph.harary(users, 15, np.random.default_rng(1)) == graph.complete(users)
    assert graph.harary(users, 20, np.random.default_rng(1)) == graph.complete(users)
    with pytest.raises(ValueError, match="^the degree must be >= 1, got 0$"):
        graph.harary(users, 0, np.random.default_rng(1))


def test_odd_degree_with_odd_n_gives_degrees_k_or_k_plus_one() -> None:
    neighbours = graph.harary(_users(11), 3, np.random.default_rng(0))
    assert {len(found) for found in neighbours.values()} <= {3, 4}


@pytest.mark.parametrize(("n", "k"), [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4), (16, 8), (17, 10), (200, 16), (1000, 20)])
def test_the_default_degree_is_two_ceil_log2_n_capped_at_n_minus_one(n: int, k: int) -> None:
    assert graph.default_degree(n) == k
