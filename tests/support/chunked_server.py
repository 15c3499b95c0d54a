"""Django's test server, taught chunked request bodies as gunicorn (production, ``make serve``)
decodes them.

dandi 0.48.1 PUTs an empty file with ``Transfer-Encoding: chunked`` (``requests`` does, for an
empty file object). Django's development server ignores that framing: the view reads no body
and the chunk terminator stays on the keep-alive connection, where it breaks the client's next
request; dandi 0.48.1 then retries that PUT with its file already read, sending an empty body
(a flaky 400 at the batch's completion, where the server catches it). Here a chunked body is
read whole and handed on with its Content-Length, as a production server would.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import QuietWSGIRequestHandler

MAX_CHUNKED_BODY = 64 << 20


def read_chunked(stream: BinaryIO) -> bytes:
    """The body of a chunked request from ``stream``, which is left after its last CRLF."""
    body = bytearray()
    while True:
        line = stream.readline(1024)
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline(1024) not in (b"\r\n", b"\n", b""):
                pass  # trailer fields
            return bytes(body)
        if len(body) + size > MAX_CHUNKED_BODY:
            raise ValueError("chunked body too large for the test server")
        body += stream.read(size)
        stream.readline(8)  # the CRLF after the chunk


class ChunkedRequestHandler(QuietWSGIRequestHandler):
    def handle_one_request(self) -> None:
        connection_stream = self.rfile
        try:
            super().handle_one_request()
        finally:
            self.rfile = connection_stream  # the next request is read from the connection

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = read_chunked(self.rfile)
            del self.headers["Transfer-Encoding"]
            del self.headers["Content-Length"]
            self.headers["Content-Length"] = str(len(body))
            self.rfile = io.BytesIO(body)
        return True


class ChunkedWSGIServer(ThreadedWSGIServer):
    """A ``LiveServerThread.server_class`` whose requests may have chunked bodies."""

    def __init__(self, address: Any, _handler: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(address, ChunkedRequestHandler, *args, **kwargs)
