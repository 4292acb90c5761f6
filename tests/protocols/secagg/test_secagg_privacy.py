"""What the server sees of one user's masked input is uniform, even in the worst cases.

Three users 0, 1, 2 of one session; user 1's input is a fixed, far from uniform vector. Over 300
sessions (fresh keys and seeds from a fixed generator) we collect, as bytes, 300 x 64 words of each view
below and test them for uniformity over the 256 byte values with a chi-square test: expected 300 x 64 x 4
/ 256 = 300 per value; a view is rejected as non-uniform below p = 0.001 (the seed is fixed, so the
verdict is too; under the mutations listed each statistic is in the tens of thousands, p ~ 0).

- the masked input y_1 itself (the server's view);
- y_1 without its pairwise masks: what the server holds when it has learnt s_1^SK's agreements (a user
  it took for dropped whose y arrived late) -- the self mask alone must hide x_1;
- y_1 without its self mask: what it holds when it learnt b_1 -- the pairwise masks alone must hide x_1;
- the difference of two users' inputs without pairwise masks: self masks must be independent across users.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import chisquare

from fedrecsim.mechanisms.ring import Ring
from fedrecsim.protocols.secagg import prg
from fedrecsim.protocols.secagg.real import RealUser, pairwise_mask

RING = Ring(32, 16)
LENGTH = 64
DRAWS = 300
SESSION = 3


def _views() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2024)
    x = (np.arange(LENGTH, dtype=np.uint32) * 3) % 7  # small and structured: anything but uniform
    views: dict[str, list[np.ndarray]] = {"masked": [], "self_mask_only": [], "pairwise_only": [], "self_masks_differ": []}
    for _ in range(DRAWS):
        users = [RealUser(index, rng, SESSION, RING) for index in range(3)]
        keys = {user.index: user.advertise() for user in users}
        for user in users:
            user.share({peer: keys[peer] for peer in keys if peer != user.index}, 2)
        y = {user.index: user.mask(x, [peer for peer in keys if peer != user.index]) for user in users}
        pairwise = {}
        for user in users:
            total = np.zeros(LENGTH, dtype=np.uint32)
            for peer in keys:
                if peer != user.index:
                    mask = pairwise_mask(user.s, keys[peer][1], SESSION, LENGTH, RING)
                    total = RING.add(total, mask) if peer < user.index else RING.sub(total, mask)
            pairwise[user.index] = total
        self_masked = {index: RING.sub(y[index], pairwise[index]) for index in y}
        views["masked"].append(y[1])
        views["self_mask_only"].append(self_masked[1])
        views["pairwise_only"].append(RING.sub(y[1], prg.expand(users[1].b_seed, LENGTH, np.uint32)))
        views["self_masks_differ"].append(RING.sub(self_masked[1], self_masked[2]))
    return {name: np.concatenate(arrays) for name, arrays in views.items()}


def test_each_view_is_uniform_over_byte_values() -> None:
    # Built here, not at import: mutation testing switches a mutant on only inside a test's call.
    views = _views()
    assert sorted(views) == ["masked", "pairwise_only", "self_mask_only", "self_masks_differ"]
    for view, words in views.items():
        counts = np.bincount(words.view(np.uint8), minlength=256)
        assert counts.sum() == DRAWS * LENGTH * 4
        assert chisquare(counts).pvalue > 1e-3, f"{view}: not uniform"


def test_the_views_are_not_trivially_the_input() -> None:
    """The chi-square tests have power: the structured input itself is rejected outright."""
    x = np.tile((np.arange(LENGTH, dtype=np.uint32) * 3) % 7, DRAWS)
    assert chisquare(np.bincount(x.view(np.uint8), minlength=256)).pvalue < 1e-100
