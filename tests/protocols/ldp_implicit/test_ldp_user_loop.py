"""An ldp_implicit user's main loop (`LDPUser.resume`), driven message by message on a tiny network.

A user answers each epoch once, with the newest model it holds: a copy of a model the network delivered
twice, or a model a newer one overtook, gets no answer. Its answer is Algorithm 1 on the eq. (5)
gradient for the eq. (4) profile -- exactly k reports, drawn from its own generator, sent in one message
to a proxy it draws uniformly -- and a model that does not fit it (another number of columns than F, or
too few rows for its items) stops the run. A user crashing in an epoch goes silent; one resumed while
computing sends the reply it had prepared once its compute time is over.

Each test plays the proxies itself: it puts models in the user's mailbox and reads the reports that reach
each proxy's mailbox.

The server's side of those reports (`LDPServer.epoch`) is driven the same way, the test playing the
proxies: the server takes each proxy's relayed count of the epoch (a late count of an earlier epoch is not
this epoch's), counts each numbered batch once, sets aside late batches of earlier epochs, stops as soon
as it has every report it expects, and refuses a batch naming an entry outside V. And the proxy between
them (`ShuffleProxy`) follows each user's newest membership announcement, and ends only held pools with
their epoch: a pool still in its wait, or one of the epoch it is relaying, keeps taking reports.
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from fedrecsim.errors import ProtocolViolation
from fedrecsim.mechanisms.randomized_response import ldp_reports
from fedrecsim.models.implicit_mf import ImplicitHyper, confidence, item_gradient, user_factors
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links, Uniform
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.actors.membership import Join, Leave
from fedrecsim.network.wire import Envelope
from fedrecsim.protocols.ldp_implicit.messages import Model, Relayed, ReportBatch, Reports
from fedrecsim.protocols.ldp_implicit.pool import ClosedPool, Fate, Underfull
from fedrecsim.protocols.ldp_implicit.roles import EpochReport, LDPServer, LDPUser, SentReports, ShuffleProxy

USER = Party(Role.USER, 0)
PROXIES = tuple(Party(Role.PROXY, index) for index in range(3))
HYPER = ImplicitHyper(d=3, lam=0.1, alpha=2.0)
ITEMS, VALUES = [1, 4], [1.0, 3.0]  # the user's highest item is 4: V must have at least 5 rows
K, EPSILON, SEED = 6, 1.0, 11


def _network(to_user: LinkSpec | None = None) -> Network:
    """Links of 10 ms; ``to_user``: the proxies' links to the user, if they behave otherwise."""
    by_roles = {(Role.PROXY, Role.USER): to_user} if to_user is not None else {}
    network = Network(Links(1, LinkSpec(Constant(0.01)), by_roles), Ledger())
    for party in (USER, *PROXIES):
        network.attach(party)
    return network


def _user(network: Network, items: list[int] = ITEMS, values: list[float] = VALUES) -> LDPUser:
    return LDPUser(
        USER, network, np.random.default_rng(SEED), items, values, hyper=HYPER, epsilon=EPSILON, k=K,
        proxies=PROXIES,
    )


def _model(epoch: int, rows: int = 6, columns: int = HYPER.d) -> Model:
    return Model(epoch, np.random.default_rng(epoch).normal(0.0, 0.5, (rows, columns)))


def _reports(network: Network) -> list[tuple[int, Reports]]:
    """Every ldp.reports that reached a proxy: (proxy index, body), in proxy order then arrival order."""
    return [
        (proxy.index, envelope.body)
        for proxy in PROXIES
        for envelope in network.mailbox(proxy).take_all(Reports.KIND)
    ]


async def _play(network: Network, user: LDPUser, script, *, resume: bool = False) -> BaseException | None:  # type: ignore[no-untyped-def]
    """Run ``user`` while ``script(send)`` sends it models (``send(model)``, from proxy 0); the error that
    stopped the user, or None (the user is cancelled once the script is over)."""
    stopped: list[BaseException] = []

    async def user_side() -> None:
        try:
            await (user.resume() if resume else user.run())
        except ProtocolViolation as error:
            stopped.append(error)

    def send(model: Model) -> None:
        network.send(PROXIES[0], USER, model)

    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(user_side)
        await script(send)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    return stopped[0] if stopped else None


def _epochs(network: Network) -> list[int]:
    return sorted(body.epoch for _, body in _reports(network))


async def test_a_model_the_network_delivers_twice_is_answered_once(autojump_clock) -> None:
    """Every model is duplicated, each copy with its own latency draw: one answer per epoch all the same."""
    network = _network(LinkSpec(Uniform(0.01, 0.5), duplicate=1.0))
    user = _user(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        for epoch in (1, 2, 3):
            send(_model(epoch))
            await trio.sleep(2.0)

    assert await _play(network, user, script) is None
    assert network.ledger.party(USER)["recv_msgs"] == 6  # every model arrived twice
    assert _epochs(network) == [1, 2, 3]


async def test_the_same_model_arriving_again_after_the_answer_gets_no_second_answer(autojump_clock) -> None:
    network = _network()
    user = _user(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        model = _model(1)
        send(model)
        await trio.sleep(1.0)
        send(model)  # what a duplicating network delivers late
        await trio.sleep(1.0)
        send(_model(2))
        await trio.sleep(1.0)

    assert await _play(network, user, script) is None
    assert _epochs(network) == [1, 2]


@pytest.mark.parametrize("waiting", [2, 3], ids=["two-models", "three-models"])
async def test_of_models_delivered_together_only_the_newest_is_answered(autojump_clock, waiting: int) -> None:
    """Epochs 1..n arrive in one delivery (the user was busy): answering the stale ones would be wasted."""
    network = _network()
    user = _user(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        for epoch in range(1, waiting + 1):
            send(_model(epoch))
        await trio.sleep(1.0)

    assert await _play(network, user, script) is None
    assert _epochs(network) == [waiting]


async def test_an_older_model_arriving_after_a_newer_one_is_ignored_and_the_next_is_answered(autojump_clock) -> None:
    network = _network()
    user = _user(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(_model(2))
        await trio.sleep(1.0)
        send(_model(1))  # overtaken on the way: epoch 2 already answered
        await trio.sleep(1.0)
        send(_model(3))
        await trio.sleep(1.0)

    assert await _play(network, user, script) is None
    assert _epochs(network) == [2, 3]


@pytest.mark.parametrize("rows, columns, accepted", [
    (5, 3, True),  # item 4 is the last row: covered
    (4, 3, False),  # item 4 has no row
    (3, 3, False),
    (5, 2, False),  # F = 3 columns expected
    (9, 4, False),
], ids=["exactly-covering", "one-row-short", "two-rows-short", "too-few-columns", "too-many-columns"])
async def test_a_model_that_does_not_fit_the_user_stops_the_run_with_what_was_expected(
    autojump_clock, rows: int, columns: int, accepted: bool,
) -> None:
    network = _network()
    user = _user(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(_model(1, rows, columns))
        await trio.sleep(1.0)

    error = await _play(network, user, script)
    if accepted:
        assert error is None and _epochs(network) == [1]
    else:
        assert str(error) == (
            f"user:0 expected an item matrix with 3 columns covering item 4, received shape ({rows}, {columns}) in epoch 1"
        )
        assert _epochs(network) == []


@pytest.mark.parametrize("items", [[], np.zeros(0, dtype=np.int64)], ids=["empty-list", "empty-array"])
async def test_a_user_without_interactions_answers_a_model_of_any_number_of_items(autojump_clock, items) -> None:
    """No item to cover: even a one-item V is answered with k reports."""
    network = _network()
    user = _user(network, items, [])

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(_model(1, rows=1))
        await trio.sleep(1.0)

    assert await _play(network, user, script) is None
    [(_, body)] = _reports(network)
    assert body.epoch == 1 and body.indices.size == K and body.indices.max() < 1 * HYPER.d


async def test_a_user_without_interactions_refuses_a_model_with_other_columns_naming_no_item(autojump_clock) -> None:
    network = _network()
    user = _user(network, [], [])

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(_model(1, rows=4, columns=2))
        await trio.sleep(1.0)

    error = await _play(network, user, script)
    assert str(error) == "user:0 expected an item matrix with 3 columns covering item -1, received shape (4, 2) in epoch 1"


async def test_each_epoch_the_user_sends_k_reports_of_algorithm_1_to_a_proxy_drawn_uniformly(autojump_clock) -> None:
    """The same generator replayed by hand: home proxy, then per epoch the k flat indices and k signs of
    Algorithm 1 on the dense eq. (5) gradient for the eq. (4) profile, then the epoch's proxy."""
    network = _network()
    user = _user(network)
    models = [_model(epoch) for epoch in (1, 2, 3)]

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        for model in models:
            send(model)
            await trio.sleep(1.0)

    assert await _play(network, user, script) is None
    rng = np.random.default_rng(SEED)
    assert user.server == PROXIES[int(rng.integers(3))]  # the home proxy
    conf = confidence(VALUES, HYPER.alpha)
    expected = []
    for model in models:
        V = model.item_factors
        x = user_factors(V, np.array(ITEMS), conf, HYPER.lam)
        indices, signs = ldp_reports(rng, item_gradient(V, x, np.array(ITEMS), conf), EPSILON, K)
        expected.append((model.epoch, int(rng.integers(3)), indices.tolist(), signs.tolist()))
    got = sorted((body.epoch, proxy, body.unpack()[0].tolist(), body.unpack()[1].tolist()) for proxy, body in _reports(network))
    assert got == expected
    assert all(len(indices) == K for _, _, indices, _ in got)  # k reports per epoch, in one message


async def test_between_epochs_a_user_holds_no_reply_waiting_to_be_sent(autojump_clock) -> None:
    """What a checkpoint saves of an idle user: no pending reply, before its first model and after each answer."""
    network = _network()
    user = _user(network)
    assert user.reply is None

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(_model(1))
        await trio.sleep(1.0)
        assert user.reply is None and user.sent is not None and user.sent.epoch == 1

    assert await _play(network, user, script) is None
    assert user.reply is None


async def test_a_user_crashing_in_an_epoch_answers_the_epochs_before_it_and_goes_silent(autojump_clock) -> None:
    network = _network()
    user = _user(network)
    user.crash_round = 2

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        for epoch in (1, 2, 3):
            send(_model(epoch))
            await trio.sleep(1.0)

    assert await _play(network, user, script) is None
    assert _epochs(network) == [1]
    assert not network.is_attached(USER)


async def test_a_user_resumed_while_computing_sends_its_prepared_reply_when_the_compute_time_ends(autojump_clock) -> None:
    """A checkpoint caught the user computing epoch 3's reply for proxy 2: resumed, it sends exactly that
    reply at the end of its compute time, counts epoch 3 as answered, and answers epoch 4."""
    network = _network()
    user = _user(network)
    indices, signs = np.arange(K, dtype=np.int64), np.where(np.arange(K) % 3 == 0, 1, -1).astype(np.int8)
    user.reply = (PROXIES[2], SentReports(3, indices, signs))
    user.answered = 2
    user.computing_until = trio.current_time() + 5.0
    arrivals: list[list[int]] = []

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        await trio.sleep(4.0)
        arrivals.append(_epochs(network))  # still computing: nothing sent
        await trio.sleep(2.0)
        [(proxy, body)] = _reports(network)
        arrivals.append([body.epoch])
        assert proxy == 2
        np.testing.assert_array_equal(body.unpack()[0], indices)
        np.testing.assert_array_equal(body.unpack()[1], signs)
        send(_model(3))  # its epoch is answered already
        await trio.sleep(1.0)
        send(_model(4))
        await trio.sleep(1.0)

    assert await _play(network, user, script, resume=True) is None
    assert arrivals == [[], [3]]
    assert _epochs(network) == [4]
    assert user.reply is None and user.computing_until is None


# --------------------------------------------------------------------------- the server's epoch

N_ITEMS = 4  # V is 4 x 3: report indices 0..11
SERVER_K = 3


def _server(network: Network) -> LDPServer:
    return LDPServer(
        SERVER, network, np.random.default_rng(4), n_items=N_ITEMS, hyper=HYPER, steps=1, epsilon=1.0,
        k=SERVER_K, init_scale=0.1, proxies=PROXIES[:2],
    )


def _batch(epoch: int, indices: list[int], batch: int = 0) -> ReportBatch:
    return ReportBatch.pack(epoch, np.array(indices), np.where(np.arange(len(indices)) % 2 == 0, 1, -1), batch=batch)


async def _epoch(network: Network, server: LDPServer, epoch: int, script, deadline: float = 5.0):  # type: ignore[no-untyped-def]
    """``server.epoch(epoch)`` until ``deadline`` while ``script(send)`` plays the proxies (``send(proxy
    index, message)``); returns (the epoch's report or the error that stopped it, the time it returned)."""

    def send(proxy: int, message: object) -> None:
        network.send(PROXIES[proxy], SERVER, message)

    outcome: EpochReport | ProtocolViolation
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(script, send)
        try:
            outcome = await server.epoch(epoch, trio.current_time() + deadline)
        except ProtocolViolation as error:
            outcome = error
        returned = trio.current_time()
        nursery.cancel_scope.cancel()
    return outcome, returned


def _server_network() -> Network:
    network = Network(Links(1, LinkSpec(Constant(0.01))), Ledger())
    for party in (SERVER, *PROXIES[:2]):
        network.attach(party)
    return network


async def test_the_server_expects_k_reports_per_user_relayed_in_this_epoch_not_an_earlier_one(autojump_clock) -> None:
    """Proxy 0's count of epoch 1 (5 users) arrives late, in epoch 2, before its count of epoch 2: the server
    expects k = 3 reports from each of the 1 + 1 users relayed epoch 2, and has them all."""
    network = _server_network()
    server = _server(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(0, Relayed(1, 5))
        send(0, Relayed(2, 1))
        send(1, Relayed(2, 1))
        await trio.sleep(0.5)
        send(0, _batch(2, [0, 1, 2]))
        send(1, _batch(2, [3, 4, 5]))

    report, returned = await _epoch(network, server, 2, script)
    assert (report.relayed, report.silent_proxies, report.expected, report.received) == (2, 0, 2 * SERVER_K, 2 * SERVER_K)
    assert returned < 1.0  # it had them all: no wait for the deadline


async def test_the_server_stops_collecting_as_soon_as_it_has_every_report_it_expects(autojump_clock) -> None:
    """One user relayed: its 3 reports end the epoch; a batch sent later is not this epoch's aggregate."""
    network = _server_network()
    server = _server(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(0, Relayed(1, 1))
        send(1, Relayed(1, 0))
        send(0, _batch(1, [0, 1, 2]))
        await trio.sleep(1.0)
        send(0, _batch(1, [6, 7, 8], batch=1))

    report, returned = await _epoch(network, server, 1, script)
    assert (report.expected, report.received) == (3, 3)
    assert report.indices.tolist() == [0, 1, 2]
    assert returned < 1.0


async def test_a_duplicated_batch_delivered_with_new_ones_costs_none_of_them(autojump_clock) -> None:
    """Batch 0, its copy and batch 1 arrive in one delivery: the copy is refused, batch 1 still counts."""
    network = _server_network()
    server = _server(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(0, Relayed(1, 2))
        send(1, Relayed(1, 0))
        send(0, _batch(1, [0, 1, 2]))
        send(0, _batch(1, [0, 1, 2]))  # the copy a duplicating network delivers
        send(0, _batch(1, [9, 10, 11], batch=1))

    report, _ = await _epoch(network, server, 1, script)
    assert (report.expected, report.received, report.missing) == (6, 6, 0)
    assert sorted(report.indices.tolist()) == [0, 1, 2, 9, 10, 11]
    assert [row.reason.value for row in network.ledger.rejections] == ["duplicate"]


async def test_late_batches_of_earlier_epochs_are_counted_as_late_and_the_epochs_own_still_count(autojump_clock) -> None:
    """In epoch 3, batches of 2 and 3 reports of epochs 1 and 2 arrive with the epoch's own: 5 late reports."""
    network = _server_network()
    server = _server(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(0, Relayed(3, 1))
        send(1, Relayed(3, 0))
        send(0, _batch(1, [0, 1]))
        send(1, _batch(2, [3, 4, 5]))
        send(0, _batch(3, [6, 7, 8]))

    report, _ = await _epoch(network, server, 3, script)
    assert (report.late, report.expected, report.received) == (2 + 3, 3, 3)
    assert report.indices.tolist() == [6, 7, 8]


@pytest.mark.parametrize("index, refused", [(N_ITEMS * HYPER.d - 1, False), (N_ITEMS * HYPER.d, True)], ids=["last-entry", "past-v"])
async def test_a_batch_naming_an_entry_outside_v_stops_the_run(autojump_clock, index: int, refused: bool) -> None:
    network = _server_network()
    server = _server(network)

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        send(0, Relayed(1, 1))
        send(1, Relayed(1, 0))
        send(0, _batch(1, [0, 1, index]))

    outcome, _ = await _epoch(network, server, 1, script)
    if refused:
        assert str(outcome) == "server:0 received a report index 12 from proxy:0; V has 4 x 3 entries"
    else:
        assert isinstance(outcome, EpochReport) and outcome.received == 3


@pytest.mark.parametrize("relayed", [0, None], ids=["nobody-relayed", "proxies-silent"])
async def test_an_epoch_without_reports_leaves_v_as_it_was_and_aggregates_nothing(autojump_clock, relayed: int | None) -> None:
    """No report: no estimate, V unchanged, and the aggregate is empty -- int32 indices and int8 signs, the
    types reports have on the wire."""
    network = _server_network()
    server = _server(network)
    before = server.item_factors.copy()

    async def script(send) -> None:  # type: ignore[no-untyped-def]
        if relayed is not None:
            send(0, Relayed(1, relayed))
            send(1, Relayed(1, relayed))

    report, _ = await _epoch(network, server, 1, script)
    assert report.received == 0 and report.estimate is None
    assert (report.indices.size, report.signs.size) == (0, 0)
    assert (report.indices.dtype, report.signs.dtype) == (np.int32, np.int8)
    np.testing.assert_array_equal(server.item_factors, before)


# --------------------------------------------------------------------------- the proxy between them

MEMBERS = tuple(Party(Role.USER, index) for index in range(3))


def _proxy_network() -> tuple[Network, ShuffleProxy]:
    """Proxy 0 with pools of 2 users, 1 s after their first report, held when short; 3 users around it."""
    network = Network(Links(1, LinkSpec(Constant(0.01))), Ledger())
    for party in (SERVER, PROXIES[0], *MEMBERS):
        network.attach(party)
    proxy = ShuffleProxy(
        PROXIES[0], network, np.random.default_rng(2), server=SERVER, min_users=2, underfull=Underfull.HOLD,
        batch_size=10, wait_s=1.0, horizon_s=1e6, reports_per_user=2, entries=18,
    )
    return network, proxy


def _user_reports(network: Network, user: int, epoch: int) -> None:
    network.send(MEMBERS[user], PROXIES[0], Reports.pack(epoch, np.array([user, 9 + user]), np.array([1, -1])))


async def _run_proxy(network: Network, proxy: ShuffleProxy, script) -> None:  # type: ignore[no-untyped-def]
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        await script()
        nursery.cancel_scope.cancel()


def _batches(network: Network) -> list[tuple[int, list[int]]]:
    """The server's view: each batch's epoch and its report indices, sorted (the proxy shuffled them)."""
    return [(env.body.epoch, sorted(env.body.indices.tolist())) for env in network.mailbox(SERVER).take_all(ReportBatch.KIND)]


async def test_a_late_copy_of_a_users_join_does_not_bring_back_a_user_that_left(autojump_clock) -> None:
    """User 0 joins, then leaves; a copy of its join, sent before the leave, arrives after it: the proxy
    follows the newest announcement and relays the model to user 1 only."""
    network, proxy = _proxy_network()

    async def script() -> None:
        joined_at = trio.current_time()
        network.send(MEMBERS[0], PROXIES[0], Join())
        network.send(MEMBERS[1], PROXIES[0], Join())
        await trio.sleep(1.0)
        network.send(MEMBERS[0], PROXIES[0], Leave())
        await trio.sleep(1.0)
        network.mailbox(PROXIES[0]).put(Envelope(Join.KIND, MEMBERS[0], PROXIES[0], joined_at, Join()))
        await trio.sleep(1.0)
        network.send(SERVER, PROXIES[0], _model(1))
        await trio.sleep(1.0)

    await _run_proxy(network, proxy, script)
    assert proxy.members == {MEMBERS[1]}
    assert [env.body.users for env in network.mailbox(SERVER).take_all(Relayed.KIND)] == [1]
    assert network.mailbox(MEMBERS[0]).take_all(Model.KIND) == []
    assert len(network.mailbox(MEMBERS[1]).take_all(Model.KIND)) == 1


async def test_a_pool_of_an_earlier_epoch_still_in_its_wait_keeps_taking_reports_after_the_next_model(autojump_clock) -> None:
    """User 0 reports epoch 1; the epoch-2 model passes through before the pool's 1 s wait is over; user 1's
    epoch-1 report then completes the pool of 2 users, which goes out."""
    network, proxy = _proxy_network()

    async def script() -> None:
        network.send(SERVER, PROXIES[0], _model(1))
        await trio.sleep(0.1)
        _user_reports(network, 0, 1)
        await trio.sleep(0.3)
        network.send(SERVER, PROXIES[0], _model(2))
        await trio.sleep(0.3)
        _user_reports(network, 1, 1)
        await trio.sleep(0.2)

    await _run_proxy(network, proxy, script)
    assert proxy.closed == [ClosedPool(1, 2, 4, Fate.RELEASED, False)]
    assert _batches(network) == [(1, [0, 1, 9, 10])]


async def test_a_held_pool_of_the_epoch_the_proxy_then_relays_is_not_dropped_by_that_relay(autojump_clock) -> None:
    """User 0 got epoch 2's model through another proxy and reports it here before this proxy relays it;
    the pool is held at its deadline, stays held when this proxy relays epoch 2 (its epoch is not over),
    and goes out when user 1's epoch-2 report arrives."""
    network, proxy = _proxy_network()

    async def script() -> None:
        network.send(SERVER, PROXIES[0], _model(1))
        await trio.sleep(0.5)
        _user_reports(network, 0, 2)
        await trio.sleep(2.0)
        held = [(pool.epoch, pool.held) for pool in proxy.pools.values()]
        assert held == [(2, True)]
        network.send(SERVER, PROXIES[0], _model(2))
        await trio.sleep(1.0)
        _user_reports(network, 1, 2)
        await trio.sleep(1.0)

    await _run_proxy(network, proxy, script)
    assert proxy.closed == [ClosedPool(2, 2, 4, Fate.RELEASED, True)]
    assert _batches(network) == [(2, [0, 1, 9, 10])]


async def test_the_proxy_stops_at_the_runs_horizon_and_relays_nothing_arriving_then(autojump_clock) -> None:
    """With a horizon at t = 3, a model arriving exactly at t = 3 is never relayed: the proxy has stopped.

    The test gives the tasks at t = 3 a bounded number of scheduler turns (virtual time must not move on:
    a proxy still looping at its horizon would keep it from ever advancing)."""
    network, proxy = _proxy_network()
    proxy.horizon_s = 3.0
    network.send(MEMBERS[0], PROXIES[0], Join())
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        await trio.sleep(3.0 - 0.01)
        network.send(SERVER, PROXIES[0], _model(1))  # arrives at t = 3
        await trio.sleep_until(3.0)
        for _ in range(100):
            await trio.lowlevel.checkpoint()
        finished = not nursery.child_tasks
        nursery.cancel_scope.cancel()
    assert finished
    assert proxy.members == {MEMBERS[0]}
    assert network.ledger.party(PROXIES[0])["sent_msgs"] == 0  # neither V to user 0 nor a count to the server
