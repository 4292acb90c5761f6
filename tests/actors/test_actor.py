"""The actor vocabulary: recv and gather with virtual deadlines, stale replies, protocol violations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import trio

from fedrecsim.actors.actor import PENDING, Actor, Replies
from fedrecsim.actors.membership import Join, Leave, update_members
from fedrecsim.actors.server import Server
from fedrecsim.errors import PartyTimeout, ProtocolViolation
from fedrecsim.network.ledger import Ledger, RejectReason
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Envelope, message
from fedrecsim.seeding import Stream, generator


@message("test.actor_ping")
@dataclass(frozen=True)
class Ping:
    round: int


class Peer(Actor):
    role: ClassVar[Role] = Role.USER


def _setup(n_users: int = 3, latency_s: float = 0.1) -> tuple[Network, Server, list[Peer]]:
    network = Network(Links(0, LinkSpec(Constant(latency_s))), Ledger())
    server = Server(SERVER, network, generator(0, Stream.ACTOR, 2, 0))
    network.attach(SERVER)
    users = []
    for index in range(n_users):
        party = Party(Role.USER, index)
        network.attach(party)
        users.append(Peer(party, network, generator(0, Stream.ACTOR, 0, index)))
    return network, server, users


async def test_gather_collects_everyone_and_returns_as_soon_as_all_answered(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        start = trio.current_time()
        for user in users:
            user.send(SERVER, Ping(1))
        replies = await server.gather(Ping, [user.party for user in users], deadline=start + 100)
        assert trio.current_time() - start == pytest.approx(0.1)
    assert list(replies.by_party) == [user.party for user in users]
    assert replies.missing == []


async def test_gather_reports_the_silent_as_missing_at_the_deadline(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        start = trio.current_time()
        users[1].send(SERVER, Ping(1))
        replies = await server.gather(Ping, [user.party for user in users], deadline=start + 5)
        assert trio.current_time() - start == pytest.approx(5)
    assert list(replies.by_party) == [users[1].party]
    assert replies.missing == [users[0].party, users[2].party]


async def test_gather_discards_replies_that_accept_rejects(autojump_clock) -> None:
    network, server, users = _setup(n_users=1)
    async with network.open():
        users[0].send(SERVER, Ping(1))
        await trio.sleep(0.05)
        users[0].send(SERVER, Ping(2))
        replies = await server.gather(
            Ping, [users[0].party], deadline=trio.current_time() + 5, accept=lambda ping: ping.round == 2
        )
    assert replies.by_party[users[0].party].round == 2


async def test_gather_rejects_a_reply_from_a_party_it_did_not_select_and_goes_on(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        users[2].send(SERVER, Ping(1))
        users[0].send(SERVER, Ping(1))
        replies = await server.gather(Ping, [users[0].party], deadline=trio.current_time() + 5)
    assert list(replies.by_party) == [users[0].party] and replies.missing == [] and replies.rejected == []
    [rejection] = network.ledger.rejections
    assert (rejection.src, rejection.dst, rejection.kind, rejection.reason) == (users[2].party, SERVER, Ping.KIND, RejectReason.UNEXPECTED)
    assert rejection.problem == "server:0 expected test.actor_ping from one of 1 selected parties, received it from user:2"


async def test_a_gather_that_keeps_nothing_hands_each_reply_to_validate_once_and_returns_only_who(autojump_clock) -> None:
    """``keep=False``: ``validate`` sees every reply once, in the order taken; the result names the accepted,
    rejected and missing senders and holds no reply."""
    network, server, users = _setup(n_users=4)
    seen: list[tuple[Party, int]] = []

    def validate(party: Party, ping: Ping) -> str | None:
        seen.append((party, ping.round))
        return "odd round" if ping.round % 2 else None

    async with network.open():
        for index in (2, 0, 1):
            users[index].send(SERVER, Ping(index))
            await trio.sleep(0.05)
        users[0].send(SERVER, Ping(4))  # a second reply: a duplicate, never validated
        replies = await server.gather(
            Ping, [user.party for user in users], deadline=trio.current_time() + 5, validate=validate, keep=False
        )
    assert seen == [(users[2].party, 2), (users[0].party, 0), (users[1].party, 1)]
    assert replies.accepted == [users[0].party, users[2].party] and len(replies) == 2 and replies.by_party == {}
    assert replies.rejected == [users[1].party] and replies.missing == [users[3].party]
    assert [row.reason for row in network.ledger.rejections] == [RejectReason.INVALID, RejectReason.DUPLICATE]


async def test_recv_times_out_in_virtual_time(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        start = trio.current_time()
        with pytest.raises(PartyTimeout, match="test.actor_ping"):
            await users[0].recv(Ping, deadline=start + 3600)
        assert trio.current_time() - start == pytest.approx(3600)


async def test_recv_from_a_named_sender_leaves_the_others_queued(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        users[0].send(users[2].party, Ping(10))
        users[1].send(users[2].party, Ping(11))
        envelope = await users[2].recv(Ping, sender=users[1].party, deadline=trio.current_time() + 1)
        assert envelope.body.round == 11
        assert [env.body.round for env in users[2].drain(Ping)] == [10]


async def test_actor_rng_is_its_own() -> None:
    _, _, users = _setup()
    draws = [user.rng.random() for user in users]
    assert len(set(draws)) == 3
    again = generator(0, Stream.ACTOR, 0, 1).random()
    assert again == draws[1]


def test_an_actor_refuses_the_wrong_role() -> None:
    network, _, _ = _setup()
    with pytest.raises(ValueError, match="plays user"):
        Peer(SERVER, network, np.random.default_rng(0))


async def test_waiting_outside_an_open_network_is_refused_not_a_hang(autojump_clock) -> None:
    network, server, users = _setup()
    with pytest.raises(ProtocolViolation, match="outside `async with network.open"):
        await users[0].recv(Ping, deadline=trio.current_time() + 1.0)


async def test_a_message_due_exactly_at_the_deadline_counts_as_received(autojump_clock) -> None:
    network, server, users = _setup(latency_s=1.0)
    async with network.open():
        start = trio.current_time()
        users[0].send(SERVER, Ping(1))
        envelope = await server.recv(Ping, deadline=start + 1.0)
    assert envelope.body.round == 1


async def test_update_members_applies_joins_and_leaves_in_send_order_and_returns_who_left(autojump_clock) -> None:
    network, server, (u0, u1, u2) = _setup(3, latency_s=0.1)
    members: set[Party] = set()
    async with network.open():
        for sender, body in [(u0, Join()), (u1, Join()), (u1, Leave()), (u2, Leave()), (u0, Leave()), (u0, Join())]:
            sender.send(SERVER, body)
            await trio.sleep(0.01)
        await trio.sleep(1.0)
        left = update_members(server, members)
        # u2 was never a member; u0 left and came back within the batch.
        assert members == {u0.party} and left == {u1.party}
        u0.send(SERVER, Leave())
        await trio.sleep(1.0)
        assert update_members(server, members) == {u0.party} and members == set()


async def test_a_second_reply_from_one_sender_is_a_rejected_duplicate_and_the_first_counts(autojump_clock) -> None:
    network, server, (u0, u1, _) = _setup(3, latency_s=0.1)
    async with network.open():
        start = trio.current_time()
        u0.send(SERVER, Ping(1))
        await trio.sleep(0.05)
        u0.send(SERVER, Ping(2))  # arrives while the server is still waiting for u1
        await trio.sleep(0.05)
        u1.send(SERVER, Ping(1))
        replies = await server.gather(Ping, [u0.party, u1.party], deadline=start + 5)
        assert trio.current_time() - start == pytest.approx(0.2)  # u1's reply; the duplicate did not end it
    assert {party: ping.round for party, ping in replies} == {u0.party: 1, u1.party: 1}
    [rejection] = network.ledger.rejections
    assert (rejection.src, rejection.reason) == (u0.party, RejectReason.DUPLICATE)
    assert rejection.problem == "server:0 received test.actor_ping twice from user:0; the first counts"
    assert rejection.time == pytest.approx(start + 0.15)


async def test_two_replies_from_one_sender_in_one_batch_count_once(autojump_clock) -> None:
    network, server, (u0,) = _setup(1, latency_s=0.1)
    async with network.open():
        u0.send(SERVER, Ping(1))
        u0.send(SERVER, Ping(2))
        replies = await server.gather(Ping, [u0.party], deadline=trio.current_time() + 5)
    assert replies.by_party == {u0.party: Ping(1)}
    assert network.ledger.rejected_by_reason["duplicate"] == 1


async def test_an_invalid_reply_is_rejected_spends_its_senders_reply_and_ends_the_wait(autojump_clock) -> None:
    network, server, (u0, u1, u2) = _setup(3, latency_s=0.1)

    def validate(sender: Party, ping: Ping) -> str | None:
        return f"round {ping.round} is odd" if ping.round % 2 else None

    async with network.open():
        start = trio.current_time()
        u0.send(SERVER, Ping(3))
        u0.send(SERVER, Ping(4))  # too late: u0's one reply was the invalid one
        u1.send(SERVER, Ping(2))
        u2.send(SERVER, Ping(5))
        replies = await server.gather(Ping, [u0.party, u1.party, u2.party], deadline=start + 5, validate=validate)
        assert trio.current_time() - start == pytest.approx(0.1)  # nobody left to wait for
    assert replies.by_party == {u1.party: Ping(2)}
    assert (replies.rejected, replies.missing) == ([u0.party, u2.party], [])
    reasons = [(row.src, row.reason) for row in network.ledger.rejections]
    assert sorted(reasons) == [(u0.party, RejectReason.DUPLICATE), (u0.party, RejectReason.INVALID), (u2.party, RejectReason.INVALID)]
    invalid = [row.problem for row in network.ledger.rejections if row.reason is RejectReason.INVALID]
    assert sorted(invalid) == [
        "server:0 expected a valid test.actor_ping from user:0: round 3 is odd",
        "server:0 expected a valid test.actor_ping from user:2: round 5 is odd",
    ]


async def test_membership_ignores_an_announcement_sent_before_one_already_applied(autojump_clock) -> None:
    network, server, (u0, u1, _) = _setup(3, latency_s=0.1)
    async with network.open():
        u0.send(SERVER, Join())
        await trio.sleep(1.0)
        server.update_membership()
        u0.send(SERVER, Leave())
        await trio.sleep(1.0)
        assert server.update_membership() == {u0.party} and server.members == set()
        # A copy of u0's first join, or one overtaken on the way, arrives now: it must not bring u0 back.
        late = Join()
        network.attach(u0.party)
        u1.send(SERVER, Join())
        await trio.sleep(1.0)
        server.mailbox.put(Envelope(Join.KIND, u0.party, SERVER, 0.0, late))
        server.mailbox.put(Envelope(Join.KIND, u1.party, SERVER, 2.0, late))  # a duplicate of u1's join
        assert server.update_membership() == set()
    assert server.members == {u1.party}


async def test_a_crash_recovery_join_and_a_leave_at_the_same_instant_end_as_not_a_member(autojump_clock) -> None:
    network, server, (u0, u1, _) = _setup(3, latency_s=0.1)
    members: set[Party] = {u0.party}
    async with network.open():
        for user in (u0, u1):  # u0 was a member (it crashed and recovers), u1 was not
            user.send(SERVER, Join())
            user.send(SERVER, Leave())
        await trio.sleep(1.0)
        left = update_members(server, members)
    assert members == set()
    assert left == {u0.party, u1.party}


# ------------------------------------------------------------------ messages, send_many, Replies (issue 13)


def test_an_actor_names_its_class_and_party() -> None:
    network, server, users = _setup()
    assert repr(users[0]) == "<Peer user:0>"
    assert repr(server) == "<Server server:0>"
    with pytest.raises(ValueError, match=r"^Peer plays user, not server:0$"):
        Peer(SERVER, network, np.random.default_rng(0))


def test_a_server_can_be_built_with_keyword_arguments() -> None:
    network, _, _ = _setup()
    server = Server(party=SERVER, network=network, rng=np.random.default_rng(0))
    assert server.party == SERVER and server.network is network and server.members == set()


async def test_recv_timeout_says_what_was_awaited_from_whom_and_until_when(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        deadline = trio.current_time() + 12.5
        with pytest.raises(PartyTimeout, match=rf"^user:0 waited for test.actor_ping until t={deadline:.3f}s; none came$"):
            await users[0].recv(Ping, deadline=deadline)
        deadline = trio.current_time() + 2.25
        pattern = rf"^user:0 waited for test.actor_ping from user:1 until t={deadline:.3f}s; none came$"
        with pytest.raises(PartyTimeout, match=pattern):
            await users[0].recv(Ping, sender=users[1].party, deadline=deadline)


async def test_send_many_delivers_one_copy_to_each_destination_from_the_sender(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        single = users[0].send(users[1].party, Ping(0))
        total = server.send_many([users[0].party, users[2].party], Ping(7))
        await trio.sleep(1.0)
        assert [env.body.round for env in users[1].drain(Ping)] == [0]
        for user in (users[0], users[2]):
            (envelope,) = user.drain(Ping)
            assert (envelope.src, envelope.dst, envelope.body) == (SERVER, user.party, Ping(7))
    assert total == 2 * single  # same body, same-size headers
    assert network.ledger.summary()["kinds"]["test.actor_ping"]["msgs"] == 3


async def test_replies_iterate_in_party_order_with_their_messages(autojump_clock) -> None:
    network, server, users = _setup()
    async with network.open():
        for user in reversed(users):
            user.send(SERVER, Ping(user.party.index))
            await trio.sleep(0.01)
        replies = await server.gather(Ping, [u.party for u in reversed(users)], deadline=trio.current_time() + 5)
    assert len(replies) == 3
    assert [(party, ping.round) for party, ping in replies] == [(u.party, u.party.index) for u in users]


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("listed", [[4, 2, 5, 1, 0, 3], [4, 2, 5, 1, 0, 2, 3, 4]], ids=["shuffled", "twice"])
async def test_replies_are_in_party_order_whatever_the_order_of_the_senders_and_however_often_they_are_listed(
    autojump_clock, keep: bool, listed: list[int]
) -> None:
    network, server, users = _setup(n_users=6)
    u0, u1, u2, u3, u4, u5 = (user.party for user in users)
    async with network.open():
        for user in (users[5], users[2], users[0], users[4]):
            user.send(SERVER, Ping(user.party.index))
            await trio.sleep(0.01)
        replies = await server.gather(
            Ping, [users[index].party for index in listed], deadline=trio.current_time() + 5, keep=keep,
            validate=lambda src, ping: "odd" if ping.round == 5 else None,
        )
    assert replies.accepted == [u0, u2, u4]
    assert list(replies.by_party) == ([u0, u2, u4] if keep else [])
    assert (replies.missing, replies.rejected) == ([u1, u3], [u5])


async def test_a_rejected_message_does_not_hide_the_accepted_ones_delivered_with_it(autojump_clock) -> None:
    network, server, (u0, u1) = _setup(2)
    async with network.open():
        u0.send(SERVER, Ping(1))  # a late reply to round 1, delivered in one batch with round 2's
        u0.send(SERVER, Ping(2))
        u1.send(SERVER, Ping(1))
        u1.send(SERVER, Ping(2))
        await trio.sleep(1.0)
        start = trio.current_time()
        replies = await server.gather(Ping, [u0.party, u1.party], deadline=start + 5, accept=lambda p: p.round == 2)
        assert trio.current_time() == start  # everything was already there
    assert replies.missing == []
    assert {party: ping.round for party, ping in replies} == {u0.party: 2, u1.party: 2}


# ------------------------------------------------------------------ what a party receives, padding, validation by sender


@message("test.actor_pong")
@dataclass(frozen=True)
class Pong:
    round: int


class PingOnly(Actor):
    role: ClassVar[Role] = Role.USER
    receives = (Ping,)


async def test_a_kind_the_actor_does_not_receive_is_rejected_and_never_reaches_its_mailbox(autojump_clock) -> None:
    network, server, _ = _setup(0)
    party = Party(Role.USER, 7)
    network.attach(party)
    picky = PingOnly(party, network, generator(0, Stream.ACTOR, 0, 7))
    async with network.open():
        server.send(party, Pong(1))
        server.send(party, Ping(2))
        await trio.sleep(1.0)
        assert [envelope.body for envelope in picky.drain(Ping)] == [Ping(2)]
        assert picky.drain(Pong) == []
    assert [(row.src, row.dst, row.reason) for row in network.ledger.rejections] == [(SERVER, party, RejectReason.UNEXPECTED)]


async def test_padding_counts_in_the_bytes_sent(autojump_clock) -> None:
    network, server, (u0,) = _setup(1)
    async with network.open():
        plain = u0.send(SERVER, Ping(1))
        padded = u0.send(SERVER, Ping(1), padding=1000)
    assert padded == plain + 1000
    assert network.ledger.party(u0.party)["sent_bytes"] == 2 * plain + 1000


async def test_gather_validates_each_reply_with_its_sender(autojump_clock) -> None:
    network, server, (u0, u1) = _setup(2)
    async with network.open():
        u0.send(SERVER, Ping(1))
        u1.send(SERVER, Ping(1))
        replies = await server.gather(
            Ping, [u0.party, u1.party], deadline=trio.current_time() + 5,
            validate=lambda sender, ping: "not on the list" if sender == u1.party else None,
        )
    assert (list(replies.by_party), replies.rejected) == ([u0.party], [u1.party])


def test_replies_without_rejections_list_none() -> None:
    replies = Replies({SERVER: Ping(1)}, [])
    assert replies.rejected == [] and replies.missing == []


async def test_a_duplicated_join_does_not_bring_back_a_party_its_caller_dropped(autojump_clock) -> None:
    network, server, (u0, _) = _setup(2)
    members: set[Party] = set()
    latest: dict[Party, tuple[float, int]] = {}
    async with network.open():
        u0.send(SERVER, Join())
        await trio.sleep(1.0)
        update_members(server, members, latest)
        assert members == {u0.party}
        members.discard(u0.party)  # the caller's own decision (say, it found u0 crashed)
        server.mailbox.put(Envelope(Join.KIND, u0.party, SERVER, latest[u0.party][0], Join()))  # the network's copy
        assert update_members(server, members, latest) == set()
    assert members == set()


async def test_a_verdict_deferred_to_settle_is_recorded_at_the_instant_and_in_the_order_of_its_reply(autojump_clock) -> None:
    """``validate`` defers every verdict (`PENDING`); ``settle`` gives them before the gather waits again and
    once at its end. u0's reply, refused by ``settle``, is recorded at the instant it was taken (not when
    the gather ends) and before u1's duplicate and the unexpected reply from u3, taken after it in the same
    batch -- as if ``validate`` had refused it at once; u1's and u2's replies are accepted (and kept), u0's duplicate is refused."""
    network, server, (u0, u1, u2, u3) = _setup(4, latency_s=0.1)
    calls: list[tuple[bool, list[Party]]] = []
    owed: list[Party] = []

    def validate(sender: Party, ping: Ping) -> object:
        owed.append(sender)
        return PENDING

    def settle(final: bool) -> list[tuple[Party, str | None]]:
        calls.append((final, list(owed)))
        verdicts = [(sender, "round 3 is odd" if sender == u0.party else None) for sender in owed]
        owed.clear()
        return verdicts

    async with network.open():
        start = trio.current_time()
        u0.send(SERVER, Ping(3))
        u3.send(SERVER, Ping(2))  # not selected
        u1.send(SERVER, Ping(2))
        u1.send(SERVER, Ping(4))  # a duplicate of u1's pending reply
        await trio.sleep(0.5)
        u2.send(SERVER, Ping(6))
        u0.send(SERVER, Ping(8))  # u0's one reply was spent
        replies = await server.gather(
            Ping, [u0.party, u1.party, u2.party], deadline=start + 5, validate=validate, settle=settle
        )
        assert trio.current_time() - start == pytest.approx(0.6)  # nobody left to wait for
    assert calls == [(False, [u0.party, u1.party]), (True, [u2.party])]
    assert replies.by_party == {u1.party: Ping(2), u2.party: Ping(6)}
    assert (replies.rejected, replies.missing) == ([u0.party], [])
    taken = pytest.approx(start + 0.5)  # the gather starts then and takes the first batch; the second arrives at 0.6
    assert [(row.src, row.reason, row.time) for row in network.ledger.rejections] == [
        (u0.party, RejectReason.INVALID, taken),  # a bucket is delivered sorted by sender
        (u1.party, RejectReason.DUPLICATE, taken),
        (u3.party, RejectReason.UNEXPECTED, taken),
        (u0.party, RejectReason.DUPLICATE, pytest.approx(start + 0.6)),
    ]
    assert network.ledger.rejections[0].problem == "server:0 expected a valid test.actor_ping from user:0: round 3 is odd"


async def test_a_settle_that_does_not_give_every_deferred_verdict_is_a_programming_error(autojump_clock) -> None:
    network, server, (u0, u1, _) = _setup(3, latency_s=0.1)
    async with network.open():
        u0.send(SERVER, Ping(1))
        u1.send(SERVER, Ping(2))
        with pytest.raises(RuntimeError, match="settle owed verdicts"):
            await server.gather(
                Ping, [u0.party, u1.party], deadline=trio.current_time() + 5, validate=lambda sender, ping: PENDING,
                settle=lambda final: [(u0.party, None)],
            )
