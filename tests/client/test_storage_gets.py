"""The download engine's HTTP/1.1 GETs (``storage_gets``) against a real HTTP server that
answers in each of the shapes servers use: a length, chunks, the body to the connection's
end, ``Connection: close``, an error status."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dandizarr.client.storage_gets import Answer, Connections

BODY = bytes(range(256)) * 40


class Server:
    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                outer.connections += 1

            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("Range")))
                shape = self.path.split("?", 1)[0].strip("/")
                if shape == "length":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(BODY)))
                    self.end_headers()
                    self.wfile.write(BODY)
                elif shape == "chunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(BODY), 3000):
                        part = BODY[start : start + 3000]
                        self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                elif shape == "to-the-end":
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(BODY)
                    self.close_connection = True
                elif shape == "then-hang-up":
                    # Keep-alive by HTTP/1.1's default, then closed without a word (as a
                    # server does to a connection idle too long).
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(BODY)))
                    self.end_headers()
                    self.wfile.write(BODY)
                    self.close_connection = True
                elif shape == "close":
                    self.send_response(206)
                    self.send_header("Content-Length", "10")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(BODY[:10])
                    self.close_connection = True
                else:
                    message = b"<Error><Code>AccessDenied</Code></Error>"
                    self.send_response(403)
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server()
    thread = threading.Thread(target=server.http.serve_forever, daemon=True)
    thread.start()
    yield server
    server.http.shutdown()
    server.http.server_close()


def _get_all(urls: list[str], headers: dict[str, str] | None = None) -> list[tuple[Answer, bytes]]:
    """GET each URL in turn on one worker's connections."""

    async def run() -> list[tuple[Answer, bytes]]:
        connections = Connections(timeout=30)
        results = []
        try:
            for url in urls:
                parts: list[bytes] = []
                expect = 206 if "/close" in url else 200
                answer = await connections.get(url, headers or {}, expect, parts.append)
                results.append((answer, b"".join(parts)))
        finally:
            connections.close()
        return results

    return asyncio.run(run())


def test_every_body_shape_arrives_whole(server: Server) -> None:
    shapes = ["length", "chunked", "length", "to-the-end", "close", "length"]
    results = _get_all([f"{server.url}/{shape}?X-Amz-Signature=abc%2F" for shape in shapes])
    assert [answer.status for answer, _ in results] == [200, 200, 200, 200, 206, 200]
    assert [body for _, body in results] == [BODY, BODY, BODY, BODY, BODY[:10], BODY]
    # The query goes as signed; the connection is kept across answers with a length or
    # chunks, and opened again after one that ended with the connection.
    assert server.requests[0][0] == "/length?X-Amz-Signature=abc%2F"
    assert server.connections == 3


def test_an_error_answer_keeps_its_body_out_of_the_sink(server: Server) -> None:
    [(answer, body)] = _get_all([f"{server.url}/refused"], {"Range": "bytes=0-9"})
    assert (answer.status, body) == (403, b"")
    assert b"AccessDenied" in answer.error_body
    assert server.requests == [("/refused", "bytes=0-9")]


def test_a_closed_port_raises_a_connection_error() -> None:
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{probe.server_address[1]}/length"
    probe.server_close()
    with pytest.raises(OSError):
        _get_all([url])


def test_a_kept_connection_the_server_hung_up_is_replaced(server: Server) -> None:
    results = _get_all([f"{server.url}/then-hang-up", f"{server.url}/length"] * 3)
    assert [(answer.status, body) for answer, body in results] == [(200, BODY)] * 6
    # Each hang-up ends the connection it came on; the next answer comes on a new one, which
    # the next hang-up ends in turn.
    assert server.connections == 4
