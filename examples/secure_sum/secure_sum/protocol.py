"""The protocol: config, wiring of the roles, one sum per round, and the "masks cancel" monitor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrecsim.sim import SERVER, InvariantMonitor, Outcome, Party, ProtocolSpec, Role, RunContext, Stream, param

from .roles import CountingUser, SummingServer


@dataclass(frozen=True)
class SecureSumConfig:
    min_rating: float = param(0.0, doc="a user counts an item it rated at least this")


def counted(number: int, noun: str) -> str:
    """``"1 user"``, ``"2 users"``: a count and its noun, singular for one."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


async def run(ctx: RunContext) -> Outcome:
    config: SecureSumConfig = ctx.config
    n_items, by_user = ctx.train.n_items, ctx.train.by_user()
    users = {}
    for index in range(ctx.train.n_users):
        party = Party(Role.USER, index)
        rows = slice(by_user.indptr[index], by_user.indptr[index + 1])
        counts = np.zeros(n_items, dtype=np.uint64)
        counts[by_user.items[rows][by_user.values[rows] >= config.min_rating]] = 1
        rng = ctx.rng(Stream.ACTOR, Role.USER.code, index)
        users[party] = CountingUser(party, ctx.network, rng, counts, pair_seed=ctx.seed)
    server = SummingServer(SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), n_items)
    ctx.network.attach(SERVER)
    cancel = InvariantMonitor("masks_cancel", "the server's sum equals the counts summed over the users who answered")
    timing, rounds = ctx.scenario.run, []
    async with ctx.population(users).open() as population:
        await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(1, ctx.rounds + 1):
            population.begin_round(round_index)
            total, replies = await server.round(round_index, ctx.network.now + timing.round_timeout_s)
            # The simulator is omniscient: it knows the counts of the users who answered.
            truth = sum((users[party].counts for party, _ in replies), np.zeros(n_items, dtype=np.uint64))
            wrong = int(np.count_nonzero(total != truth))
            missing = len(replies.missing)
            cancel.check(wrong == 0, f"round {round_index}: {counted(wrong, 'item')} off, {counted(missing, 'user')} missing")
            rounds.append({"round": round_index, "participants": len(replies), "missing": missing,
                           "wrong_items": wrong, "total_count": float(truth.sum())})
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
    final = {name: value for name, value in rounds[-1].items() if name != "round"}
    return Outcome(len(rounds), rounds, final, invariants=[cancel], state={"sum": total, "truth": truth})


PROTOCOL = ProtocolSpec("secure_sum", SecureSumConfig, run, "pairwise-masked secure sum of item counts (tutorial)")
