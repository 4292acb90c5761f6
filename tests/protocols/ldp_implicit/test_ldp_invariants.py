"""ldp_implicit's two invariant monitors, judged on hand-built epochs: each violation counted with its exact
detail, and each boundary where the invariant still holds.

`_check_invariants` receives what the server saw of an epoch (`EpochReport`) and the users' ground truth
(`LDPUser.sent`); the monitors count violations and keep the first details, never raise
(`fedrecsim.invariants`). So each test here asserts the monitor's whole ``report()``: name, checks,
violations and the detail -- the message a violated run prints in ``result.json``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrecsim.invariants import InvariantMonitor
from fedrecsim.models.implicit_mf import ImplicitHyper
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.ldp_implicit.protocol import _check_invariants, _monitors
from fedrecsim.protocols.ldp_implicit.roles import EpochReport, LDPUser, SentReports
from fedrecsim.seeding import Stream, generator

PROXIES = (Party(Role.PROXY, 0), Party(Role.PROXY, 1))
SIZE = 6 * 2
"""M x F = 6 items x 2 factors: report indices lie in [0, 12)."""
ANONYMOUS = "every message the server received was sent by a proxy"
UNALTERED = (
    "the server aggregated only reports users sent that epoch, each at most once (all of them when none was "
    "missing): the proxies strip, split and shuffle, never alter or invent"
)


def _users(*sent: SentReports | None) -> dict[Party, LDPUser]:
    """Real users (user:0, user:1, ...) whose ground truth ``sent`` is given: what the check reads of them."""
    network = Network(Links(0, LinkSpec(Constant(0.01))), Ledger())
    users = {}
    for index, reports in enumerate(sent):
        party = Party(Role.USER, index)
        user = LDPUser(
            party, network, generator(1, Stream.ACTOR, Role.USER.code, index), np.array([index % 6]), np.array([1.0]),
            hyper=ImplicitHyper(d=2, gamma=1e-3, lam=1e-6, alpha=1.0), epsilon=1.0, k=3, proxies=PROXIES,
        )
        user.sent = reports
        users[party] = user
    return users


def _sent(epoch: int, indices: list[int], signs: list[int]) -> SentReports:
    """A user's reports as `LDPUser` records them: int64 indices and int8 signs in {-1, +1}."""
    return SentReports(epoch, np.array(indices, dtype=np.int64), np.array(signs, dtype=np.int8))


def _report(
    epoch: int, indices: list[int], signs: list[int], *, missing: int = 0, silent: int = 0,
    senders: tuple[Party, ...] = PROXIES,
) -> EpochReport:
    """What the server aggregated, as `LDPServer.epoch` returns it: int32 indices and int8 signs in arrival order.

    ``expected`` is set so that ``missing`` reports were awaited and not received.
    """
    received = len(indices)
    return EpochReport(
        epoch, relayed=received + missing, silent_proxies=silent, expected=received + missing, received=received,
        late=0, senders=frozenset(senders), indices=np.array(indices, dtype=np.int32),
        signs=np.array(signs, dtype=np.int8), estimate=None,
    )


def _judge(report: EpochReport, users: dict[Party, LDPUser]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two monitors' reports after judging one epoch: (server_hears_only_proxies, reports_unaltered)."""
    monitors = _monitors()
    _check_invariants(monitors, report, users, SIZE)
    anonymous, unaltered = monitors
    return anonymous.report(), unaltered.report()


def _holds(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "checked": 1, "violations": 0, "detail": description}


def _violated(name: str, detail: str) -> dict[str, Any]:
    return {"name": name, "checked": 1, "violations": 1, "detail": detail}


# Epoch 2's ground truth: user:0 and user:1 report, user:2's last reports are of epoch 1 (it missed epoch 2),
# user:3 never reported. Index 4 is sent twice with opposite signs, index 7 twice with the same sign.
EPOCH_2 = ([0, 4, 7], [1, -1, 1]), ([4, 7, 11], [1, 1, -1])


def _epoch_2_users() -> dict[Party, LDPUser]:
    (first, first_signs), (second, second_signs) = EPOCH_2
    return _users(_sent(2, first, first_signs), _sent(2, second, second_signs), _sent(1, [3, 5, 9], [1, 1, 1]), None)


def test_fresh_monitors_name_and_describe_the_two_promises() -> None:
    anonymous, unaltered = _monitors()
    assert isinstance(anonymous, InvariantMonitor) and isinstance(unaltered, InvariantMonitor)
    assert [anonymous.report(), unaltered.report()] == [
        {"name": "server_hears_only_proxies", "checked": 0, "violations": 0, "detail": ANONYMOUS},
        {"name": "reports_unaltered", "checked": 0, "violations": 0, "detail": UNALTERED},
    ]


def test_every_sent_report_aggregated_once_in_any_order_holds() -> None:
    # The reports of epoch 2 shuffled; user:2's epoch-1 reports are not expected.
    report = _report(2, [11, 4, 7, 0, 7, 4], [-1, -1, 1, 1, 1, 1])
    assert _judge(report, _epoch_2_users()) == (
        _holds("server_hears_only_proxies", ANONYMOUS), _holds("reports_unaltered", UNALTERED),
    )


def test_an_epoch_with_nothing_sent_and_nothing_aggregated_holds() -> None:
    # No user has reports of epoch 3 (user:0's are of epoch 2, user:1 never reported): both sides are empty.
    report = _report(3, [], [], senders=())
    assert _judge(report, _users(_sent(2, [1], [1]), None)) == (
        _holds("server_hears_only_proxies", ANONYMOUS), _holds("reports_unaltered", UNALTERED),
    )
    assert _judge(_report(1, [], [], senders=()), {}) == (
        _holds("server_hears_only_proxies", ANONYMOUS), _holds("reports_unaltered", UNALTERED),
    )


def test_reports_invented_when_no_user_sent_any_are_counted() -> None:
    report = _report(3, [5, 5], [1, -1])
    assert _judge(report, _users(_sent(2, [5], [1]), None))[1] == _violated(
        "reports_unaltered", "epoch 3: 2 reports aggregated, 0 sent, 2 not among those sent"
    )


def test_a_flipped_sign_is_an_altered_report() -> None:
    # user:0's report (0, +1) reaches the server as (0, -1): one report not among those sent, one sent missing.
    report = _report(2, [11, 4, 7, 0, 7, 4], [-1, -1, 1, -1, 1, 1])
    assert _judge(report, _epoch_2_users()) == (
        _holds("server_hears_only_proxies", ANONYMOUS),
        _violated("reports_unaltered", "epoch 2: 6 reports aggregated, 6 sent, 1 not among those sent"),
    )


def test_a_moved_index_is_an_altered_report() -> None:
    # user:1's (11, -1) arrives as (10, -1): index 10 was never sent.
    report = _report(2, [10, 4, 7, 0, 7, 4], [-1, -1, 1, 1, 1, 1])
    assert _judge(report, _epoch_2_users())[1] == _violated(
        "reports_unaltered", "epoch 2: 6 reports aggregated, 6 sent, 1 not among those sent"
    )


def test_a_report_counted_twice_is_a_violation_even_with_reports_missing() -> None:
    # (0, +1) was sent once and aggregated twice; one report is missing, which excuses absences, not extras.
    report = _report(2, [0, 4, 7, 0, 7, 4], [1, -1, 1, 1, 1, 1], missing=1)
    assert _judge(report, _epoch_2_users())[1] == _violated(
        "reports_unaltered", "epoch 2: 6 reports aggregated, 6 sent, 1 not among those sent"
    )


def test_the_altered_count_sums_every_surplus_over_every_entry_and_sign() -> None:
    # Two extra (7, +1), one extra (4, -1) and one (2, +1) never sent, on top of all six sent reports.
    report = _report(2, [11, 4, 7, 0, 7, 4, 7, 7, 4, 2], [-1, -1, 1, 1, 1, 1, 1, 1, -1, 1])
    assert _judge(report, _epoch_2_users())[1] == _violated(
        "reports_unaltered", "epoch 2: 10 reports aggregated, 6 sent, 4 not among those sent"
    )


def test_a_sent_report_absent_while_none_was_missing_is_a_violation() -> None:
    # The server awaited 5 reports and got 5, but users sent 6 in the epoch: one vanished unannounced.
    report = _report(2, [11, 4, 7, 0, 7], [-1, -1, 1, 1, 1])
    assert _judge(report, _epoch_2_users())[1] == _violated(
        "reports_unaltered", "epoch 2: 5 reports aggregated, 6 sent, 0 not among those sent"
    )


def test_a_sent_report_absent_holds_when_one_was_missing() -> None:
    report = _report(2, [11, 4, 7, 0, 7], [-1, -1, 1, 1, 1], missing=1)
    assert _judge(report, _epoch_2_users())[1] == _holds("reports_unaltered", UNALTERED)


def test_a_sent_report_absent_holds_when_a_proxy_was_silent() -> None:
    # A silent proxy's count never arrived, so the server cannot know what it missed: nothing is awaited.
    report = _report(2, [11, 4, 7, 0], [-1, -1, 1, 1], silent=1)
    assert _judge(report, _epoch_2_users())[1] == _holds("reports_unaltered", UNALTERED)
    report = _report(2, [11, 4, 7, 0], [-1, -1, 1, 1], silent=2)
    assert _judge(report, _epoch_2_users())[1] == _holds("reports_unaltered", UNALTERED)


def test_a_silent_proxy_does_not_excuse_an_invented_report() -> None:
    report = _report(2, [11, 4, 3], [-1, -1, 1], silent=1)
    assert _judge(report, _epoch_2_users())[1] == _violated(
        "reports_unaltered", "epoch 2: 3 reports aggregated, 6 sent, 1 not among those sent"
    )


def test_a_message_from_anyone_but_a_proxy_names_the_first_three_senders() -> None:
    senders = (PROXIES[0], Party(Role.USER, 10), Party(Role.USER, 2), Party(Role.THIRD_PARTY, 0), Party(Role.USER, 5))
    report = _report(2, [11, 4, 7, 0, 7, 4], [-1, -1, 1, 1, 1, 1], senders=senders)
    # Parties sort by role name, then index: third_party < user, and user:2 < user:5 < user:10.
    assert _judge(report, _epoch_2_users()) == (
        _violated("server_hears_only_proxies", "epoch 2: the server heard from third_party:0, user:2, user:5"),
        _holds("reports_unaltered", UNALTERED),
    )


def test_a_single_foreign_sender_is_named_alone() -> None:
    report = _report(4, [], [], senders=(SERVER,))
    assert _judge(report, {})[0] == _violated("server_hears_only_proxies", "epoch 4: the server heard from server:0")


def test_the_monitors_count_every_epoch_and_keep_the_first_details() -> None:
    monitors = _monitors()
    users = _epoch_2_users()
    _check_invariants(monitors, _report(2, [11, 4, 7, 0, 7, 4], [-1, -1, 1, 1, 1, 1]), users, SIZE)
    _check_invariants(monitors, _report(2, [1], [1], senders=(Party(Role.USER, 0),)), users, SIZE)
    _check_invariants(monitors, _report(2, [11, 4, 7, 0, 7, 4], [-1, -1, 1, 1, 1, 1]), users, SIZE)
    anonymous, unaltered = monitors
    assert anonymous.report() == {
        "name": "server_hears_only_proxies", "checked": 3, "violations": 1,
        "detail": "epoch 2: the server heard from user:0",
    }
    assert unaltered.report() == {
        "name": "reports_unaltered", "checked": 3, "violations": 1,
        "detail": "epoch 2: 1 reports aggregated, 6 sent, 1 not among those sent",
    }
