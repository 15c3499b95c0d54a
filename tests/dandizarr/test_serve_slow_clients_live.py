"""``dandizarr serve`` under slow clients (slowloris): sockets that trickle a request's head or
body a byte at a time hold no thread for long, normal requests and uploads go on meanwhile, the
slow sockets are closed after their deadline, and the open connections stay under the cap.

Figures: the test prints how long the normal requests took during the attack
(``pytest -s tests/dandizarr/test_serve_slow_clients_live.py``)."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pytest
import requests

from dandizarr.client import DandizarrClient
from tests.support.live_client import local_checksum, make_tree
from tests.support.processes import Processes, accepted_connections

SLOW_HEADS = 64
SLOW_BODIES = 8
TRICKLE_SECONDS = 0.5
# Deadlines short enough for a test; the trickles below would last minutes.
HEADER_TIMEOUT = "3"
BODY_TIMEOUT = "3"
# A bound on each normal request, so that a stalled server fails the test instead of hanging it.
CLIENT_TIMEOUT = 10
# How long the slow sockets may stay open before the test gives up on their closing.
CLOSE_WAIT_SECONDS = 30


@dataclass
class SlowSocket:
    sock: socket.socket
    trickle: bytes
    reply: bytes = b""
    closed: bool = False


@dataclass
class Trickler:
    """Sockets that each send their ``trickle`` a byte every TRICKLE_SECONDS, until the server
    closes them (or ``stop``)."""

    sockets: list[SlowSocket]
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            open_sockets = [s for s in self.sockets if not s.closed]
            if not open_sockets:
                return
            for slow in open_sockets:
                try:
                    slow.sock.send(slow.trickle[:1])
                    slow.trickle = slow.trickle[1:]
                except OSError:
                    slow.closed = True
            readable, _, _ = select.select(
                [s.sock for s in open_sockets if not s.closed], [], [], TRICKLE_SECONDS
            )
            for slow in open_sockets:
                if slow.sock in readable:
                    try:
                        data = slow.sock.recv(4096)
                    except OSError:
                        data = b""
                    slow.reply += data
                    slow.closed = slow.closed or not data

    def still_open(self) -> int:
        return sum(not s.closed for s in self.sockets)


def connect(url: str, first_bytes: bytes, trickle: bytes) -> SlowSocket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT)
    sock.sendall(first_bytes)
    return SlowSocket(sock, trickle)


@pytest.fixture
def trickling(processes: Processes, tmp_path: Path) -> Iterator[tuple[str, str, Trickler]]:
    with processes.serve(
        tmp_path / "var",
        DANDIZARR_HEADER_TIMEOUT_SECONDS=HEADER_TIMEOUT,
        DANDIZARR_BODY_TIMEOUT_SECONDS=BODY_TIMEOUT,
    ) as (url, token):
        head = b"GET /api/info/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 500
        body_head = (
            "POST /api/dandisets/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Token {token}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n"
        ).encode()
        slow = [connect(url, b"", head) for _ in range(SLOW_HEADS)]
        slow += [connect(url, body_head, b'{"name": "' + b"a" * 99990) for _ in range(SLOW_BODIES)]
        trickler = Trickler(slow)
        thread = threading.Thread(target=trickler.run, daemon=True)
        thread.start()
        try:
            yield url, token, trickler
        finally:
            trickler.stop.set()
            thread.join()
            for s in slow:
                s.sock.close()


def test_normal_requests_are_served_while_slow_sockets_trickle(
    trickling: tuple[str, str, Trickler], tmp_path: Path
) -> None:
    url, token, trickler = trickling
    time.sleep(2 * TRICKLE_SECONDS)  # every slow socket has sent bytes
    root = tmp_path / "z.zarr"
    make_tree(root, 6)
    timings = []
    for _ in range(5):
        started = time.monotonic()
        reply = requests.get(url + "/api/info/", timeout=CLIENT_TIMEOUT)
        timings.append(time.monotonic() - started)
        assert reply.status_code == 200
    started = time.monotonic()
    with DandizarrClient(url, token, jobs=4, timeout=CLIENT_TIMEOUT) as client:
        dandiset = client.create_dandiset("slowloris")["identifier"]
        result = client.upload(root, dandiset=dandiset)
    upload_seconds = time.monotonic() - started
    assert result.ok, result.to_json()
    assert result.server_checksum == local_checksum(root)
    open_during = trickler.still_open()
    print(
        f"\n{SLOW_HEADS} slow heads + {SLOW_BODIES} slow bodies ({open_during} still open "
        f"after the requests): GET /api/info/ "
        + ", ".join(f"{t * 1000:.0f} ms" for t in timings)
        + f"; upload of 6 files (dandiset created, batch, checksum) {upload_seconds:.2f} s"
    )

    # The server closes every slow socket after its deadline (the trickles would last minutes).
    deadline = time.monotonic() + CLOSE_WAIT_SECONDS
    while trickler.still_open() and time.monotonic() < deadline:
        time.sleep(TRICKLE_SECONDS)
    assert trickler.still_open() == 0
    heads, bodies = trickler.sockets[:SLOW_HEADS], trickler.sockets[SLOW_HEADS:]
    # The replies are best effort (a reset may lose them); most arrive.
    print(
        f"408 replies to slow heads: {sum(s.reply.startswith(b'HTTP/1.1 408') for s in heads)}"
        f"/{SLOW_HEADS}; 400 replies to slow bodies: "
        f"{sum(s.reply.startswith(b'HTTP/1.1 400') for s in bodies)}/{SLOW_BODIES}"
    )
    assert any(s.reply.startswith(b"HTTP/1.1 408") for s in heads)


def test_open_connections_stay_under_the_cap(processes: Processes, tmp_path: Path) -> None:
    cap = 20
    with processes.serve(
        tmp_path / "var",
        DANDIZARR_MAX_CONNECTIONS=str(cap),
        # Long enough that no idle socket is closed while the test counts.
        DANDIZARR_HEADER_TIMEOUT_SECONDS="60",
    ) as (url, _):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        idle = [socket.create_connection((host, int(port))) for _ in range(3 * cap)]
        try:
            deadline = time.monotonic() + CLIENT_TIMEOUT
            while accepted_connections(url) < cap and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)  # time for the server to accept more, if it would
            assert accepted_connections(url) == cap
        finally:
            for sock in idle:
                sock.close()
        # Below the cap again, the server accepts and answers.
        assert requests.get(url + "/api/info/", timeout=CLIENT_TIMEOUT).status_code == 200


def test_kept_alive_connections_and_refused_heads(processes: Processes, tmp_path: Path) -> None:
    with processes.serve(tmp_path / "var", DANDIZARR_HEADER_TIMEOUT_SECONDS="2") as (url, _):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT) as sock:
            # A body the view never reads is read past, and the connection serves the next
            # request (its head arriving in two parts).
            sock.sendall(
                b"POST /api/info/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n\r\n"
                + b"x" * 5000
            )
            reader = sock.makefile("rb")
            assert reader.readline().startswith(b"HTTP/1.1 405")
            skip_reply(reader)
            sock.sendall(b"GET /api/info/ HTTP/1.1\r\n")
            time.sleep(0.2)
            sock.sendall(b"Host: 127.0.0.1\r\n\r\n")
            assert reader.readline().startswith(b"HTTP/1.1 200")
            skip_reply(reader)
            # A kept-alive connection's next head has the same deadline.
            sock.sendall(b"GET /api/info/ HTTP/1.1\r\n")
            assert reader.readline().startswith(b"HTTP/1.1 408")
            skip_reply(reader)
            assert reader.read() == b""
        with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT) as sock:
            sock.sendall(b"GET /api/info/ HTTP/1.1\r\nX-Big: " + b"a" * (70 * 1024))
            reply = sock.makefile("rb").read()
            assert reply.startswith(b"HTTP/1.1 431")
            assert b'"detail"' in reply


def skip_reply(reader: BinaryIO) -> None:
    """Read the rest of a reply whose status line was read: headers, then Content-Length bytes."""
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    reader.read(length)
