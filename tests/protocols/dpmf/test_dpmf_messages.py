"""Every DP-MF message refuses what it must not carry, with the exact text a rejection records.

A message is checked when it is encoded (and again when decoded): its fields' dtypes, dimensions and
finiteness by the wire, the relations between fields by its ``validate`` -- rows that match the items,
items sorted, unique and non-negative, Exp(1) draws that are >= 0, at least one rater or sharer per item,
known raters k_j >= served raters k'_j, masks explicit or seeded but not both, 16-byte seeds, rosters
and contributor lists sorted. The boundary values (0, 1, the 32/33-item switch of the list path) pass or
fail as stated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fedrecsim.errors import WireError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import decode, decode_trusted, encode
from fedrecsim.protocols.dpmf.messages import (
    Aggregate,
    Contribution,
    ItemRequest,
    ItemVectors,
    NaiveContribution,
    NoiseSetup,
    PresharingAggregate,
    PresharingRequest,
    PresharingShare,
    RatingsUpload,
    Roster,
)

USER = Party(Role.USER, 1)
ITEMS_TEXT = "items must be non-negative, sorted and unique"


def i32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def words(rows: int, width: int = 4) -> np.ndarray:
    return np.zeros((rows, width), dtype=np.uint32)


def planes(count: int, rows: int, width: int = 4) -> np.ndarray:
    return np.zeros((count, rows, width), dtype=np.uint32)


def floats(rows: int, d: int = 2, value: float = 1.0) -> np.ndarray:
    return np.full((rows, d), value)


def _long(first: int, *, swap_at: int | None = None, repeat_at: int | None = None) -> np.ndarray:
    """33 items (one past the list path) from ``first``, optionally out of order or repeated at a position."""
    items = np.arange(first, first + 33, dtype=np.int32)
    if swap_at is not None:
        items[[swap_at, swap_at + 1]] = items[[swap_at + 1, swap_at]]
    if repeat_at is not None:
        items[repeat_at + 1] = items[repeat_at]
    return items


# Each message kind with items: built from its items (rows matching).
WITH_ITEMS: dict[str, Callable[[np.ndarray], object]] = {
    "dpmf.ratings": lambda items: RatingsUpload(items, np.full(items.size, 3.0)),
    "dpmf.item_request": lambda items: ItemRequest(items),
    "dpmf.presharing_request": lambda items: PresharingRequest(
        1, items, floats(items.size), np.ones(items.size, np.int32), words(items.size)),
    "dpmf.presharing_share": lambda items: PresharingShare(1, items, words(items.size)),
    "dpmf.presharing_aggregate": lambda items: PresharingAggregate(1, items, words(items.size), (USER,)),
    "dpmf.contribution": lambda items: Contribution(1, items, words(items.size)),
    "dpmf.aggregate": lambda items: Aggregate(1, items, words(items.size), (USER,)),
}

BAD_ITEMS = {
    "a negative first item": i32(-1, 2),
    "unsorted": i32(3, 1),
    "a repeated item": i32(1, 1),
    "a repeat after the first pair": i32(0, 2, 4, 4),
    "an unsorted pair after the first": i32(0, 2, 5, 4),
    "32 items, the last out of order": np.r_[np.arange(31), 30].astype(np.int32),
    "33 items, a negative first": _long(-1),
    "33 items, unsorted inside": _long(0, swap_at=10),
    "33 items, unsorted at the end": _long(0, swap_at=31),
    "33 items, a repeat inside": _long(0, repeat_at=5),
}

GOOD_ITEMS = {
    "none": i32(),
    "from item 0": i32(0, 1, 7),
    "one item": i32(0),
    "32 items": np.arange(32, dtype=np.int32),
    "33 items from 0": _long(0),
    "33 spread items": (np.arange(33) * 3).astype(np.int32),
}


def _refused(body: object) -> str:
    with pytest.raises(WireError) as caught:
        encode(SERVER, USER, 0.0, body)
    return str(caught.value)


@pytest.mark.parametrize("kind", WITH_ITEMS)
@pytest.mark.parametrize("case", BAD_ITEMS)
def test_items_that_are_negative_unsorted_or_repeated_are_refused(kind: str, case: str) -> None:
    assert _refused(WITH_ITEMS[kind](BAD_ITEMS[case])) == f"{kind}: {ITEMS_TEXT}"


@pytest.mark.parametrize("kind", WITH_ITEMS)
@pytest.mark.parametrize("case", GOOD_ITEMS)
def test_sorted_unique_non_negative_items_pass(kind: str, case: str) -> None:
    body = WITH_ITEMS[kind](GOOD_ITEMS[case])
    body.validate()
    assert encode(SERVER, USER, 0.0, body)


REFUSED: dict[str, tuple[Callable[[], object], str]] = {
    "ratings: values for other rows": (
        lambda: RatingsUpload(i32(0, 1), np.ones(3)), "dpmf.ratings: values has 3 rows for 2 items"),
    "noise_setup: H rows": (
        lambda: NoiseSetup(floats(3), i32(1, 1)), "dpmf.noise_setup: h has 3 rows for 2 items"),
    "noise_setup: negative H": (
        lambda: NoiseSetup(np.array([[0.0, 1.0], [-0.5, 2.0]]), i32(1, 1)), "dpmf.noise_setup: H must be >= 0 (Exp(1) draws)"),
    "noise_setup: no rater": (
        lambda: NoiseSetup(floats(2), i32(1, 0)), "dpmf.noise_setup: every item has at least one rater"),
    "noise_setup: NaN H": (
        lambda: NoiseSetup(floats(2, value=np.nan), i32(1, 1)), None),
    "noise_setup: float raters": (
        lambda: NoiseSetup(floats(2), np.ones(2)), None),
    "presharing_request: attempt 0": (
        lambda: PresharingRequest(0, i32(0), floats(1), i32(1), words(1)), "dpmf.presharing_request: pre-sharing attempts count from 1"),
    "presharing_request: H rows": (
        lambda: PresharingRequest(1, i32(0, 1), floats(1), i32(1, 1), words(2)), "dpmf.presharing_request: h has 1 rows for 2 items"),
    "presharing_request: sharers rows": (
        lambda: PresharingRequest(1, i32(0, 1), floats(2), i32(1), words(2)), "dpmf.presharing_request: sharers has 1 rows for 2 items"),
    "presharing_request: beta rows": (
        lambda: PresharingRequest(1, i32(0, 1), floats(2), i32(1, 1), words(3)), "dpmf.presharing_request: beta has 3 rows for 2 items"),
    "presharing_request: negative H": (
        lambda: PresharingRequest(1, i32(0, 1), np.array([[0.0, 0.0], [1.0, -1e-9]]), i32(1, 1), words(2)),
        "dpmf.presharing_request: H must be >= 0 (Exp(1) draws)"),
    "presharing_request: no sharer": (
        lambda: PresharingRequest(1, i32(0, 1), floats(2), i32(0, 1), words(2)), "dpmf.presharing_request: every item has at least one sharer"),
    "presharing_share: attempt 0": (
        lambda: PresharingShare(0, i32(0), words(1)), "dpmf.presharing_share: pre-sharing attempts count from 1"),
    "presharing_share: tau rows": (
        lambda: PresharingShare(1, i32(0), words(2)), "dpmf.presharing_share: tau has 2 rows for 1 items"),
    "presharing_aggregate: attempt 0": (
        lambda: PresharingAggregate(0, i32(0), words(1), ()), "dpmf.presharing_aggregate: pre-sharing attempts count from 1"),
    "presharing_aggregate: tau~ rows": (
        lambda: PresharingAggregate(1, i32(0), words(0), ()), "dpmf.presharing_aggregate: tau_tilde has 0 rows for 1 items"),
    "roster: negative round": (
        lambda: Roster(-1, (), 1.0), "dpmf.roster: round must be >= 0"),
    "roster: round 0 without an attempt": (
        lambda: Roster(0, (), 1.0), "dpmf.roster: a pre-sharing roster (round 0) has an attempt >= 1, an iteration's has attempt 0"),
    "roster: an iteration with an attempt": (
        lambda: Roster(2, (), 1.0, 1), "dpmf.roster: a pre-sharing roster (round 0) has an attempt >= 1, an iteration's has attempt 0"),
    "roster: a negative attempt": (
        lambda: Roster(2, (), 1.0, -1), "dpmf.roster: a pre-sharing roster (round 0) has an attempt >= 1, an iteration's has attempt 0"),
    "roster: unsorted parties": (
        lambda: Roster(1, (Party(Role.USER, 2), USER), 1.0), "dpmf.roster: parties must be sorted and unique"),
    "roster: a repeated party": (
        lambda: Roster(1, (USER, USER), 1.0), "dpmf.roster: parties must be sorted and unique"),
    "item_vectors: iteration 0": (
        lambda: ItemVectors.of(0, words(1), i32(1)), "dpmf.item_vectors: iterations count from 1"),
    "contribution: iteration 0": (
        lambda: Contribution(0, i32(0), words(1)), "dpmf.contribution: iterations count from 1"),
    "aggregate: iteration 0": (
        lambda: Aggregate(0, i32(0), words(1), ()), "dpmf.aggregate: iterations count from 1"),
    "naive_contribution: a negative iteration": (
        lambda: NaiveContribution(-1, words(1)), "dpmf.naive_contribution: iterations count from 1"),
    "item_vectors: counts for other rows": (
        lambda: ItemVectors.of(1, words(2), i32(1)), "dpmf.item_vectors: counts has 1 columns for 2 items"),
    "item_vectors: no rater": (
        lambda: ItemVectors.of(1, words(2), i32(2, 0)), "dpmf.item_vectors: every served item has at least one rater"),
    "item_vectors: no rater, 33 rows": (
        lambda: ItemVectors.of(1, words(33), np.r_[np.ones(32), 0].astype(np.int32)), "dpmf.item_vectors: every served item has at least one rater"),
    "item_vectors: 3 rows of counts": (
        lambda: ItemVectors(1, planes(1, 2), np.ones((3, 2), np.int32)),
        "dpmf.item_vectors: item vectors carry 1 or 2 rows of counts (k'_j, then k_j), not 3"),
    "item_vectors: no counts": (
        lambda: ItemVectors(1, planes(1, 2), np.ones((0, 2), np.int32)),
        "dpmf.item_vectors: item vectors carry 1 or 2 rows of counts (k'_j, then k_j), not 0"),
    "item_vectors: fewer known than served": (
        lambda: ItemVectors.of(1, words(2), i32(2, 3), known_raters=i32(3, 2)),
        "dpmf.item_vectors: an item's known raters k_j cannot be fewer than its served raters k'_j"),
    "item_vectors: fewer known than served, 33 rows": (
        lambda: ItemVectors.of(1, words(33), np.full(33, 2, np.int32), known_raters=np.r_[np.full(32, 2), 1].astype(np.int32)),
        "dpmf.item_vectors: an item's known raters k_j cannot be fewer than its served raters k'_j"),
    "item_vectors: 3 planes and a seed": (
        lambda: ItemVectors(1, planes(3, 2), i32(1, 1)[None], bytes(16)),
        "dpmf.item_vectors: with a mask seed, item vectors carry 1 or 2 planes of words, not 3"),
    "item_vectors: 4 planes": (
        lambda: ItemVectors(1, planes(4, 2), i32(1, 1)[None]), "dpmf.item_vectors: item vectors carry 1 to 3 planes of words, not 4"),
    "item_vectors: no planes": (
        lambda: ItemVectors(1, planes(0, 2), i32(1, 1)[None]), "dpmf.item_vectors: item vectors carry 1 to 3 planes of words, not 0"),
    "item_vectors: a 15-byte seed": (
        lambda: ItemVectors.of(1, words(2), i32(1, 1), mask_seed=bytes(15)), "dpmf.item_vectors: a mask seed is 16 bytes"),
    "item_vectors: a 17-byte seed": (
        lambda: ItemVectors.of(1, words(2), i32(1, 1), mask_seed=bytes(17)), "dpmf.item_vectors: a mask seed is 16 bytes"),
    "item_vectors: int64 raters": (
        lambda: ItemVectors.of(1, words(2), np.ones(2, np.int64)), None),
    "contribution: phi rows": (
        lambda: Contribution(1, i32(0, 3), words(1)), "dpmf.contribution: phi has 1 rows for 2 items"),
    "contribution: 1-d phi": (
        lambda: Contribution(1, i32(0), np.zeros(4, np.uint32)), None),
    "aggregate: sums rows": (
        lambda: Aggregate(1, i32(0, 3), words(3), ()), "dpmf.aggregate: sums has 3 rows for 2 items"),
    "aggregate: unsorted contributors": (
        lambda: Aggregate(1, i32(0), words(1), (Party(Role.USER, 2), USER)), "dpmf.aggregate: contributors must be sorted and unique"),
    "aggregate: a repeated contributor": (
        lambda: Aggregate(1, i32(0), words(1), (USER, USER)), "dpmf.aggregate: contributors must be sorted and unique"),
    "naive_contribution: int words": (
        lambda: NaiveContribution(1, np.zeros((1, 4), np.int32)), None),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_malformed_message_is_refused_with_what_is_wrong(case: str) -> None:
    build, text = REFUSED[case]
    problem = _refused(build())
    if text is not None:
        assert problem == text
    else:  # the wire's own check of a field (dtype, dimensions, NaN): it names the field
        field = {"NaN H": ".h", "float raters": ".raters", "int64 raters": ".counts", "1-d phi": ".phi", "int words": ".values"}
        assert any(name in problem for suffix, name in field.items() if case.endswith(suffix)), problem


ACCEPTED: dict[str, Callable[[], object]] = {
    "noise_setup: H of zeros, one rater": lambda: NoiseSetup(np.zeros((2, 2)), i32(1, 1)),
    "noise_setup: no items": lambda: NoiseSetup(np.zeros((0, 2)), i32()),
    "presharing_request: attempt 1, H of zeros, one sharer": lambda: PresharingRequest(1, i32(0, 1), np.zeros((2, 2)), i32(1, 1), words(2)),
    "roster: an iteration": lambda: Roster(1, (USER, Party(Role.USER, 2)), 1.0),
    "roster: round 0, attempt 1": lambda: Roster(0, (), 1.0, 1),
    "item_vectors: one rater each": lambda: ItemVectors.of(1, words(2), i32(1, 1)),
    "item_vectors: no rows": lambda: ItemVectors.of(1, words(0), i32(), known_raters=i32()),
    "item_vectors: known equal to served": lambda: ItemVectors.of(1, words(2), i32(2, 3), known_raters=i32(2, 3)),
    "item_vectors: 33 rows, known equal to served": lambda: ItemVectors.of(
        1, words(33), np.ones(33, np.int32), known_raters=np.ones(33, np.int32)),
    "item_vectors: explicit masks and eta pieces": lambda: ItemVectors.of(1, words(2), i32(1, 1), masks=words(2), eta_pieces=words(2)),
    "item_vectors: a 16-byte seed": lambda: ItemVectors.of(1, words(2), i32(1, 1), mask_seed=bytes(16)),
    "aggregate: sorted contributors": lambda: Aggregate(1, i32(0), words(1), (USER, Party(Role.USER, 2))),
    "naive_contribution: iteration 1": lambda: NaiveContribution(1, words(1)),
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_a_well_formed_message_at_the_boundaries_passes(case: str) -> None:
    body = ACCEPTED[case]()
    body.validate()
    assert encode(SERVER, USER, 0.0, body)


@pytest.mark.parametrize("user", [1, 200, 1000], ids=["1-byte index", "2-byte index", "3-byte index"])
def test_item_vectors_reach_their_user_as_views_of_the_message_aligned_or_not(user: int) -> None:
    """The user only streams through an item_vectors' arrays (declared ``aligned=False``): each is a read-only
    view of the delivered bytes, never a copy, wherever the envelope's head (its destination's index takes 1 to 3
    bytes) leaves its elements -- and holds the values sent."""
    rows = np.arange(3 * 100, dtype=np.uint32).reshape(3, 100)
    sent = ItemVectors.of(2, rows, i32(1, 2, 3), rows + 1, None, rows + 2, i32(4, 5, 6))
    data = encode(SERVER, Party(Role.USER, user), 1.5, sent)
    body = decode_trusted(data).body
    assert not (body.words.flags.aligned and body.counts.flags.aligned)
    assert body.words.base is data and body.counts.base is data
    for name, whole in (("words", data), ("counts", data), ("vectors", body.words), ("masks", body.words),
                        ("eta_pieces", body.words), ("raters", body.counts), ("known_raters", body.counts)):
        array = getattr(body, name)
        assert array.base is whole and not array.flags.writeable, name
        np.testing.assert_array_equal(array, getattr(sent, name))


def _parts(round_index: int = 1, *, masks: bool = False, seed: bool = False, eta: bool = False, known: bool = False) -> dict:
    rows = np.arange(2 * 4, dtype=np.uint32).reshape(2, 4)
    return {
        "round": round_index, "vectors": rows, "raters": i32(1, 2), "masks": rows + 10 if masks else None,
        "mask_seed": bytes(range(16)) if seed else None, "eta_pieces": rows + 20 if eta else None,
        "known_raters": i32(3, 4) if known else None,
    }


@pytest.mark.parametrize("parts", [
    _parts(), _parts(seed=True), _parts(masks=True), _parts(seed=True, eta=True, known=True), _parts(masks=True, eta=True),
    _parts(masks=True, eta=True, known=True),
], ids=["naive", "S2 seeded", "S2 explicit", "S3 seeded", "S3 explicit", "S3 explicit normalized"])
def test_item_vectors_give_back_the_parts_they_were_built_of_after_the_wire(parts: dict) -> None:
    """Every row of the planes table (`ItemVectors`): each part reads back as built, ``None`` where absent,
    through strict decoding too."""
    body = ItemVectors.of(**parts)
    received = decode(encode(SERVER, USER, 0.0, body)).body
    for message in (body, received):
        for name, part in parts.items():
            if isinstance(part, np.ndarray):
                np.testing.assert_array_equal(getattr(message, name), part)
            else:
                assert getattr(message, name) == part, name


@pytest.mark.parametrize(("parts", "problem"), [
    (_parts(masks=True, seed=True), "masks come explicitly or as a seed, not both"),
    (_parts(eta=True), "pieces of tau^ come with masks or a mask seed (S3 always masks)"),
    ({**_parts(masks=True), "masks": words(2, 2)}, "the words planes have shapes [(2, 2), (2, 4)], not one"),
    ({**_parts(known=True), "known_raters": i32(3)}, "the counts planes have shapes [(1,), (2,)], not one"),
], ids=["masks and a seed", "tau^ pieces unmasked", "masks of another shape", "known raters of another length"])
def test_item_vectors_are_not_built_of_parts_no_table_row_holds(parts: dict, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        ItemVectors.of(**parts)
    assert str(caught.value) == problem
