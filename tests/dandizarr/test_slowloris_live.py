"""``dandizarr serve`` keeps answering while slow clients trickle (slowloris): 64 sockets that
send a request's head a byte every half second hold no thread, are answered 408 and closed at
the head deadline; a body that stops arriving is cut at the body timeout; open connections are
capped. Normal requests and an upload go through meanwhile (dandizarr.httpworker).

The figures (how long normal requests took during the attack) are printed, not asserted."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import requests

from dandizarr.client import DandizarrClient
from tests.support.processes import serve_process

SLOW = 64
HEAD = b"GET /api/info/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 200 + b"\r\n\r\n"


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


class Trickle:
    """``count`` sockets, each sent the next byte of ``HEAD`` every ``interval`` seconds."""

    def __init__(self, url: str, count: int, interval: float = 0.5) -> None:
        self.sockets = [_connect(url) for _ in range(count)]
        self.closed = [False] * count
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for position in range(len(HEAD)):
            if self.stop.wait(self.interval):
                return
            for index, sock in enumerate(self.sockets):
                if self.closed[index]:
                    continue
                try:
                    sock.send(HEAD[position : position + 1])
                except OSError:
                    self.closed[index] = True

    def answers(self) -> list[bytes]:
        """What the server said to each socket before closing it."""
        said = []
        for sock in self.sockets:
            sock.settimeout(10)
            try:
                said.append(sock.recv(200))
            except OSError:
                said.append(b"")
        return said

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in self.sockets:
            sock.close()


def _serve(tmp_path: Path, **env: str) -> AbstractContextManager[tuple[str, str]]:
    return serve_process(
        tmp_path / "var",
        DANDIZARR_HEADER_TIMEOUT_SECONDS="4",
        DANDIZARR_BODY_TIMEOUT_SECONDS="2",
        **env,
    )


def test_slow_heads_hold_no_thread(tmp_path: Path) -> None:
    source = tmp_path / "data"
    (source / "a").mkdir(parents=True)
    for i in range(20):
        (source / "a" / str(i)).write_bytes(b"x" * i)
    with _serve(tmp_path) as (url, token):
        trickle = Trickle(url, SLOW)
        trickle.thread.start()
        try:
            time.sleep(1)  # every slow socket has started its head
            took = []
            for _ in range(20):
                started = time.perf_counter()
                assert requests.get(f"{url}/api/info/", timeout=10).status_code == 200
                took.append(time.perf_counter() - started)
            with DandizarrClient(url, token) as client:
                dandiset = client.create_dandiset("during the attack")["identifier"]
                assert client.upload(source, dandiset=dandiset).ok
            print(
                f"\n{SLOW} slow sockets: 20 GET /api/info/ took median "
                f"{statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms; "
                "an upload of 20 files verified"
            )
            # At the head deadline each slow socket is told so and closed.
            answers = trickle.answers()
        finally:
            trickle.close()
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), set(answers)


def test_a_stalled_body_is_cut_and_connections_are_capped(tmp_path: Path) -> None:
    with _serve(tmp_path, DANDIZARR_MAX_CONNECTIONS="8") as (url, token):
        stalled = _connect(url)
        stalled.sendall(
            b"POST /api/dandisets/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Token " + token.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"name": '
        )
        stalled.settimeout(20)
        # The view reads the body; at the body timeout its thread gives up (an error answer
        # or a closed connection), where it used to wait for ever.
        said = stalled.recv(100)
        assert said == b"" or said.startswith((b"HTTP/1.1 4", b"HTTP/1.1 5")), said
        stalled.close()

        idle = [_connect(url) for _ in range(8)]  # the cap, all silent
        try:
            # While the cap is reached nothing more is served...
            with pytest.raises(requests.exceptions.ReadTimeout):
                requests.get(f"{url}/api/info/", timeout=1.5)
            # ...until the silent ones are closed at their head deadline.
            assert requests.get(f"{url}/api/info/", timeout=30).status_code == 200
            assert all(s.recv(200).startswith(b"HTTP/1.1 408") for s in idle)
        finally:
            for sock in idle:
                sock.close()
