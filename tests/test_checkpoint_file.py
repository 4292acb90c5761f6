"""The checkpoint file and its machinery (`fedrecsim.checkpoint`), on tiny runs: what a checkpoint holds,
how it is written (fsynced, renamed over the last, its folder fsynced), loaded and refused, when one is
due, and a resume from each checkpoint of three protocols' runs -- with a population and objects of the
driver's own, with resting actors (proxies), and without a population (silos).

tests/test_checkpoint.py resumes fourteen scenarios under every kind of fault; this file is the fast
check of the module itself (the `checkpoint` target of tools/mutation.py).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import trio

import fedrecsim
from fedrecsim import checkpoint
from fedrecsim.checkpoint import CHECKPOINT_FILE, CHECKPOINT_FORMAT, Checkpoints, Saved, data_fingerprint, load, work_folder
from fedrecsim.data import prepare_data
from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import CheckpointError, Interrupted, OutputError
from fedrecsim.network.party import Party, Role
from fedrecsim.testing import InterruptAfter, assert_same_run, checkpoint_world, every_checkpoint, resume_from

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}

TINY: dict[str, dict[str, Any]] = {
    "fcf: churn, dropout, a restart without state": {
        "run": {"protocol": "fcf", "seed": 2, "rounds": 4, "round_timeout_s": 5.0},
        "data": {"users": 12, "items": 15, "ratings": 120}, "network": {"latency": _LOGNORMAL},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.7, "dropout": 0.1},
        "faults": {"crash": [{"party": "user:2", "kind": "fcf.item_gradients", "round": 2, "restart_after_s": 6.0,
                              "keep_state": False}]},
        "protocol": {"d": 3},
    },
    "ldp_implicit: a proxy holding its pool": {
        "run": {"protocol": "ldp_implicit", "seed": 9, "rounds": 4, "round_timeout_s": 3.0},
        "data": {"feedback": "implicit", "users": 16, "items": 60, "ratings": 160, "split": "leave_one_out"},
        "network": {"latency": _LOGNORMAL},
        "protocol": {"k": 5, "proxies": 1, "min_users": 20, "underfull": "hold", "proxy_wait_s": 1.0},
    },
    "prototypes: silos, no population": {
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"feedback": "counts", "users": 30, "items": 20, "ratings": 400, "rank": 2, "split": "users",
                 "test_fraction": 0.2, "test_entries": 3, "silos": 2},
        "network": {"latency": _LOGNORMAL}, "protocol": {"k": 2, "rank": 2, "support": 3, "nmf_iterations": 10},
    },
}


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("name", TINY)
def test_a_tiny_run_resumed_from_each_checkpoint_ends_as_the_run_never_interrupted(tmp_path, name) -> None:
    tables = TINY[name]
    uninterrupted = fedrecsim.run(tables)
    checkpointed, written = every_checkpoint(tables, tmp_path / "checkpointed")
    assert [saved.round for saved in written] == list(range(1, tables["run"]["rounds"]))
    for result in [checkpointed] + [resume_from(saved, tmp_path / f"from-{saved.round}") for saved in written]:
        assert_same_run(result, uninterrupted)


def test_what_a_checkpoint_records_about_its_run(tmp_path) -> None:
    tables = TINY["fcf: churn, dropout, a restart without state"]
    result, written = every_checkpoint(tables, tmp_path / "run")
    train, test = prepare_data(fedrecsim.parse_scenario(tables).data, tables["run"]["seed"])
    for saved in written:
        assert (saved.format, saved.version) == (CHECKPOINT_FORMAT, fedrecsim.__version__)
        assert saved.scenario == fedrecsim.parse_scenario(tables)
        assert (saved.transcript, saved.every, saved.start) == (False, 1, 0.0)
        assert saved.data == data_fingerprint(train, test)
    # The virtual time of each round's end, in order, and the wall time the run had taken.
    times = [saved.time for saved in written]
    assert times == sorted(times) and 0 < times[0] and times[-1] < result.result["virtual_time_s"]
    walls = [saved.wall_s for saved in written]
    assert walls == sorted(walls) and 0 < walls[0] and walls[-1] < result.result["wall_time_s"]
    world = checkpoint_world(written[1])
    assert set(world) == {"network", "ledger", "model_use", "users", "population", "objects", "values"}
    assert "_mailbox" not in world["users"][next(iter(world["users"]))]  # fetched from the resumed network
    assert world["population"]["_followed"] == 0 and sorted(world["population"]["running"]) == world["population"]["running"]
    # Live objects are saved as their names.
    assert {user["network"] for user in world["users"].values()} == {"network"}


def test_a_resumed_run_starts_at_its_checkpoints_round_time_and_wall_time(tmp_path) -> None:
    tables = TINY["fcf: churn, dropout, a restart without state"]
    _, written = every_checkpoint(tables, tmp_path / "run")
    saved = written[1]
    slower = Saved(**{**vars(saved), "wall_s": 1000.0})
    work_folder(tmp_path / "resumed").mkdir()
    (work_folder(tmp_path / "resumed") / CHECKPOINT_FILE).write_bytes(pickle.dumps(slower))
    progress: list[tuple[int, int]] = []
    resumed = fedrecsim.resume(tmp_path / "resumed", progress=lambda completed, total: progress.append((completed, total)))
    assert progress == [(3, 4), (4, 4)]  # rounds 1 and 2 were not run again
    assert 1000.0 < resumed.result["wall_time_s"] < 1000.0 + 60.0


# --------------------------------------------------------------------------- the file


def test_the_work_folder_is_a_hidden_sibling_named_after_the_result(tmp_path) -> None:
    assert work_folder(tmp_path / "results" / "run-1") == tmp_path / "results" / ".run-1.checkpoints"


def _ratings(users, items, values, n_users=4, n_items=5) -> Ratings:  # type: ignore[no-untyped-def]
    return Ratings(np.array(users), np.array(items), np.array(values, dtype=float), n_users, n_items, (1.0, 5.0))


def test_the_data_fingerprint_changes_with_any_entry_and_with_the_shape() -> None:
    train, test = _ratings([0, 1, 2], [1, 2, 3], [4.0, 5.0, 3.0]), _ratings([3], [4], [2.0])
    base = data_fingerprint(train, test)
    assert data_fingerprint(_ratings([0, 1, 2], [1, 2, 3], [4.0, 5.0, 3.0]), _ratings([3], [4], [2.0])) == base
    changed = [
        (_ratings([0, 1, 3], [1, 2, 3], [4.0, 5.0, 3.0]), test),
        (_ratings([0, 1, 2], [1, 2, 4], [4.0, 5.0, 3.0]), test),
        (_ratings([0, 1, 2], [1, 2, 3], [4.0, 5.0, 2.0]), test),
        (_ratings([0, 1, 2], [1, 2, 3], [4.0, 5.0, 3.0], n_users=5), test),
        (_ratings([0, 1, 2], [1, 2, 3], [4.0, 5.0, 3.0], n_items=6), test),
        (train, _ratings([3], [4], [1.0])),
        (test, train),
    ]
    prints = {data_fingerprint(a, b) for a, b in changed}
    assert base not in prints and len(prints) == len(changed)
    assert len(base) == 32 and int(base, 16) >= 0  # XXH3-128, in hex


def _saved(**changes: Any) -> Saved:
    fields = {"format": CHECKPOINT_FORMAT, "version": fedrecsim.__version__, "scenario": None, "transcript": False, "data": "",
              "every": 1, "round": 1, "time": 1.0, "start": 0.0, "wall_s": 0.1, "world": b""}
    return Saved(**{**fields, **changes})


def test_load_reads_a_checkpoint_and_refuses_anything_else_naming_the_file(tmp_path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    with pytest.raises(CheckpointError, match=rf"^{path}: no checkpoint here: the run was not started with --checkpoint-every"):
        load(tmp_path)
    path.write_bytes(pickle.dumps(_saved(round=3)))
    assert load(tmp_path) == _saved(round=3)
    refused = [
        (b"not a pickle", r"does not read as a fedrecsim checkpoint \(UnpicklingError: "),
        (pickle.dumps(_saved())[:-5], r"does not read as a fedrecsim checkpoint \(\w+Error"),
        (pickle.dumps({"format": CHECKPOINT_FORMAT}), rf"is not a {CHECKPOINT_FORMAT} checkpoint$"),
        (pickle.dumps(_saved(format="fedrecsim-checkpoint/0")), rf"is not a {CHECKPOINT_FORMAT} checkpoint$"),
        (pickle.dumps(_saved(version="0.0.1")), rf"was written by fedrecsim 0.0.1; this is {fedrecsim.__version__}, which cannot resume it$"),
    ]
    for data, problem in refused:
        path.write_bytes(data)
        with pytest.raises(CheckpointError, match=rf"^{path}: {problem}"):
            load(tmp_path)
    path.unlink()
    path.mkdir()  # a folder where the file should be
    with pytest.raises(CheckpointError, match=r"does not read as a fedrecsim checkpoint \(IsADirectoryError"):
        load(tmp_path)


def test_a_live_object_is_saved_by_name_and_loaded_as_the_resumed_runs_object() -> None:
    first, second, kept = object(), object(), {"a": [1, 2]}
    buffer = io.BytesIO()
    checkpoint._WorldPickler(buffer, {"network": first}).dump({"ref": first, "value": kept, "again": [first]})
    loaded = checkpoint._WorldUnpickler(io.BytesIO(buffer.getvalue()), {"network": second}).load()
    assert loaded["ref"] is second and loaded["again"][0] is second
    assert loaded["value"] == kept and loaded["value"] is not kept
    with pytest.raises(CheckpointError, match=r"^network: the checkpoint refers to a party or object this run does not have$"):
        checkpoint._WorldUnpickler(io.BytesIO(buffer.getvalue()), {}).load()


def test_a_message_in_flight_given_as_a_read_only_view_is_saved_as_its_bytes_and_a_writable_view_refused() -> None:
    """`wire.encode` gives a large single-array message as a read-only view past its aligning pad; a
    checkpoint saves it as exactly those bytes. A writable view is state no message may be, and is refused."""
    padded = b"\x00" * 3 + bytes(range(200))
    buffer = io.BytesIO()
    checkpoint._WorldPickler(buffer, {}).dump({"in_flight": [memoryview(padded)[3:]]})
    loaded = checkpoint._WorldUnpickler(io.BytesIO(buffer.getvalue()), {}).load()
    assert type(loaded["in_flight"][0]) is bytes and loaded["in_flight"][0] == bytes(range(200))
    with pytest.raises(TypeError, match="memoryview"):
        checkpoint._WorldPickler(io.BytesIO(), {}).dump(memoryview(bytearray(b"mutable")))


def test_a_checkpoint_is_fsynced_then_renamed_over_the_last_then_its_folder_fsynced(tmp_path, monkeypatch) -> None:
    checkpoints = Checkpoints.create(tmp_path / "run", 1, None, False)
    folder = work_folder(tmp_path / "run")
    assert folder.is_dir() and checkpoints.folder == folder and not checkpoints.saved
    events: list[str] = []
    fsync, replace = os.fsync, os.replace

    def spy_fsync(fd: int) -> None:
        events.append(f"fsync {Path(os.readlink(f'/proc/self/fd/{fd}')).name}")
        fsync(fd)

    def spy_replace(src: Any, dst: Any) -> None:
        events.append(f"replace {Path(src).name} {Path(dst).name}")
        replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "fsync", spy_fsync)
    monkeypatch.setattr(checkpoint.os, "replace", spy_replace)
    checkpoints._write(_saved(round=1))
    checkpoints._write(_saved(round=2))
    step = ["fsync .checkpoint.pkl.partial", "replace .checkpoint.pkl.partial checkpoint.pkl", f"fsync {folder.name}"]
    assert events == step + step
    assert sorted(path.name for path in folder.iterdir()) == [CHECKPOINT_FILE]
    assert checkpoints.saved and load(folder).round == 2
    checkpoints.discard()
    assert list(tmp_path.iterdir()) == []


def test_discard_removes_a_partial_write_too(tmp_path) -> None:
    checkpoints = Checkpoints.create(tmp_path / "run", 1, None, False)
    (checkpoints.folder / ".checkpoint.pkl.partial").write_bytes(b"half")
    checkpoints.discard()
    assert list(tmp_path.iterdir()) == []
    checkpoints.discard()  # nothing left to remove: no error


def test_create_refuses_an_existing_work_folder_and_one_it_cannot_make(tmp_path) -> None:
    out = tmp_path / "run"
    Checkpoints.create(out, 2, None, False)
    (work_folder(out) / CHECKPOINT_FILE).write_bytes(b"an interrupted run's")
    with pytest.raises(OutputError, match=rf"^{work_folder(out)}: holds the checkpoints of an interrupted run of {out}: resume it "
                                          rf"\(fedrecsim run --resume {out}\) or remove this folder$"):
        Checkpoints.create(out, 2, None, False)
    assert (work_folder(out) / CHECKPOINT_FILE).read_bytes() == b"an interrupted run's"
    missing = tmp_path / "no" / "such" / "run"
    with pytest.raises(OutputError, match=rf"^{work_folder(missing)}: cannot create the checkpoint folder: No such file or directory$"):
        Checkpoints.create(missing, 2, None, False)


def test_a_new_checkpointing_starts_from_nothing_and_a_resumed_one_from_its_checkpoint(tmp_path) -> None:
    fresh = Checkpoints(tmp_path, 3, "scenario", True)
    assert (fresh.folder, fresh.every, fresh.scenario, fresh.transcript, fresh.resumed) == (tmp_path, 3, "scenario", True, None)
    assert (fresh.last_saved, fresh.wall_before_s, fresh.deferred) == (0, 0.0, 0)
    with pytest.raises(RuntimeError, match=r"^this run does not resume from a checkpoint$"):
        fresh.restore(None, None, {})
    saved = _saved(round=6, wall_s=2.5)
    resumed = Checkpoints(tmp_path, 3, "scenario", True, resumed=saved)
    assert (resumed.resumed, resumed.last_saved, resumed.wall_before_s) == (saved, 6, 2.5)


def _context() -> SimpleNamespace:
    network = SimpleNamespace(ledger=object(), faults=object(), links=object())
    return SimpleNamespace(network=network, model_use=object(), train=object(), test=object())


def test_the_live_objects_of_a_run_and_their_names() -> None:
    """The names a checkpoint file refers to live objects by (`_WorldPickler`)."""
    ctx = _context()
    alice, bob = Party(Role.USER, 0), Party(Role.USER, 1)
    population = SimpleNamespace(users={alice: object(), bob: object()})
    proxy = object()
    live = Checkpoints.live(ctx, population, {"proxy:0": proxy})
    assert live == {
        "context": ctx, "network": ctx.network, "ledger": ctx.network.ledger, "faults": ctx.network.faults,
        "links": ctx.network.links, "model_use": ctx.model_use, "train": ctx.train, "test": ctx.test,
        "population": population, "user user:0": population.users[alice], "user user:1": population.users[bob],
        "object proxy:0": proxy,
    }
    assert set(Checkpoints.live(ctx, None, {})) == {"context", "network", "ledger", "faults", "links", "model_use", "train", "test"}


def test_a_checkpoint_is_put_off_while_a_user_or_a_resting_actor_is_not_at_rest(tmp_path, monkeypatch) -> None:
    """Nothing is written and the deferral is counted; with everyone at rest the checkpoint is saved."""
    user, proxy = Party(Role.USER, 0), Party(Role.PROXY, 0)
    written: list[int] = []
    monkeypatch.setattr(Checkpoints, "_write", lambda self, saved: written.append(saved.round))
    monkeypatch.setattr(Checkpoints, "live", staticmethod(lambda ctx, population, objects: {}))

    def population(*restless: Party) -> SimpleNamespace:
        return SimpleNamespace(not_at_rest=lambda: list(restless), checkpoint_state=dict, users={})

    def actor(party: Party, at_rest: bool) -> SimpleNamespace:
        return SimpleNamespace(party=party, at_rest=lambda: at_rest)

    network = SimpleNamespace(checkpoint_state=dict, ledger=SimpleNamespace(checkpoint_state=dict))
    ctx = SimpleNamespace(network=network, model_use=SimpleNamespace())
    checkpoints = Checkpoints(tmp_path, 1, None, False)
    cases = [
        (population(user), (actor(proxy, True),), False),
        (population(), (actor(proxy, False),), False),
        (population(user), (), False),
        (None, (actor(proxy, False),), False),
        (population(), (actor(proxy, True),), True),
        (None, (), True),
    ]
    for round_index, (users, resting, saves) in enumerate(cases, start=1):
        trio.run(checkpoints.save, ctx, round_index, users, {}, {}, resting)
        assert (round_index in written) is saves, round_index
    assert checkpoints.deferred == 4 and checkpoints.last_saved == 6


@pytest.mark.parametrize("every, last_saved, round_index, rounds, due", [
    (1, 0, 1, 5, True), (2, 0, 1, 5, False), (2, 0, 2, 5, True), (2, 2, 3, 5, False), (2, 2, 4, 5, True),
    (2, 2, 5, 5, False),  # never after the last round: the run is about to complete
    (3, 1, 5, 9, True),  # a deferred one is due at the next round's end
    (1, 3, 4, 4, False),
])
def test_when_a_checkpoint_is_due(every: int, last_saved: int, round_index: int, rounds: int, due: bool) -> None:
    checkpoints = Checkpoints(Path("."), every, None, False)
    checkpoints.last_saved = last_saved
    assert checkpoints.due(round_index, rounds) is due


def test_an_interrupted_run_resumes_with_its_own_settings_and_keeps_saving(tmp_path, monkeypatch) -> None:
    tables = TINY["fcf: churn, dropout, a restart without state"]
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(tables, out=out, checkpoint_every=1, transcript=True, progress=InterruptAfter(2))
    assert load(work_folder(out)).round == 1  # the interrupt came before round 2's checkpoint
    rounds: list[int] = []
    write = Checkpoints._write
    monkeypatch.setattr(Checkpoints, "_write", lambda self, saved: (rounds.append(saved.round), write(self, saved)))
    resumed = fedrecsim.resume(out)
    assert rounds == [2, 3]  # round 4 is the last: nothing to save after it
    assert (out / "transcript.csv").exists() and not work_folder(out).exists()
    assert resumed.transcript_xxh3_128 == fedrecsim.run(tables).transcript_xxh3_128


class Thing:
    """A plain object with attributes, standing in for an actor."""


def _world_of_things() -> tuple[SimpleNamespace, SimpleNamespace, Thing, list[tuple[str, Any]]]:
    restored: list[tuple[str, Any]] = []
    network = SimpleNamespace(
        checkpoint_state=lambda: {"in_flight": 3}, restore_state=lambda state: restored.append(("network", state)),
        ledger=SimpleNamespace(checkpoint_state=lambda: {"msgs": 7}, restore_state=lambda state: restored.append(("ledger", state))),
        faults=object(), links=object(),
    )
    ctx = SimpleNamespace(network=network, model_use=SimpleNamespace(dropout=False), train=object(), test=object())
    users = {Party(Role.USER, 0): Thing(), Party(Role.USER, 1): Thing()}
    population = SimpleNamespace(
        users=users, not_at_rest=list, checkpoint_state=lambda: {"_followed": 5},
        restore_state=lambda state: restored.append(("population", state)),
    )
    return ctx, population, Thing(), restored


def test_references_to_users_the_population_and_the_drivers_objects_become_the_resumed_runs(tmp_path, monkeypatch) -> None:
    ctx, population, server, _ = _world_of_things()
    alice, bob = population.users.values()
    alice.partner, alice.grades = bob, np.arange(3.0)
    bob.keeps = {"server": server, "data": ctx.train}
    server.favourite, server.population, server.network = alice, population, ctx.network
    ctx.model_use.dropout = True
    written: list[Saved] = []
    monkeypatch.setattr(Checkpoints, "_write", lambda self, saved: written.append(saved))

    async def save() -> None:
        await Checkpoints(tmp_path, 1, None, False).save(ctx, 2, population, {"server": server}, {"metrics": [0.5]}, ())

    trio.run(save)
    [saved] = written

    ctx2, population2, server2, restored = _world_of_things()
    alice2, bob2 = population2.users.values()
    values = Checkpoints(tmp_path, 1, None, False, resumed=saved).restore(ctx2, population2, {"server": server2})
    assert values == {"metrics": [0.5]}
    assert alice2.partner is bob2 and bob2.keeps["server"] is server2 and bob2.keeps["data"] is ctx2.train
    np.testing.assert_array_equal(alice2.grades, np.arange(3.0))
    assert server2.favourite is alice2 and server2.population is population2 and server2.network is ctx2.network
    assert ctx2.model_use.dropout is True
    assert restored == [("network", {"in_flight": 3}), ("ledger", {"msgs": 7}), ("population", {"_followed": 5})]


def test_every_checkpoint_puts_the_writer_back_even_when_the_run_fails(tmp_path) -> None:
    write = Checkpoints._write
    tables = {**TINY["fcf: churn, dropout, a restart without state"]}
    tables["run"] = {**tables["run"], "max_virtual_s": 3.0}
    with pytest.raises(fedrecsim.PartyTimeout):
        every_checkpoint(tables, tmp_path / "run")
    assert Checkpoints._write is write and list(tmp_path.iterdir()) == []
