"""The launcher's reading of its children's reports: which error it raises when several fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from fedrecsim.errors import PartyTimeout, ProtocolViolation, SimulationError
from fedrecsim.launcher import PEER_GONE_GRACE_S, _Child, _Stages
from fedrecsim.network.tcp import PeerGone


def _stages(tmp_path: Path, reports: list[tuple[int, dict]]) -> _Stages:
    """Stages over two children (never started: only their names matter) that report ``reports``."""
    sender, receiver = trio.open_memory_channel(len(reports))
    for report in reports:
        sender.send_nowait(report)
    children = [_Child(position, name, None, tmp_path / f"stderr-{position}.txt") for position, name in enumerate(("server", "users"))]  # type: ignore[arg-type]
    return _Stages(children, receiver, lambda completed: None)  # type: ignore[arg-type]


async def test_the_error_a_broken_connection_is_the_consequence_of_is_raised_first(autojump_clock, tmp_path: Path) -> None:
    stages = _stages(tmp_path, [
        (1, {"error": "PeerGone", "message": "the connection to process 0 broke: that process is gone"}),
        (1, {"eof": True}),
        (0, {"error": "PartyTimeout", "message": "server:0 waited for every user's join"}),
    ])
    with pytest.raises(PartyTimeout, match=r"process 0 \(server\): server:0 waited for every user's join"):
        await stages.await_one(0, "finished", 60.0)


async def test_a_peer_gone_alone_is_raised_after_the_grace(autojump_clock, tmp_path: Path) -> None:
    stages = _stages(tmp_path, [(1, {"error": "PeerGone", "message": "the connection to process 0 broke"})])
    start = trio.current_time()
    with pytest.raises(PeerGone, match=r"process 1 \(users\): the connection to process 0 broke"):
        await stages.await_one(0, "finished", 600.0)
    assert trio.current_time() - start == pytest.approx(PEER_GONE_GRACE_S)


async def test_an_error_of_another_type_is_a_simulation_error_naming_it(autojump_clock, tmp_path: Path) -> None:
    stages = _stages(tmp_path, [(0, {"error": "MemoryError", "message": "out of memory"})])
    with pytest.raises(SimulationError, match=r"process 0 \(server\): out of memory \(MemoryError\)") as info:
        await stages.await_all("ready", 60.0)
    assert type(info.value) is SimulationError


async def test_a_child_that_ends_without_a_word_is_named_with_its_stderr(autojump_clock, tmp_path: Path) -> None:
    (tmp_path / "stderr-1.txt").write_text("Traceback ...\nSegmentation fault\n")
    stages = _stages(tmp_path, [(0, {"ready": True}), (1, {"eof": True})])
    with pytest.raises(ProtocolViolation, match="process 1 \\(users\\) ended before it reported 'ready'; its stderr: Traceback ...\nSegmentation fault"):
        await stages.await_all("ready", 60.0)


async def test_silence_past_the_timeout_is_a_party_timeout_naming_the_late(autojump_clock, tmp_path: Path) -> None:
    stages = _stages(tmp_path, [(0, {"port": 1}), (0, {"progress": 1})])
    with pytest.raises(PartyTimeout, match=r"process 1 \(users\) did not report 'port' within 60 s"):
        await stages.await_all("port", 60.0)
