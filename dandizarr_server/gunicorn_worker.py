"""gunicorn's threaded worker, with each request head read in the worker's event loop.

gunicorn's ``gthread`` worker hands a connection to a thread as soon as it is readable, and the
thread then reads the request head with no deadline: a client that sends its headers one byte at
a time (slowloris) holds a thread for as long as it likes, and 32 of them stalled
``dandizarr serve``. A connection that never sent a byte was never closed either.

``HeadFirstThreadWorker`` reads every request head (a new connection's and each kept-alive
one's) in the worker's loop, non-blocking, beside accepting. Only a connection whose head is
complete goes to a thread, with the bytes read pushed back into gunicorn's parser, which then
parses and checks them as usual (``limit_request_line`` ...). The limits, from dandizarr's
settings (``dandizarr_server/settings.py``):

- a head must be complete within ``HEADER_TIMEOUT_SECONDS`` of the connection's accept (or, on
  a kept-alive connection, of its next bytes), else the connection gets a 408 and is closed;
- a head longer than ``MAX_HEAD_BYTES`` gets a 431 (memory per connection stays bounded);
- once a thread owns the connection, each read of the body waits at most
  ``BODY_TIMEOUT_SECONDS``, and the time spent waiting for a request's body may not exceed
  that plus one second per ``BODY_MIN_BYTES_PER_SECOND`` received: a body trickled a byte at a
  time is cut after ``BODY_TIMEOUT_SECONDS`` instead of holding its thread until it ends. Only
  time spent waiting for the client counts, never the service's own work between reads;
  writes of a reply to a client that stops reading give up after ``BODY_TIMEOUT_SECONDS`` too;
- at most ``MAX_CONNECTIONS`` connections are open per worker process (gunicorn's
  ``worker_connections``); beyond that new ones wait in the listen backlog while the loop keeps
  serving the open ones (gthread's loop stopped reading them at its cap).

Why this and not the alternatives: a socket timeout alone (the thread reads the head with a
deadline) still gives each slow client a thread for the whole timeout, so 32 sockets still stall
the server; an async worker (gevent, eventlet) would change the whole server's concurrency model
and drop the TCP_NODELAY and benchmark behaviour ``dandizarr_server.httpserver`` relies on; a proxy
in
front (nginx) is not there for ``dandizarr serve``. Reading heads in the loop costs one
non-blocking ``recv`` per head, on a socket the loop already polls.

TLS terminated by gunicorn itself (``certfile``) is the exception: its bytes cannot be parsed
before the handshake, so such connections go to a thread at once, as in ``gthread``, and only
the read timeouts apply (production terminates TLS in front, see docs/deploying.md).
"""

from __future__ import annotations

import errno
import io
import json
import selectors
import socket
import time
from collections.abc import Callable
from concurrent import futures
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from gunicorn import http, sock
from gunicorn.http.errors import ParseException
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker

# A request head (request line and headers) larger than this is refused: this API's heads are
# well under 8 KiB (a token, a cookie), and each connection buffers at most this while it waits.
MAX_HEAD_BYTES = 64 * 1024
# What one non-blocking read of a head asks for.
HEAD_READ_BYTES = 64 * 1024
# The end of a request head.
HEAD_END = b"\r\n\r\n"
# An unread body left after a reply (a request refused before its body was read) is read and
# dropped up to this size to keep the connection alive; larger, the connection is closed.
DRAIN_BYTES = 256 * 1024
# How long the loop sleeps at most while it accepts nothing (at MAX_CONNECTIONS): a finished
# request frees a slot without waking it.
PAUSED_POLL_SECONDS = 0.1
POLL_SECONDS = 1.0


class ClientTooSlow(BadRequest):
    """The client sent its body (or head) slower than the limits allow.

    A ``BadRequest`` and not an ``OSError``: Django answers it with a 400 where a view reads
    the body (it would turn an ``OSError`` into ``UnreadablePostError``, a 500)."""


def error_reply(status: int, reason: str, detail: str, *, code: str) -> bytes:
    """A whole HTTP answer, its body shaped as every error of the service is (``detail`` and
    ``code``: zarr_api.edge.exceptions.error_body, which this module does not import: gunicorn's
    master loads it before Django is set up)."""
    body = json.dumps({"detail": detail, "code": code}).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


class PacedUnreader(SocketUnreader):
    """gunicorn's socket reader, with each read's wait bounded (see the module docstring)."""

    def __init__(self, sock: socket.socket, timeout: float, min_rate: int) -> None:
        super().__init__(sock)
        self.timeout = timeout
        self.min_rate = min_rate
        self.socket_timeout = timeout
        self.waited = 0.0
        self.received = 0

    def restart(self) -> None:
        """A new request on the connection: its own allowance."""
        self.waited = 0.0
        self.received = 0

    def allowance(self) -> float:
        if self.min_rate <= 0:
            return self.timeout
        return min(self.timeout, self.timeout + self.received / self.min_rate - self.waited)

    def chunk(self) -> bytes:
        allowance = self.allowance()
        if allowance <= 0:
            raise ClientTooSlow("the client sent its request too slowly")
        # settimeout is a system call: only when the allowance is shorter than usual.
        if allowance != self.socket_timeout:
            self.sock.settimeout(allowance)
            self.socket_timeout = allowance
        started = time.monotonic()
        try:
            data = self.sock.recv(self.mxchunk)
        except TimeoutError:
            raise ClientTooSlow(f"no bytes of the request within {allowance:.1f} s") from None
        finally:
            self.waited += time.monotonic() - started
            if self.socket_timeout != self.timeout:
                # Replies are written with the usual timeout.
                self.sock.settimeout(self.timeout)
                self.socket_timeout = self.timeout
        self.received += len(data)
        return data


class PacedConnection(TConn):
    """A connection whose head is read in the loop (``head``), then served by a thread with
    timed reads."""

    # gthread's attributes (it sets them untyped): the socket, TLS-wrapped or not, and the
    # parser made by the first init_paced.
    sock: socket.socket
    parser: Any

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.head = bytearray()

    def init_paced(self, timeout: float, min_rate: int) -> None:
        """gthread's ``init``, with a socket timeout instead of a blocking socket."""
        self.initialized = True
        self.sock.settimeout(timeout)
        if self.parser is None:
            if self.cfg.is_ssl:
                self.sock = sock.ssl_wrap_socket(self.sock, self.cfg)
            self.parser = http.RequestParser(self.cfg, self.sock, self.client)
            self.parser.unreader = PacedUnreader(self.sock, timeout, min_rate)
        self.parser.unreader.restart()

    def take_buffered(self) -> bytes:
        """What gunicorn's parser read past the last request (a pipelined request's start)."""
        if self.parser is None:
            return b""
        unreader = self.parser.unreader
        data = unreader.buf.getvalue()
        unreader.buf = io.BytesIO()
        return data


class HeadFirstThreadWorker(ThreadWorker):
    """gthread, reading request heads in its loop (see the module docstring)."""

    def run(self) -> None:
        self.header_timeout = float(settings.HEADER_TIMEOUT_SECONDS)
        self.body_timeout = float(settings.BODY_TIMEOUT_SECONDS)
        self.body_min_rate = settings.BODY_MIN_BYTES_PER_SECOND
        self.worker_connections = settings.MAX_CONNECTIONS
        self.max_keepalived = settings.MAX_CONNECTIONS - self.cfg.threads
        self.reads_heads = not self.cfg.is_ssl
        # Connections whose head is being read, by deadline (all get the same delay, so the
        # insertion order is the deadlines' order).
        self.heads: dict[PacedConnection, float] = {}
        self.acceptors: dict[socket.socket, Callable[[socket.socket], None]] = {}
        self.accepting = False
        for listener in self.sockets:
            listener.setblocking(False)
            # As gthread: the name may be unavailable during a graceful shutdown.
            self.acceptors[listener] = partial(self.accept, listener.getsockname())

        while self.alive:
            self.notify()
            self.set_accepting(self.nr_conns < self.worker_connections)
            wait = POLL_SECONDS if self.accepting else PAUSED_POLL_SECONDS
            for key, _ in self.poller.select(wait):
                key.data(key.fileobj)
            done = futures.wait(self.futures, timeout=0, return_when=futures.FIRST_COMPLETED)
            for future in done.done:
                self.futures.remove(future)
            if not self.is_parent_alive():
                break
            self.murder_keepalived()
            self.close_late_heads()

        self.tpool.shutdown(False)
        self.poller.close()
        for listener in self.sockets:
            listener.close()
        futures.wait(self.futures, timeout=self.cfg.graceful_timeout)

    def set_accepting(self, accepting: bool) -> None:
        """Poll the listening sockets only below the connection cap."""
        if accepting == self.accepting:
            return
        self.accepting = accepting
        with self._lock:
            for listener, acceptor in self.acceptors.items():
                if accepting:
                    self.poller.register(listener, selectors.EVENT_READ, acceptor)
                else:
                    self.poller.unregister(listener)

    def accept(self, server: Any, listener: socket.socket) -> None:
        try:
            client_sock, client = listener.accept()
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        conn = PacedConnection(self.cfg, client_sock, client, server)
        self.nr_conns += 1
        if self.reads_heads:
            self.await_head(conn)
        else:
            with self._lock:
                self.poller.register(
                    conn.sock,
                    selectors.EVENT_READ,
                    partial(self.on_client_socket_readable, conn),
                )

    def on_client_socket_readable(self, conn: PacedConnection, client: Any) -> None:
        """A kept-alive connection (or a TLS one) has bytes: read its head here, not in a
        thread."""
        with self._lock:
            self.poller.unregister(client)
            if conn.initialized:
                try:
                    self._keep.remove(conn)
                except ValueError:
                    return  # closed meanwhile by murder_keepalived
        if self.reads_heads:
            conn.head = bytearray(conn.take_buffered())
            self.await_head(conn)
        else:
            self.enqueue_req(conn)

    def await_head(self, conn: PacedConnection) -> None:
        self.heads[conn] = time.monotonic() + self.header_timeout
        with self._lock:
            self.poller.register(
                conn.sock, selectors.EVENT_READ, partial(self.on_head_readable, conn)
            )
        # The bytes are often there already (a kept-alive connection became readable, a client
        # sends its request with the connection): no wait for the next poll.
        self.on_head_readable(conn, conn.sock)

    def on_head_readable(self, conn: PacedConnection, client: Any) -> None:
        try:
            data = conn.sock.recv(HEAD_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(conn)
            return
        if not data:
            self.drop(conn)
            return
        searched_from = max(0, len(conn.head) - len(HEAD_END) + 1)
        conn.head += data
        end = conn.head.find(HEAD_END, searched_from)
        if (end < 0 and len(conn.head) > MAX_HEAD_BYTES) or end + len(HEAD_END) > MAX_HEAD_BYTES:
            detail = f"the request head is larger than {MAX_HEAD_BYTES} bytes"
            reply = error_reply(
                431, "Request Header Fields Too Large", detail, code="request_head_too_large"
            )
            self.refuse(conn, reply)
            return
        if end < 0:
            return
        self.forget_head(conn)
        self.enqueue_req(conn)

    def enqueue_req(self, conn: PacedConnection) -> None:
        """To a thread, with the head read so far put back for gunicorn's parser."""
        conn.init_paced(self.body_timeout, self.body_min_rate)
        conn.parser.unreader.unread(bytes(conn.head))
        conn.head = bytearray()
        self._wrap_future(self.tpool.submit(self.handle, conn), conn)

    def close_late_heads(self) -> None:
        now = time.monotonic()
        while self.heads:
            conn, deadline = next(iter(self.heads.items()))
            if deadline > now:
                return
            detail = f"the request head did not arrive within {self.header_timeout:g} s"
            self.refuse(conn, error_reply(408, "Request Timeout", detail, code="request_timeout"))

    def forget_head(self, conn: PacedConnection) -> None:
        del self.heads[conn]
        with self._lock:
            self.poller.unregister(conn.sock)

    def refuse(self, conn: PacedConnection, reply: bytes) -> None:
        """Answer a head that broke a limit and close its connection (best effort: the socket
        is non-blocking, and a client that does not read loses the reply)."""
        try:
            conn.sock.send(reply)
            # Bytes left unread would make the close a reset, which may discard the reply.
            conn.sock.recv(HEAD_READ_BYTES)
        except OSError:
            pass
        self.log.debug("Refused %s: %s", conn.client, reply.split(b"\r\n", 1)[0])
        self.drop(conn)

    def drop(self, conn: PacedConnection) -> None:
        self.forget_head(conn)
        self.nr_conns -= 1
        conn.close()

    def handle(self, conn: PacedConnection) -> tuple[bool, PacedConnection]:
        keepalive, conn = super().handle(conn)
        # The next head is read in the loop, from the socket: what is left of this request's
        # body must be read first (gunicorn's parser would, in a thread, with no deadline).
        return keepalive and self.body_finished(conn), conn

    def body_finished(self, conn: PacedConnection) -> bool:
        body = conn.parser.mesg.body if conn.parser and conn.parser.mesg else None
        if body is None:
            return True
        left = DRAIN_BYTES
        try:
            while left > 0:
                data = body.read(min(8192, left))
                if not data:
                    return True
                left -= len(data)
        except (ClientTooSlow, OSError, ParseException):
            return False
        return False

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if isinstance(exc, ClientTooSlow):
            # The client is too slow to read a reply: close without one.
            self.log.info("Closed a connection from %s: %s", addr, exc)
            return
        super().handle_error(req, client, addr, exc)
