"""The DP-MF message set (Hua, Xia and Zhong, IJCAI 2015) -- the protocol's sequence diagram in code.

S1, trusted recommender (Sec. 4.1)::

    user        -> recommender  dpmf.ratings               on (re)joining: the user's ratings, in the clear

S2, untrusted recommender, static users (Sec. 4.2)::

    user        -> recommender  dpmf.item_request          "send me v_j of these items" (after joining and
                                                           after every contribution)
    recommender -> user         dpmf.noise_setup           once, before iteration 1: H_j ~ Exp(1)^d and k_j
                                                           for each rated item (eq. (12))
  each iteration t:
    recommender -> third party  dpmf.roster                who was served in iteration t, collect until when
    recommender -> user         dpmf.item_vectors          v_j(t) of the requested items, the masks psi (or
                                                           a seed for them) and k'_j per item
    user        -> third party  dpmf.contribution          phi = grad + eta-piece + rho~ + psi  (mod P)
    third party -> recommender  dpmf.aggregate             per item: sum of phi (mod P), and who contributed

S3, untrusted recommender, dynamic users ("Further Practical Consideration") -- S2's iteration, with the
eta-pieces replaced by pieces of tau^_j that the recommender hands out, after an initialization phase::

    recommender -> third party  dpmf.roster                round 0, attempt a: who pre-shares noise
    recommender -> user         dpmf.presharing_request    attempt a, for the items assigned to the user:
                                                           H_j, k, beta
    user        -> third party  dpmf.presharing_share      attempt a: tau = eta-piece + beta  (mod P)
    third party -> recommender  dpmf.presharing_aggregate  attempt a: tau~ = alpha + sum tau  (mod P), with
                                                           a fresh alpha_j, and who shared
  an attempt leaves some items short of k pieces when sharers leave or answer late; those items are
  pre-shared again from scratch in attempt a + 1 (before iteration 1, or before a later iteration).
  each iteration: as S2, where item_vectors also carries the user's pieces of tau^_j and the third party
  subtracts alpha_j before it forwards each item's sum.

The ``naive`` variant of S2 (the difference attack of eq. (11)) replaces the contribution::

    user        -> recommender  dpmf.naive_contribution    grad + eta-piece, unmasked, straight to the recommender

Ring elements (masks, noise pieces, masked values, and the item vectors, which travel in the same fixed
point) are carried as ``uint32`` words: an element of Z_{2^32} is one word, an element of Z_{2^64} its two
little-endian halves, so a row of d elements is ``d * ring_bits / 32`` words. One message set thus serves
both ring widths and a 32-bit ring really costs 4 bytes per value on the wire (the paper's communication
figures assume 32-bit values). The ring width itself is a public parameter of the run, like d.

Who learns what (the paper's design, recorded in the run's ``privacy`` section): the recommender learns
each user's rated-item set from its item requests; the third party learns each contributor's rated-item
set from the items of its contribution. Neither sees an unmasked per-user value.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import lt as _lt

import numpy as np

from ...network.party import Party
from ...network.wire import Array, message


def _check_items(items: np.ndarray) -> None:
    # Strictly increasing from a non-negative first item: sorted, unique and non-negative in one pass.
    # A user's few items are checked as a list, pairwise by `operator.lt` in C (numpy's per-call cost
    # dominates below a few dozen).
    if len(items) <= _SMALL:
        listed = items.tolist()
        if listed and (listed[0] < 0 or not all(map(_lt, listed, listed[1:]))):
            raise ValueError("items must be non-negative, sorted and unique")
    elif items[0] < 0 or bool((items[1:] <= items[:-1]).any()):
        raise ValueError("items must be non-negative, sorted and unique")


_SMALL = 32


def _check_attempt(attempt: int) -> None:
    if attempt < 1:
        raise ValueError("pre-sharing attempts count from 1")


def _check_iteration(round_index: int) -> None:
    if round_index < 1:
        raise ValueError("iterations count from 1")


def _check_rows(name: str, array: np.ndarray, rows: int) -> None:
    # ``len`` is the first axis' length: every array checked here has at least one dimension.
    if len(array) != rows:
        raise ValueError(f"{name} has {len(array)} rows for {rows} items")


@message("dpmf.ratings")
@dataclass(frozen=True)
class RatingsUpload:
    """S1: the user's ratings ``values`` of ``items`` (sorted, unique), for the trusted recommender."""

    items: Array("int32", ndim=1)
    values: Array("float64", ndim=1)

    def validate(self) -> None:
        _check_items(self.items)
        _check_rows("values", self.values, self.items.size)


@message("dpmf.item_request")
@dataclass(frozen=True)
class ItemRequest:
    """Serve me in an iteration: send the current vectors of ``items`` (my rated items, sorted, unique)."""

    items: Array("int32", ndim=1)

    def validate(self) -> None:
        _check_items(self.items)


@message("dpmf.noise_setup")
@dataclass(frozen=True)
class NoiseSetup:
    """S2, before iteration 1: ``h[r]`` = H_j ~ Exp(1)^d and ``raters[r]`` = k_j for the r-th requested item."""

    h: Array("float64", ndim=2)
    raters: Array("int32", ndim=1)

    def validate(self) -> None:
        _check_rows("h", self.h, self.raters.size)
        if np.any(self.h < 0):
            raise ValueError("H must be >= 0 (Exp(1) draws)")
        if np.any(self.raters < 1):
            raise ValueError("every item has at least one rater")


@message("dpmf.presharing_request")
@dataclass(frozen=True)
class PresharingRequest:
    """S3 pre-sharing ``attempt``: pre-share noise for ``items``: H_j, the number of sharers k_j, the masks beta_j."""

    attempt: int
    items: Array("int32", ndim=1)
    h: Array("float64", ndim=2)
    sharers: Array("int32", ndim=1)
    beta: Array("uint32", ndim=2)

    def validate(self) -> None:
        _check_attempt(self.attempt)
        _check_items(self.items)
        _check_rows("h", self.h, self.items.size)
        _check_rows("sharers", self.sharers, self.items.size)
        _check_rows("beta", self.beta, self.items.size)
        if np.any(self.h < 0):
            raise ValueError("H must be >= 0 (Exp(1) draws)")
        if np.any(self.sharers < 1):
            raise ValueError("every item has at least one sharer")


@message("dpmf.presharing_share")
@dataclass(frozen=True)
class PresharingShare:
    """S3 pre-sharing ``attempt``: tau_j = eta-piece_j + beta_j (mod P) for each of ``items``."""

    attempt: int
    items: Array("int32", ndim=1)
    tau: Array("uint32", ndim=2)

    def validate(self) -> None:
        _check_attempt(self.attempt)
        _check_items(self.items)
        _check_rows("tau", self.tau, self.items.size)


@message("dpmf.roster")
@dataclass(frozen=True)
class Roster:
    """The users asked to send to the third party in iteration ``round`` (0: S3 pre-sharing ``attempt``).

    The third party forwards what it collected once every listed user answered or at ``collect_until``
    (virtual seconds), whichever comes first. ``attempt`` is >= 1 exactly when ``round`` is 0.
    """

    round: int
    parties: tuple[Party, ...]
    collect_until: float
    attempt: int = 0

    def validate(self) -> None:
        if self.round < 0:
            raise ValueError("round must be >= 0")
        if (self.round == 0) != (self.attempt >= 1) or self.attempt < 0:
            raise ValueError("a pre-sharing roster (round 0) has an attempt >= 1, an iteration's has attempt 0")
        if list(self.parties) != sorted(set(self.parties)):
            raise ValueError("parties must be sorted and unique")


@message("dpmf.presharing_aggregate")
@dataclass(frozen=True)
class PresharingAggregate:
    """S3 pre-sharing ``attempt``: tau~_j = alpha_j + sum of the tau_j received (mod P); ``contributors`` sent them.

    alpha_j is drawn afresh for every attempt that covers item j, so the sums of two attempts for one item
    are independently masked.
    """

    attempt: int
    items: Array("int32", ndim=1)
    tau_tilde: Array("uint32", ndim=2)
    contributors: tuple[Party, ...]

    def validate(self) -> None:
        _check_attempt(self.attempt)
        _check_items(self.items)
        _check_rows("tau_tilde", self.tau_tilde, self.items.size)


@message("dpmf.item_vectors")
@dataclass(frozen=True)
class ItemVectors:
    """Iteration ``round``: what the recommender hands a served user, row r of each array for the r-th
    requested item.

    ``words[p]`` is the p-th plane of ring words (module docstring), in this order:

    ============  ===========  ======================================================================
    planes        mask_seed    the planes
    ============  ===========  ======================================================================
    1             None         v_j(t) (fixed point): the naive variant, which masks nothing
    1             16 bytes     v_j(t); the masks psi are the seed's expansion (`ringops.expand_masks`)
    2             None         v_j(t), psi_j
    2             16 bytes     v_j(t), the user's pieces of tau^_j (S3); psi from the seed
    3             None         v_j(t), psi_j, the user's pieces of tau^_j (S3)
    ============  ===========  ======================================================================

    (S3 always masks: a plane after v_j without a seed is psi_j.) ``counts[0]`` is k'_j, the number of
    users served for the item in this iteration (the rho~ pieces are drawn so that k'_j of them sum to
    the Laplace scale); S3 with the normalized step adds ``counts[1]``: k_j >= k'_j, the raters of the
    item the recommender knows of; the user weights its gradient and rho~ by k_j / k'_j (see
    `fedrecsim.protocols.dpmf.protocol`). `vectors`, `masks`, `eta_pieces`, `raters` and `known_raters`
    read the planes by this table (None for one the message does not carry); `of` builds a message from
    them.

    One array per dtype, not one per quantity: each array costs its receiver a header read and a view,
    its sender a header (W3 carries a million of these messages per thousand iterations). Both arrays
    are declared ``aligned=False`` (`fedrecsim.network.wire.ArraySpec`): the user only streams through
    them -- word views, ``astype`` and elementwise ufuncs (`PrivateUser._contribute`), never a matrix
    product -- so the network hands it read-only views of the message's bytes, never a copy, wherever
    the envelope's head leaves them.
    """

    round: int
    words: Array("uint32", ndim=3, aligned=False)
    counts: Array("int32", ndim=2, aligned=False)
    mask_seed: bytes | None = None

    @classmethod
    def of(
        cls,
        round: int,  # noqa: A002 -- the field's name
        vectors: np.ndarray,
        raters: np.ndarray,
        masks: np.ndarray | None = None,
        mask_seed: bytes | None = None,
        eta_pieces: np.ndarray | None = None,
        known_raters: np.ndarray | None = None,
    ) -> ItemVectors:
        """The message carrying these parts (each ``None`` when not carried), in the planes of the class
        docstring's table. ValueError for masks and a seed both, for tau^ pieces with neither (only S3
        carries them, and S3 always masks), or for a part whose shape is not its first's."""
        if masks is not None and mask_seed is not None:
            raise ValueError("masks come explicitly or as a seed, not both")
        if eta_pieces is not None and masks is None and mask_seed is None:
            raise ValueError("pieces of tau^ come with masks or a mask seed (S3 always masks)")
        planes = [vectors, *(plane for plane in (masks, eta_pieces) if plane is not None)]
        counts = [raters, *(() if known_raters is None else (known_raters,))]
        for name, parts in (("words", planes), ("counts", counts)):
            shapes = {np.shape(part) for part in parts}
            if len(shapes) > 1:
                raise ValueError(f"the {name} planes have shapes {sorted(shapes)}, not one")
        return cls(round, np.stack(planes), np.stack(counts), mask_seed)

    @property
    def vectors(self) -> np.ndarray:
        """v_j(t) of the requested items, in ring words."""
        return self.words[0]

    @property
    def _masks_explicit(self) -> bool:
        """Whether psi_j is plane 1: no seed stands for it and v_j is not alone (the class docstring's table)."""
        return self.mask_seed is None and len(self.words) > 1

    @property
    def masks(self) -> np.ndarray | None:
        """psi_j in ring words, when they travel explicitly."""
        return self.words[1] if self._masks_explicit else None

    @property
    def eta_pieces(self) -> np.ndarray | None:
        """The user's pieces of tau^_j (S3) in ring words."""
        words = self.words
        return words[-1] if len(words) == 2 + self._masks_explicit else None

    @property
    def raters(self) -> np.ndarray:
        """k'_j: the users served for each item in this iteration."""
        return self.counts[0]

    @property
    def known_raters(self) -> np.ndarray | None:
        """k_j: the raters of each item the recommender knows of (S3, normalized step)."""
        counts = self.counts
        return counts[1] if len(counts) == 2 else None

    def validate(self) -> None:
        if self.round < 1:
            raise ValueError("iterations count from 1")
        words, counts, mask_seed = self.words, self.counts, self.mask_seed
        planes, rows, _ = words.shape
        if mask_seed is not None:
            if len(mask_seed) != 16:
                raise ValueError("a mask seed is 16 bytes")
            if planes > 2:
                raise ValueError(f"with a mask seed, item vectors carry 1 or 2 planes of words, not {planes}")
        if planes < 1 or planes > 3:
            raise ValueError(f"item vectors carry 1 to 3 planes of words, not {planes}")
        kinds, counted = counts.shape
        if kinds < 1 or kinds > 2:
            raise ValueError(f"item vectors carry 1 or 2 rows of counts (k'_j, then k_j), not {kinds}")
        if counted != rows:
            raise ValueError(f"counts has {counted} columns for {rows} items")
        # A user's few items are compared as lists: numpy's per-call cost dominates below a few dozen.
        if rows <= _SMALL:
            listed = counts.tolist()
            served = listed[0]
            if rows and min(served) < 1:
                raise ValueError("every served item has at least one rater")
            if kinds == 2 and any(map(_lt, listed[1], served)):
                raise ValueError("an item's known raters k_j cannot be fewer than its served raters k'_j")
        else:
            served = counts[0]
            if served.min() < 1:
                raise ValueError("every served item has at least one rater")
            if kinds == 2 and bool((counts[1] < served).any()):
                raise ValueError("an item's known raters k_j cannot be fewer than its served raters k'_j")


@message("dpmf.contribution")
@dataclass(frozen=True)
class Contribution:
    """Iteration ``round``: phi_j = grad_j + noise_j + rho~_j + psi_j (mod P) for each of ``items``."""

    round: int
    items: Array("int32", ndim=1)
    phi: Array("uint32", ndim=2)

    def validate(self) -> None:
        if self.round < 1:
            raise ValueError("iterations count from 1")
        items, phi = self.items, self.phi
        _check_items(items)
        # `_check_rows` inline, in its words: this runs once for every message a served user sends.
        if len(phi) != len(items):
            raise ValueError(f"phi has {len(phi)} rows for {len(items)} items")


@message("dpmf.aggregate")
@dataclass(frozen=True)
class Aggregate:
    """Iteration ``round``: per item, the sum of the phi received (mod P, minus alpha_j in S3).

    ``contributors`` are the users whose contribution is in the sums -- the report the recommender needs
    to remove exactly their masks (and, in S3, to add back the noise pieces of the users that did not
    answer).
    """

    round: int
    items: Array("int32", ndim=1)
    sums: Array("uint32", ndim=2)
    contributors: tuple[Party, ...]

    def validate(self) -> None:
        _check_iteration(self.round)
        _check_items(self.items)
        _check_rows("sums", self.sums, self.items.size)
        if list(self.contributors) != sorted(set(self.contributors)):
            raise ValueError("contributors must be sorted and unique")


@message("dpmf.naive_contribution")
@dataclass(frozen=True)
class NaiveContribution:
    """The naive variant, iteration ``round``: grad_j + eta-piece_j (mod P), no rho~, no mask, no third party."""

    round: int
    values: Array("uint32", ndim=2)

    def validate(self) -> None:
        _check_iteration(self.round)


__all__ = [
    "Aggregate",
    "Contribution",
    "ItemRequest",
    "ItemVectors",
    "NaiveContribution",
    "NoiseSetup",
    "PresharingAggregate",
    "PresharingRequest",
    "PresharingShare",
    "RatingsUpload",
    "Roster",
]
