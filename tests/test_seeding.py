"""Seed derivation: a stream's generator is a function of (seed, stream, ids) alone."""

from __future__ import annotations

import numpy as np
import pytest

from fedrecsim.seeding import Stream, StreamKey, generator


def test_equal_ids_give_equal_streams_and_any_difference_another() -> None:
    first = generator(7, Stream.LINK, 0, 5, 3, 9).random(4)
    assert np.array_equal(first, generator(7, Stream.LINK, 0, 5, 3, 9).random(4))
    others = [
        generator(8, Stream.LINK, 0, 5, 3, 9), generator(7, Stream.ACTOR, 0, 5, 3, 9),
        generator(7, Stream.LINK, 0, 5, 3, 8), generator(7, Stream.LINK, 0, 5, 3), generator(7, Stream.LINK, 0, 5, 3, 9, 0),
    ]
    assert all(not np.array_equal(first, other.random(4)) for other in others)


def test_a_key_gives_numpy_the_words_it_asks_for() -> None:
    key = StreamKey(7, Stream.DATA, (1, 2))
    assert key.generate_state(4, np.uint64).dtype == np.uint64 and key.generate_state(4, np.uint64).shape == (4,)
    assert np.array_equal(key.generate_state(2, np.uint64).view(np.uint32), key.generate_state(4, np.uint32))


def test_streams_are_uniform() -> None:
    # 1000 streams' first draws: a Kolmogorov-Smirnov test at the 0.1% level would reject a bad mixer.
    from scipy import stats

    firsts = [generator(3, Stream.ACTOR, 0, index).random() for index in range(1000)]
    assert stats.kstest(firsts, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("ids", [(-1,), (1 << 64,)])
def test_ids_outside_64_bits_are_refused(ids: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="2\\*\\*64"):
        generator(0, Stream.ACTOR, *ids)


@pytest.mark.parametrize("ids", [(7,), (0, 7), (7, 7)])
def test_ids_that_agree_in_their_low_32_bits_give_different_streams(ids: tuple[int, ...]) -> None:
    high = tuple(word + (1 << 32) for word in ids)
    assert not np.array_equal(generator(7, Stream.ACTOR, *ids).random(4), generator(7, Stream.ACTOR, *high).random(4))


def test_a_seed_beyond_32_bits_is_not_truncated() -> None:
    assert not np.array_equal(generator(2**32 + 7, Stream.DATA).random(4), generator(7, Stream.DATA).random(4))
    assert not np.array_equal(generator(2**63 + 7, Stream.DATA).random(4), generator(7, Stream.DATA).random(4))
