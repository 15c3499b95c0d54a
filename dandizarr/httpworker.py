"""A gunicorn ``gthread`` worker that hands a thread only requests whose head has arrived.

gunicorn's ``gthread`` worker gives a connection to a thread as soon as it is readable, and
the thread then blocks reading the request line and headers with no deadline: a client that
sends its headers a byte at a time holds a thread for as long as it likes, and as many such
clients as there are threads (32 under ``dandizarr serve``) stop the service (slowloris).

``HeadFirstThreadWorker`` reads each request's head in the worker's own event loop, without
blocking, and only a connection whose head is complete (``\\r\\n\\r\\n``) goes to a thread, the
bytes read pushed back into gunicorn's parser. A head must be complete within
``DANDIZARR_HEADER_TIMEOUT_SECONDS`` of the connection's accept (of its first byte, for the
next request on a kept-alive connection) and within ``MAX_HEAD_BYTES``; else the connection is
answered 408 / 431 and closed. Once a thread
owns a connection, every read and write on it times out after
``DANDIZARR_BODY_TIMEOUT_SECONDS`` of silence, so a trickling body cannot hold a thread
forever. Open connections are capped by gunicorn's ``worker_connections``
(``DANDIZARR_MAX_CONNECTIONS``): past it the worker accepts no more until some close.

TLS connections (not used by ``dandizarr serve``: a proxy terminates TLS) keep gunicorn's
own handling.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import time
from functools import partial
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

# gunicorn's own limits on a request line (4094) and on headers (100 of 8190 bytes) bound a
# head at about 800 KiB; a real client sends a few KiB. Past this, 431.
MAX_HEAD_BYTES = 64 << 10
_HEAD_END = b"\r\n\r\n"
_REPLIES = {
    408: b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    431: (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
        b"Content-Length: 0\r\n\r\n"
    ),
}


HEADER_TIMEOUT_SECONDS = 10.0
BODY_TIMEOUT_SECONDS = 60.0


def _timeouts() -> tuple[float, float]:
    """(header, body) timeouts in seconds, from the environment: read here, in the worker,
    because under a production gunicorn the worker starts before Django's settings load."""
    header = os.environ.get("DANDIZARR_HEADER_TIMEOUT_SECONDS") or HEADER_TIMEOUT_SECONDS
    body = os.environ.get("DANDIZARR_BODY_TIMEOUT_SECONDS") or BODY_TIMEOUT_SECONDS
    return float(header), float(body)


class HeadFirstThreadWorker(ThreadWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout, self.body_timeout = _timeouts()
        # Connections whose request head is still arriving: connection -> (deadline, bytes).
        self._heads: dict[TConn, tuple[float, bytearray]] = {}

    def accept(self, server: Any, listener: socket.socket) -> None:
        """gunicorn's accept, the connection's head deadline starting now: a client that
        connects and sends nothing is closed at it too."""
        try:
            sock, client = listener.accept()
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        conn = TConn(self.cfg, sock, client, server)
        self.nr_conns += 1
        with self._lock:
            if not self.cfg.is_ssl:
                self._heads[conn] = (time.monotonic() + self.header_timeout, bytearray())
            self.poller.register(
                conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn)
            )

    def on_client_socket_readable(self, conn: TConn, client: socket.socket) -> None:
        if self.cfg.is_ssl:
            super().on_client_socket_readable(conn, client)
            return
        with self._lock:
            if conn.initialized and conn not in self._heads:
                # A kept-alive connection starts its next request.
                try:
                    self._keep.remove(conn)
                except ValueError:
                    return  # murdered meanwhile
            _deadline, head = self._heads.setdefault(
                conn, (time.monotonic() + self.header_timeout, bytearray())
            )
        try:
            data = conn.sock.recv(8192)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._drop(conn, client, reply=None)
            return
        head += data
        if _HEAD_END in head:
            with self._lock:
                self.poller.unregister(client)
                del self._heads[conn]
            conn.init()
            conn.parser.unreader.unread(bytes(head))
            # From here a thread reads the body: never for longer than this between bytes.
            conn.sock.settimeout(self.body_timeout)
            future = self.tpool.submit(self.handle, conn)
            self._wrap_future(future, conn)
        elif len(head) > MAX_HEAD_BYTES:
            self._drop(conn, client, reply=431)

    def _drop(self, conn: TConn, client: socket.socket, reply: int | None) -> None:
        with self._lock:
            self._heads.pop(conn, None)
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(client)
        if reply is not None:
            with contextlib.suppress(OSError):
                conn.sock.send(_REPLIES[reply])
        self.nr_conns -= 1
        conn.close()

    def murder_keepalived(self) -> None:
        super().murder_keepalived()
        now = time.monotonic()
        with self._lock:
            late = [conn for conn, (deadline, _) in self._heads.items() if deadline < now]
        for conn in late:
            self._drop(conn, conn.sock, reply=408)

    def run(self) -> None:
        try:
            super().run()
        finally:
            for conn in list(self._heads):
                try:
                    conn.close()
                except OSError as error:
                    if error.errno != errno.EBADF:
                        raise
