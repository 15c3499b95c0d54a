"""Many storage PUTs at once from one thread, on libcurl's multi interface (pycurl).

Threads over ``requests`` spend much of a small PUT's CPU building the request, in the
connection pool and handing the GIL between 32 threads; libcurl does the HTTP in C and one
Python thread only hands it the next requests and reads the results, a tenth of that CPU
(docs/measurements.md), which on a small machine is the CPU the storage server needs.
Connections are kept alive and reused across requests (one curl handle per slot, each with its
connection).

The engine knows HTTP only: what a status means for an upload is the caller's to decide.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from io import BytesIO
from typing import Protocol, runtime_checkable

import certifi
import pycurl

# A request that made no progress for this long is abandoned (as requests' read timeout).
_LOW_SPEED_BYTES = 1
# Bytes of a reply kept (for an error's message: the body of a successful PUT is empty).
_ERROR_BODY_LIMIT = 4096


class Readable(Protocol):
    def read(self, n: int = -1) -> bytes: ...


@dataclass
class Transfer:
    """One PUT of ``body`` (bytes, or a reader with its ``size``). Downloads have their own
    engine (``storage_gets``), which streams bodies into files."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Readable | None = None
    size: int = 0


@dataclass
class Reply:
    """What storage answered (``status`` 0: no answer, ``error`` says why)."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    error: str = ""
    # An exception a body reader raised (a file changed while it was sent), re-raised as is.
    reader_error: BaseException | None = None

    @property
    def status_code(self) -> int:  # as requests names it
        return self.status

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def ca_bundle() -> str:
    """The CA certificates HTTPS is verified against: the same as ``requests`` uses."""
    return (
        os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE") or certifi.where()
    )


class _Slot:
    """A curl handle (and its kept-alive connection) with the request it carries now."""

    def __init__(self) -> None:
        self.curl = pycurl.Curl()
        self.index = -1
        self.reply_body = BytesIO()
        self.reply_headers: dict[str, str] = {}
        self.reader_error: BaseException | None = None

    def prepare(self, index: int, transfer: Transfer, timeout: float) -> None:
        c = self.curl
        c.reset()
        self.index = index
        self.reply_body = BytesIO()
        self.reply_headers = {}
        self.reader_error = None
        c.setopt(pycurl.URL, transfer.url)
        c.setopt(pycurl.CAINFO, ca_bundle())
        c.setopt(pycurl.NOSIGNAL, 1)
        c.setopt(pycurl.CONNECTTIMEOUT_MS, int(timeout * 1000))
        c.setopt(pycurl.LOW_SPEED_LIMIT, _LOW_SPEED_BYTES)
        c.setopt(pycurl.LOW_SPEED_TIME, max(1, int(timeout)))
        # No "Expect: 100-continue" round trip before a body.
        headers = [f"{k}: {v}" for k, v in transfer.headers.items()] + ["Expect:"]
        c.setopt(pycurl.HTTPHEADER, headers)
        c.setopt(pycurl.WRITEFUNCTION, self._write)
        c.setopt(pycurl.HEADERFUNCTION, self._header)
        c.setopt(pycurl.UPLOAD, 1)
        body = transfer.body
        if isinstance(body, bytes):
            c.setopt(pycurl.INFILESIZE_LARGE, len(body))
            c.setopt(pycurl.READDATA, BytesIO(body))
        elif body is not None:
            c.setopt(pycurl.INFILESIZE_LARGE, transfer.size)
            c.setopt(pycurl.READFUNCTION, self._reader(body))
        else:
            c.setopt(pycurl.INFILESIZE_LARGE, 0)

    def _reader(self, body: Readable) -> Callable[[int], bytes | int]:
        def read(size: int) -> bytes | int:
            try:
                return body.read(size)
            except Exception as error:  # raised again by the caller, once curl has stopped
                self.reader_error = error
                return int(pycurl.READFUNC_ABORT)

        return read

    def _write(self, data: bytes) -> None:
        if self.reply_body.tell() < _ERROR_BODY_LIMIT:
            self.reply_body.write(data)

    def _header(self, line: bytes) -> None:
        name, sep, value = line.decode("latin-1").partition(":")
        if sep:
            self.reply_headers[name.strip().lower()] = value.strip()
        elif line.startswith(b"HTTP/"):
            self.reply_headers = {}  # a new reply (after a redirect or a 100 Continue)

    def reply(self, error: str = "") -> Reply:
        status = 0 if error else int(self.curl.getinfo(pycurl.RESPONSE_CODE))
        return Reply(
            status,
            self.reply_body.getvalue(),
            self.reply_headers,
            error,
            self.reader_error,
        )


@runtime_checkable
class TransferFeed(Protocol):
    """Transfers handed over while others run (an upload whose next URLs are still coming)."""

    def take(self, wait: float) -> list[Transfer] | None:
        """The transfers ready now, waiting up to ``wait`` seconds for some: [] when none came
        in that time, None when no more will come."""


class _Given:
    """A feed of transfers all known at the start."""

    def __init__(self, transfers: Iterable[Transfer]) -> None:
        self._transfers: list[Transfer] | None = list(transfers)

    def take(self, wait: float) -> list[Transfer] | None:
        transfers, self._transfers = self._transfers, None
        return transfers


class CurlTransfers:
    """Up to ``connections`` requests in flight; results handed back as each one ends."""

    def __init__(self, connections: int, timeout: float) -> None:
        self.connections = max(1, connections)
        self.timeout = timeout
        self._multi = pycurl.CurlMulti()
        self._slots: list[_Slot] = []

    def run(
        self,
        transfers: Iterable[Transfer] | TransferFeed,
        on_reply: Callable[[int, Reply], None],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """Send every transfer (numbered in order, across a feed's hand-overs), calling
        ``on_reply(number, reply)`` as each ends; stops taking new ones once ``should_stop()``
        (those in flight finish)."""
        feed = transfers if isinstance(transfers, TransferFeed) else _Given(transfers)
        busy: dict[int, _Slot] = {}
        try:
            self._drive(feed, busy, on_reply, should_stop)
        finally:
            for slot in busy.values():  # interrupted (Ctrl-C): drop what is in flight
                self._multi.remove_handle(slot.curl)

    def _drive(
        self,
        feed: TransferFeed,
        busy: dict[int, _Slot],
        on_reply: Callable[[int, Reply], None],
        should_stop: Callable[[], bool],
    ) -> None:
        multi = self._multi
        pending: deque[tuple[int, Transfer]] = deque()
        free = list(self._slots)
        numbered = 0
        ended = False
        while True:
            if not pending and not ended and not should_stop():
                # Idle: wait for the feed; busy: only look, the replies need reading.
                taken = feed.take(0.0 if busy else 0.1)
                if taken is None:
                    ended = True
                else:
                    pending.extend(enumerate(taken, start=numbered))
                    numbered += len(taken)
            while free and pending and not should_stop():
                index, transfer = pending.popleft()
                slot = free.pop()
                slot.prepare(index, transfer, self.timeout)
                busy[id(slot.curl)] = slot
                multi.add_handle(slot.curl)
            while not free and pending and len(self._slots) < self.connections:
                free.append(_Slot())
                self._slots.append(free[-1])
            if free and pending and not should_stop():
                continue
            if not busy:
                if ended or should_stop():
                    return
                continue
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            while True:
                queued, done, failed = multi.info_read()
                for curl in done:
                    slot = busy.pop(id(curl))
                    multi.remove_handle(curl)
                    free.append(slot)
                    on_reply(slot.index, slot.reply())
                for curl, _code, message in failed:
                    slot = busy.pop(id(curl))
                    multi.remove_handle(curl)
                    free.append(slot)
                    on_reply(slot.index, slot.reply(message or "no answer"))
                if not queued:
                    break
            if busy:
                multi.select(0.1 if pending or ended else 0.005)

    def close(self) -> None:
        for slot in self._slots:
            slot.curl.close()
        self._slots.clear()
        self._multi.close()
