"""Storage that misbehaves: a real proxy in front of an S3 server (moto's or SeaweedFS's) that
fails requests on cue. A test's service signs its URLs for the proxy
(DANDIZARR_S3_PRESIGN_ENDPOINT_URL), as it would for a public endpoint in front of a private
one, so every PUT and GET of the client passes through."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

EXPIRED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)
DROP = 0  # close the connection without an answer


class FlakyStorage:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        # Answers for the next PUTs, in order (a status, or DROP), before any is forwarded.
        self.put_failures: list[int] = []
        self.always_fail_puts: int | None = None
        self.get_failures: list[int] = []
        # Ranged GETs (their ``Range`` starting past 0) whose answer is cut after half its
        # body: the status and the whole Content-Length sent, then the connection closed.
        self.cut_ranged_gets = 0
        # The next objects whose first ranged GET (past 0, as above) is refused as expired
        # (403), before any is cut: one refusal an object, as a URL that expired is refused
        # and the fresh one the client asks for is not.
        self.expire_ranged_gets = 0
        self._expired_keys: set[str] = set()
        # The key and Range header of every GET (None: the whole object), in arrival order.
        self.get_ranges: list[tuple[str, str | None]] = []
        # Key suffixes whose first PUT is refused as expired.
        self.expire_first_put_of: set[str] = set()
        # The next PUTs acknowledged (200, their md5 as ETag) and never stored: storage that
        # lost what it had taken, which completing the batch finds missing.
        self.lose_puts = 0
        self.puts: list[str] = []
        self.failed_puts = 0
        self._lock = threading.Lock()
        self._session = requests.Session()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.path.split("?", 1)[0]
                with outer._lock:
                    outer.puts.append(key)
                    lost = outer.lose_puts > 0
                    outer.lose_puts -= lost
                    failure: int | None = None
                    if outer.put_failures:
                        failure = outer.put_failures.pop(0)
                    elif outer.always_fail_puts is not None:
                        failure = outer.always_fail_puts
                    else:
                        for suffix in list(outer.expire_first_put_of):
                            if key.endswith("/" + suffix):
                                outer.expire_first_put_of.discard(suffix)
                                failure = 403
                    if failure is not None:
                        outer.failed_puts += 1
                if lost:
                    self.send_response(200)
                    self.send_header("ETag", f'"{hashlib.md5(body).hexdigest()}"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if failure == DROP:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if failure is not None:
                    self._answer(failure, EXPIRED if failure == 403 else b"try later")
                    return
                self._forward(body)

            def do_GET(self) -> None:
                asked = self.headers.get("Range")
                with outer._lock:
                    key = self.path.split("?", 1)[0]
                    outer.get_ranges.append((key, asked))
                    failure = outer.get_failures.pop(0) if outer.get_failures else None
                    ranged = bool(asked and not asked.startswith("bytes=0-"))
                    if (
                        failure is None
                        and ranged
                        and outer.expire_ranged_gets
                        and key not in outer._expired_keys
                    ):
                        outer._expired_keys.add(key)
                        outer.expire_ranged_gets -= 1
                        failure = 403
                    cut = bool(failure is None and ranged and outer.cut_ranged_gets)
                    if cut:
                        outer.cut_ranged_gets -= 1
                if failure == DROP:
                    self.close_connection = True
                    self.connection.shutdown(2)
                elif failure is not None:
                    self._answer(failure, b"try later")
                else:
                    self._forward(None, cut=cut)

            def _forward(self, body: bytes | None, *, cut: bool = False) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                response = outer._session.request(
                    self.command, outer.upstream + self.path, data=body, headers=headers,
                    timeout=60,
                )  # fmt: skip
                self.send_response(response.status_code)
                for name in ("ETag", "Content-Type"):
                    if name in response.headers:
                        self.send_header(name, response.headers[name])
                self.send_header("Content-Length", str(len(response.content)))
                self.end_headers()
                if cut:
                    self.wfile.write(response.content[: len(response.content) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(response.content)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._session.close()
