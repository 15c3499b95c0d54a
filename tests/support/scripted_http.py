"""A tiny real HTTP server in a thread whose answers a test scripts, one per request.

A ``Reply`` with status ``RESET`` answers nothing: the connection is reset (TCP RST) once the
request is read. ``route`` answers some requests on its own (the service's side of a test
whose script is storage's)."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dandizarr.objectstore.s3 import S3ObjectStore

RESET = 0


@dataclass
class Reply:
    status: int
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = 0.0  # time.monotonic() when it came


class ScriptedServer:
    """Answers requests with the scripted replies in order, then with ``default``."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default = Reply(200, b"ok")
        self.seen: list[Seen] = []
        self.route: Callable[[Seen], Reply | None] = lambda seen: None
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(
                    self.command, self.path, dict(self.headers.items()), body, time.monotonic()
                )
                with outer._lock:
                    outer.seen.append(seen)
                    reply = outer.route(seen)
                    if reply is None:
                        reply = outer.replies.pop(0) if outer.replies else outer.default
                if reply.status == RESET:
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    return
                data = reply.body
                if not isinstance(data, bytes):
                    data = json.dumps(data).encode()
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                else:
                    self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def scripted_server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


def error_body(code: str, message: str) -> bytes:
    """S3's error document."""
    return f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()


def scripted_store(server: ScriptedServer) -> S3ObjectStore:
    """An S3 store whose storage is ``server``."""
    return S3ObjectStore(
        "bucket", endpoint_url=server.url, access_key_id="key", secret_access_key="secret"
    )
