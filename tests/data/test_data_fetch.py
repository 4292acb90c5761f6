"""Fetching a data set from a loopback HTTP server: all or nothing, and a clear error for every failure.

The server (http.server in a thread on 127.0.0.1, port 0) serves archives the tests build in MovieLens
format; no test touches the real network. After every failure the data home holds nothing of the attempt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import json
import re
import socket
import struct
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fedrecsim.cli import main
from fedrecsim.data import DATASETS, FETCH_RECORD, NON_NUMERIC_ZIP_SILO, DownloadProgress, fetch, licence_text, load
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.runner import run

OFFICIAL_100K = "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229"


def movielens_lines(separator: str) -> str:
    """A fixed small rating file: 30 users, 40 items, 12 ratings per user."""
    rng = np.random.default_rng(15)
    lines = []
    for user in range(1, 31):
        for item in rng.choice(np.arange(1, 41), size=12, replace=False):
            lines.append(separator.join(map(str, (user, item, int(rng.integers(1, 6)), 881250949 + user))))
    return "\n".join(lines) + "\n"


def zip_archive(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, text in members.items():
            bundle.writestr(name, text)
    return buffer.getvalue()


def tar_archive(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


ML100K = zip_archive({"ml-100k/u.data": movielens_lines("\t"), "ml-100k/README": "test data\n"})
ML100K_SHA256 = hashlib.sha256(ML100K).hexdigest()


class Server:
    """Serves ``routes[path] = (body, declared_length)``; records the paths asked for.

    A declared length of -1 sends the body as one chunk of chunked transfer encoding, cut off before
    the chunk ends (a declared length > the body's is the same fault without chunks); -2 sends the body
    and then nothing until `release` is set; -3 resets the connection after the headers.
    """

    def __init__(self) -> None:
        self.routes: dict[str, tuple[bytes, int]] = {}
        self.requests: list[str] = []
        self.release = threading.Event()
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests.append(self.path)
                if self.path not in served.routes:
                    self.send_error(404, "Not Found")
                    return
                body, declared = served.routes[self.path]
                self.send_response(200)
                self.close_connection = True
                if declared in (-2, -3):
                    self.send_header("Content-Length", str(len(body) + 1000))
                    self.end_headers()
                    self.wfile.write(body)
                    if declared == -2:
                        served.release.wait(10)
                        return
                    time.sleep(0.2)  # the client is waiting in read() when the reset comes
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if declared < 0:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n" % (2 * len(body)) + body)
                    return
                self.send_header("Content-Length", str(declared))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    def serve(self, path: str, body: bytes, declared: int | None = None) -> str:
        self.routes[path] = (body, len(body) if declared is None else declared)
        return self.url(path)

    def url(self, path: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    serving = Server()
    serving.thread.start()
    try:
        yield serving
    finally:
        serving.release.set()
        serving.httpd.shutdown()
        serving.httpd.server_close()
        serving.thread.join()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The data home of the test, also as FEDRECSIM_DATA."""
    folder = tmp_path / "data-home"
    monkeypatch.setenv("FEDRECSIM_DATA", str(folder))
    return folder


def contents(folder: Path) -> list[str]:
    """Every path under ``folder``, hidden temporary ones included."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) if folder.exists() else []


SCENARIO = {
    "run": {"protocol": "fcf", "name": "fetched", "seed": 1, "rounds": 2},
    "data": {"source": "movielens-100k"},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "availability": {"model": "always"},
    "protocol": {"d": 4},
}


def test_a_fetched_data_set_is_verified_unpacked_and_read_by_a_scenario_without_a_path(server, home) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    fetched = fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256)
    assert fetched.path == home / "movielens-100k" / "ml-100k"
    assert (fetched.sha256, fetched.size, fetched.verified, fetched.downloaded) == (ML100K_SHA256, len(ML100K), True, True)
    assert contents(home) == [
        "movielens-100k", f"movielens-100k/{FETCH_RECORD}", "movielens-100k/ml-100k",
        "movielens-100k/ml-100k/README", "movielens-100k/ml-100k/u.data",
    ]
    record = json.loads((home / "movielens-100k" / FETCH_RECORD).read_text())
    assert record == {"name": "movielens-100k", "url": url, "sha256": ML100K_SHA256, "size": len(ML100K), "verified": True}
    assert len(load("movielens-100k", "")) == 360

    result = run(SCENARIO)
    assert result.result["rounds_completed"] == 2
    assert result.result["scenario"]["data"]["path"] == ""  # result.json keeps the scenario as written
    assert result.outcome.state is not None and result.metrics


def test_files_beside_the_ratings_are_found_in_the_fetched_copy_too(server, home) -> None:
    """The zip-code silo partition reads u.user next to u.data: the protocol sees the fetched folder."""
    zips = ["02139", "10001", "T8H1N"] * 10
    users = "".join(f"{user}|30|M|engineer|{code}\n" for user, code in enumerate(zips, 1))
    body = zip_archive({"ml-100k/u.data": movielens_lines("\t"), "ml-100k/u.user": users})
    fetch("movielens-100k", accept_licence=True, url=server.serve("/a.zip", body), verify=False)
    result = run({
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"source": "movielens-100k", "silo_partition": "zip", "split": "users", "test_fraction": 0.2},
        "protocol": {"k": 2, "rank": 3, "support": 10, "nmf_iterations": 5, "baselines": False},
    })
    silos = {party.index: sorted(set(users % 3)) for party, users in result.outcome.state["silo_users"].items()}
    assert silos == {0: [0], 1: [1], NON_NUMERIC_ZIP_SILO: [2]}  # dense user u is MovieLens id u + 1
    assert result.result["scenario"]["data"]["path"] == ""


def test_while_downloading_the_data_home_holds_only_hidden_temporary_paths(server, tmp_path) -> None:
    home = tmp_path / "a" / "b"  # made with its parents
    seen: list[list[str]] = []
    url = server.serve("/ml-100k.zip", ML100K)
    fetch("movielens-100k", accept_licence=True, url=url, home=home, sha256=ML100K_SHA256,
          progress=lambda *_: seen.append(sorted(path.name for path in home.iterdir())))
    assert seen
    for names in seen:  # tempfile's random part: eight letters, digits or underscores
        assert sorted(re.sub(r"^\.movielens-100k-\w{8}\.", ".movielens-100k-*.", name) for name in names) == [
            ".movielens-100k-*.download", ".movielens-100k-*.unpack",
        ]
    assert sorted(path.name for path in home.iterdir()) == ["movielens-100k"]
    assert (home / "movielens-100k" / FETCH_RECORD).read_text() == (
        "{\n"
        '  "name": "movielens-100k",\n'
        f'  "url": "{url}",\n'
        f'  "sha256": "{ML100K_SHA256}",\n'
        f'  "size": {len(ML100K)},\n'
        '  "verified": true\n'
        "}\n"
    )


def test_a_concurrent_fetch_that_finished_first_wins(server, tmp_path) -> None:
    home = tmp_path / "not-the-data-home"

    def other_fetch_finishes(*_: object) -> None:
        folder = home / "movielens-100k" / "ml-100k"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "u.data").write_text("1\t1\t5\t0\n")

    url = server.serve("/ml-100k.zip", ML100K)
    fetched = fetch(
        "movielens-100k", accept_licence=True, home=home, url=url, sha256=ML100K_SHA256, progress=other_fetch_finishes
    )
    assert (fetched.path, fetched.downloaded, fetched.sha256) == (home / "movielens-100k" / "ml-100k", False, "")
    assert contents(home) == ["movielens-100k", "movielens-100k/ml-100k", "movielens-100k/ml-100k/u.data"]
    assert len(load("movielens-100k", fetched.path)) == 1


def test_a_folder_put_in_the_way_during_the_download_is_never_touched(server, home) -> None:
    def someone_makes_a_folder(*_: object) -> None:
        (home / "movielens-100k").mkdir(exist_ok=True)
        (home / "movielens-100k" / "mine.txt").write_text("mine")

    url = server.serve("/ml-100k.zip", ML100K)
    with pytest.raises(DatasetError, match="exists but holds no ml-100k/u.data; move it away to fetch movielens-100k"):
        fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256, progress=someone_makes_a_folder)
    assert contents(home) == ["movielens-100k", "movielens-100k/mine.txt"]


def test_fetching_again_into_a_given_home_downloads_nothing(server, tmp_path) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    fetch("movielens-100k", accept_licence=True, url=url, home=tmp_path, sha256=ML100K_SHA256)
    again = fetch("movielens-100k", accept_licence=True, url=url, home=tmp_path, sha256=ML100K_SHA256)
    assert (again.downloaded, again.sha256) == (False, ML100K_SHA256)
    assert server.requests == ["/ml-100k.zip"]


def test_fetching_again_downloads_nothing_and_reports_the_recorded_archive(server, home) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256)
    again = fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256)
    assert server.requests == ["/ml-100k.zip"]
    assert again == dataclasses.replace(again, path=home / "movielens-100k" / "ml-100k", sha256=ML100K_SHA256,
                                        size=len(ML100K), verified=True, downloaded=False)
    (home / "movielens-100k" / FETCH_RECORD).write_text("not json")
    unknown = fetch("movielens-100k", accept_licence=True, url=url)
    assert (unknown.sha256, unknown.size, unknown.verified, unknown.downloaded) == ("", 0, False, False)
    assert server.requests == ["/ml-100k.zip"]


def test_a_checksum_mismatch_against_the_published_digest_leaves_nothing(server, home) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url)
    assert str(caught.value) == (
        f"{url}: SHA-256 mismatch: expected {OFFICIAL_100K}, got {ML100K_SHA256} "
        f"({len(ML100K):,} bytes); the download was discarded"
    )
    assert caught.value.path == url
    assert contents(home) == []


def test_a_download_shorter_than_its_content_length_leaves_nothing(server, home) -> None:
    url = server.serve("/ml-100k.zip", ML100K[:1000], declared=len(ML100K))
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256)
    assert f"{url}: the download broke off after 1,000" in str(caught.value)
    assert contents(home) == []


def test_a_chunked_download_cut_off_mid_chunk_leaves_nothing(server, home) -> None:
    url = server.serve("/ml-100k.zip", b"x" * 100_000, declared=-1)
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256)
    assert str(caught.value) == f"{url}: the download broke off after 65,536 bytes"  # one whole read
    assert contents(home) == []


def test_a_server_that_stops_sending_times_out_and_leaves_nothing(server, home) -> None:
    url = server.serve("/ml-100k.zip", b"x" * 70_000, declared=-2)
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256, timeout_s=0.3)
    assert str(caught.value) == f"{url}: no data for 0.3 s after 65,536 bytes; try again later"
    assert contents(home) == []


def test_a_connection_reset_mid_download_leaves_nothing(server, home) -> None:
    url = server.serve("/ml-100k.zip", b"", declared=-3)
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url, sha256=ML100K_SHA256)
    assert str(caught.value) == f"{url}: the download broke off after 0 bytes: Connection reset by peer"
    assert contents(home) == []


def closed_port_url() -> str:
    """An address on a port that was free a moment ago: nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/ml-100k.zip"


def test_an_unreachable_host_leaves_nothing(home) -> None:
    url = closed_port_url()
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url, timeout_s=5)
    assert str(caught.value) == f"{url}: cannot download: Connection refused"
    assert contents(home) == []


def test_an_http_error_is_named(server, home) -> None:
    with pytest.raises(DatasetError, match=r"/missing.zip: the server answered HTTP 404 Not Found$"):
        fetch("movielens-100k", accept_licence=True, url=server.url("/missing.zip"))
    assert contents(home) == []


def test_an_address_urllib_cannot_open_is_named(home) -> None:
    with pytest.raises(DatasetError, match=r"^nowhere: not a URL urllib can open: unknown url type: 'nowhere'$"):
        fetch("movielens-100k", accept_licence=True, url="nowhere")
    assert contents(home) == []


@pytest.mark.parametrize("body, problem", [
    (b"this is no archive", "the download is neither a zip nor a tar archive"),
    (zip_archive({"ml-100k/u.item": "1|x\n"}), "the archive holds no ml-100k/u.data"),
    (tar_archive({"../escape/u.data": "1\t1\t5\t0\n"}),
     "cannot unpack the archive: '../escape/u.data' would be extracted to '.*', which is outside the destination$"),
])
def test_an_archive_that_does_not_unpack_to_the_loaders_file_leaves_nothing(server, home, body, problem) -> None:
    url = server.serve("/archive", body)
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=url, sha256=hashlib.sha256(body).hexdigest())
    assert re.match(re.escape(f"{url}: ") + problem, str(caught.value))
    assert contents(home) == []
    assert not (home.parent / "escape").exists()


def test_a_tar_archive_is_unpacked_too(server, home) -> None:
    body = tar_archive({"ml-1m/ratings.dat": movielens_lines("::")})
    url = server.serve("/ml-1m.tar.gz", body)
    fetched = fetch("movielens-1m", accept_licence=True, url=url, sha256=hashlib.sha256(body).hexdigest())
    assert fetched.path == home / "movielens-1m" / "ml-1m"
    assert len(load("movielens-1m", "")) == 360


def test_nothing_happens_before_the_licence_is_accepted(server, home) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", url=url, sha256=ML100K_SHA256)
    assert str(caught.value) == (
        "movielens-100k: not fetched: its licence must be accepted first "
        "(https://files.grouplens.org/datasets/movielens/ml-100k-README.txt); "
        "pass --accept-licence (accept_licence=True) to accept it"
    )
    assert server.requests == [] and not home.exists()


def test_an_entry_without_a_published_digest_needs_one_or_no_verify(server, home) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    unpublished = dataclasses.replace(DATASETS["movielens-100k"], sha256=None, url=url)
    with pytest.raises(DatasetError) as caught:
        fetch(unpublished, accept_licence=True)
    assert str(caught.value) == (
        "movielens-100k: no SHA-256 of its archive is published, so the download cannot be verified; give the "
        "digest you trust with --sha256 HEX (sha256=), or fetch it unverified with --no-verify (verify=False), "
        "which prints the digest of what was downloaded"
    )
    assert server.requests == [] and not home.exists()

    unverified = fetch(unpublished, accept_licence=True, verify=False)
    assert (unverified.sha256, unverified.verified, unverified.downloaded) == (ML100K_SHA256, False, True)
    assert json.loads((home / "movielens-100k" / FETCH_RECORD).read_text())["verified"] is False


def test_a_minute_without_data_is_a_timeout_by_default() -> None:
    assert inspect.signature(fetch).parameters["timeout_s"].default == 60.0


def test_no_verify_ignores_even_a_given_digest(server, tmp_path) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    fetched = fetch("movielens-100k", accept_licence=True, url=url, home=tmp_path, sha256="0" * 64, verify=False)
    assert (fetched.sha256, fetched.verified) == (ML100K_SHA256, False)


def test_a_given_digest_is_checked_in_any_case(server, tmp_path) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    fetched = fetch("movielens-100k", accept_licence=True, url=url, home=tmp_path, sha256=f"  {ML100K_SHA256.upper()}\n")
    assert fetched.verified and fetched.sha256 == ML100K_SHA256


@pytest.mark.parametrize("digest", ["abc", "g" * 64, "0" * 65, ""])
def test_a_malformed_digest_is_refused_before_downloading(server, home, digest) -> None:
    with pytest.raises(ConfigError) as caught:
        fetch("movielens-100k", accept_licence=True, url=server.url("/x"), sha256=digest)
    assert caught.value.key_path == "sha256"
    assert str(caught.value) == f"sha256: expected 64 hexadecimal digits, got {digest!r}"
    assert server.requests == [] and not home.exists()


def test_a_folder_in_the_way_is_never_touched(server, home) -> None:
    (home / "movielens-100k").mkdir(parents=True)
    (home / "movielens-100k" / "mine.txt").write_text("mine")
    with pytest.raises(DatasetError) as caught:
        fetch("movielens-100k", accept_licence=True, url=server.serve("/a.zip", ML100K), sha256=ML100K_SHA256)
    assert str(caught.value) == (
        f"{home / 'movielens-100k'}: exists but holds no ml-100k/u.data; move it away to fetch movielens-100k"
    )
    assert contents(home) == ["movielens-100k", "movielens-100k/mine.txt"] and server.requests == []


def test_a_data_home_that_cannot_be_created_is_named(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DatasetError, match=r"file/home: cannot write in the data folder: Not a directory$"):
        fetch("movielens-100k", accept_licence=True, home=tmp_path / "file" / "home", sha256="0" * 64)


def test_an_unknown_name_lists_the_registered_ones(home) -> None:
    with pytest.raises(ConfigError, match="no registered data set 'netflix'; registered: movielens-100k, movielens-1m"):
        fetch("netflix", accept_licence=True)


def test_progress_reports_every_chunk_up_to_the_total(server, tmp_path) -> None:
    body = zip_archive({"ml-100k/u.data": movielens_lines("\t"), "ml-100k/noise": "x" * 200_000})
    url = server.serve("/big.zip", body)
    seen: list[tuple[int, int | None]] = []
    fetch("movielens-100k", accept_licence=True, url=url, home=tmp_path, verify=False, progress=lambda *a: seen.append(a))
    assert len(seen) >= 2 and seen[-1] == (len(body), len(body))
    assert all(total == len(body) for _, total in seen)
    assert [done for done, _ in seen] == sorted({done for done, _ in seen})


def test_a_local_copy_by_file_url(tmp_path) -> None:
    archive = tmp_path / "ml-100k.zip"
    archive.write_bytes(ML100K)
    fetched = fetch("movielens-100k", accept_licence=True, url=archive.as_uri(), home=tmp_path / "h", sha256=ML100K_SHA256)
    assert fetched.downloaded and fetched.verified


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def drawn(stream: io.StringIO) -> list[str]:
    return stream.getvalue().split("\r")[1:]


def test_the_download_progress_line() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = DownloadProgress(stream, redraw_every_s=0.5, clock=clock)
    bar(1_050_000, 4_000_000)  # the first call draws
    clock.now += 0.25
    bar(2_000_000, 4_000_000)  # within the redraw interval: not drawn
    clock.now += 0.25
    bar(3_900_000, 4_000_000)  # exactly the interval since the last draw: drawn
    clock.now += 0.0625
    bar(3_950_000, 4_000_000)  # the interval counts from that draw again: not drawn
    clock.now += 0.0625
    bar(4_000_000, 4_000_000)  # the last one always is
    clock.now += 0.125
    bar(5_000_000, 4_000_000)  # more than announced: the bar stays full
    assert drawn(stream) == [
        "[#######.......................] 1.1 / 4.0 MB  0.0s",
        "[#############################.] 3.9 / 4.0 MB  0.5s",
        "[##############################] 4.0 / 4.0 MB  0.6s",
        "[##############################] 5.0 / 4.0 MB  0.8s",
    ]
    bar.close()
    assert stream.getvalue().endswith("\n")
    bar.close()
    assert stream.getvalue().count("\n") == 1


def test_the_download_progress_of_a_total_that_is_not_exactly_in_megabytes() -> None:
    stream = io.StringIO()
    DownloadProgress(stream, clock=Clock())(550_000, 1_050_000)
    assert drawn(stream) == ["[###############...............] 0.6 / 1.1 MB  0.0s"]


def test_the_download_progress_without_a_total() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = DownloadProgress(stream, clock=clock)
    bar(1_050_000, None)
    clock.now += 1
    bar(2_650_000, 0)
    assert drawn(stream) == ["1.1 MB  0.0s", "2.6 MB  1.0s"]


def test_the_download_progress_defaults_to_a_tenth_of_a_second_on_the_real_clock() -> None:
    bar = DownloadProgress(io.StringIO())
    assert bar.redraw_every_s == 0.1 and bar.clock is time.perf_counter


def test_nothing_drawn_nothing_closed() -> None:
    stream = io.StringIO()
    DownloadProgress(stream).close()
    assert stream.getvalue() == ""


def test_the_licence_text() -> None:
    assert licence_text("movielens-1m").splitlines() == [
        "movielens-1m (MovieLens 1M (6,040 users, 3,706 movies, 1,000,209 ratings 1-5)) comes under this licence:",
        f"  {DATASETS['movielens-1m'].licence}",
        "  full terms: https://files.grouplens.org/datasets/movielens/ml-1m-README.txt",
    ]


# The command line


SCENARIO_FILE = """
[run]
protocol = "fcf"
rounds = 2
[data]
source = "movielens-100k"
[protocol]
d = 4
"""


def test_cli_fetch_then_list_info_and_run(server, home, tmp_path, capsys) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    assert main(["data", "fetch", "movielens-100k", "--accept-licence", "--url", url, "--sha256", ML100K_SHA256]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("movielens-100k (MovieLens 100K") and out[0].endswith("comes under this licence:")
    assert out[2] == "  full terms: https://files.grouplens.org/datasets/movielens/ml-100k-README.txt"
    assert out[3:] == [
        f"sha256 {ML100K_SHA256} ({len(ML100K):,} bytes), verified",
        f"movielens-100k: fetched into {home / 'movielens-100k' / 'ml-100k'}",
        'a scenario reads it with data.source = "movielens-100k" and no data.path',
    ]

    assert main(["data", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[1].split()[:4] == ["movielens-100k", "4.9", "MB", "yes"]
    assert listed[2].split()[:4] == ["movielens-1m", "5.9", "MB", "no"]
    assert listed[-1] == f"data home: {home} (set FEDRECSIM_DATA to use another folder)"

    assert main(["data", "info", "movielens-100k"]) == 0
    assert f"  fetched      yes, in {home / 'movielens-100k' / 'ml-100k'}" in capsys.readouterr().out

    scenario = tmp_path / "fetched.toml"
    scenario.write_text(SCENARIO_FILE)
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert json.loads((tmp_path / "out" / "result.json").read_text())["rounds_completed"] == 2

    assert main(["data", "fetch", "movielens-100k", "--accept-licence", "--url", url]) == 0
    assert f"movielens-100k: already fetched, in {home / 'movielens-100k' / 'ml-100k'}" in capsys.readouterr().out
    assert server.requests == ["/ml-100k.zip"]


def test_cli_fetch_into_another_folder_says_how_to_read_it(server, home, tmp_path, capsys) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    elsewhere = tmp_path / "elsewhere"
    assert main(["data", "fetch", "movielens-100k", "--accept-licence", "--url", url, "--no-verify", "--dir", str(elsewhere)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [
        f"sha256 {ML100K_SHA256} ({len(ML100K):,} bytes), NOT verified (--no-verify)",
        f"movielens-100k: fetched into {elsewhere / 'movielens-100k' / 'ml-100k'}",
        f'a scenario reads it with data.path = "{elsewhere / "movielens-100k" / "ml-100k"}" '
        f"(or set FEDRECSIM_DATA={elsewhere})",
    ]
    assert not home.exists()


def test_cli_fetch_into_the_data_home_named_with_dir(server, home, capsys) -> None:
    url = server.serve("/ml-100k.zip", ML100K)
    assert main(["data", "fetch", "movielens-100k", "--accept-licence", "--url", url, "--no-verify", "--dir", str(home)]) == 0
    assert capsys.readouterr().out.endswith('a scenario reads it with data.source = "movielens-100k" and no data.path\n')


@pytest.mark.parametrize("arguments, message", [
    ([], "movielens-100k: not fetched: its licence must be accepted first"),
    (["--accept-licence", "--url", closed_port_url()], "cannot download: Connection refused"),
    (["--accept-licence", "--sha256", "xyz"], "sha256: expected 64 hexadecimal digits, got 'xyz'"),
])
def test_cli_fetch_failures_exit_2_with_one_line(home, capsys, arguments, message) -> None:
    assert main(["data", "fetch", "movielens-100k", *arguments]) == 2
    captured = capsys.readouterr()
    assert "comes under this licence" in captured.out
    assert captured.err.startswith("fedrecsim: error: ") and message in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert contents(home) == []


def test_cli_sha256_and_no_verify_exclude_each_other(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["data", "fetch", "movielens-100k", "--sha256", "0" * 64, "--no-verify"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_cli_a_scenario_naming_an_unfetched_data_set_says_how_to_fetch_it(home, tmp_path, capsys) -> None:
    scenario = tmp_path / "unfetched.toml"
    scenario.write_text(SCENARIO_FILE)
    assert main(["run", str(scenario), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"fedrecsim: error: data.path: empty, and data set 'movielens-100k' has not been fetched into "
        f"{home / 'movielens-100k'}; fetch it with `fedrecsim data fetch movielens-100k --accept-licence` "
        "(it shows the licence first), or set data.path to your copy\n"
    )
    assert not (tmp_path / "out").exists()


def test_cli_unknown_data_set(capsys) -> None:
    assert main(["data", "info", "netflix"]) == 2
    assert capsys.readouterr().err == (
        "fedrecsim: error: data.source: no registered data set 'netflix'; registered: movielens-100k, movielens-1m, lastfm, filmtrust, citeulike-a, gowalla, yelp2018\n"
    )


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_cli_draws_the_progress_bar_on_a_terminal_only_unless_quiet(server, home, monkeypatch, capsys, quiet) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    url = server.serve("/ml-100k.zip", ML100K)
    assert main(["data", "fetch", "movielens-100k", "--accept-licence", "--url", url, "--no-verify"]
                + ["--quiet"] * quiet) == 0
    if quiet:
        assert terminal.getvalue() == ""
    else:
        assert terminal.getvalue().startswith("\r[##############################] 0.0 / 0.0 MB  ")
        assert terminal.getvalue().endswith("s\n")
