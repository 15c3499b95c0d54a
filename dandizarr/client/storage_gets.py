"""GETs of presigned storage URLs on one asyncio event loop: HTTP/1.1 over keep-alive
connections, each body handed to a sink as it arrives.

Downloads of many small files are bound by the client's CPU per request, not by the network:
threads over ``requests`` spend most of it in the HTTP stack and in handing the GIL from
thread to thread. One event loop with a connection per worker does the same GETs with a
fraction of that CPU. It speaks just what presigned GETs need: ``GET`` with a few headers,
answers with ``Content-Length``, chunked or read to the end, ``Connection: close``, TLS for
``https``. No proxies: a caller whose storage is behind one uses ``requests`` instead
(``proxied``). No retries but the one every HTTP client makes: a request on a kept
connection the server closed while it was idle is sent again at once on a new one; the rest
is the retry policy's (``dandizarr.client.retry``), which the caller applies.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dandizarr import __version__

CHUNK = 1 << 20
# The stream's buffer (an answer's head larger than this is not a storage server's).
_BUFFER_LIMIT = CHUNK
# How much of an error answer's body is kept for its message.
_ERROR_BODY_LIMIT = 4096


class ProtocolError(ConnectionError):
    """An answer that is not HTTP/1.x as expected: the connection cannot be reused (a
    connection error: the retry policy, ``dandizarr.client.retry``, tries again)."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    # The body of an answer whose status was not the expected one (its first bytes).
    error_body: bytes = b""


# A GET: (url, headers, expected status, sink) -> the answer; the body goes to sink when the
# status is the expected one (``Connections.get``, or ``requests`` in a thread for a proxy).
Fetch = Callable[[str, dict[str, str], int, Callable[[bytes], None]], Awaitable[Answer]]


def proxied(url: str) -> bool:
    """Whether the environment routes requests to ``url`` through a proxy."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if parts.scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


def _origin(url: str) -> tuple[Origin, str, str]:
    """(origin, request target, Host header) of an absolute http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:100]}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, parts.hostname, port), target, parts.netloc


class Connection:
    """One keep-alive connection to one origin, opened on first use and again after a
    failure; one request at a time."""

    def __init__(self, origin: Origin, ssl_context: ssl.SSLContext | None, timeout: float) -> None:
        self.origin = origin
        self._ssl = ssl_context
        self._timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """The connection, and whether it has carried an exchange before."""
        if self._reader is not None and self._writer is not None and not self._reader.at_eof():
            return self._reader, self._writer, True
        self.close()
        tls = self._ssl if self.origin.scheme == "https" else None
        self._reader, self._writer = await asyncio.open_connection(
            self.origin.host, self.origin.port, ssl=tls, limit=_BUFFER_LIMIT
        )
        return self._reader, self._writer, False

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def get(
        self,
        target: str,
        host: str,
        headers: dict[str, str],
        expect: int,
        sink: Callable[[bytes], None],
    ) -> Answer:
        """``GET target``; the body goes to ``sink`` when the status is ``expect``. Raises what
        the socket or the stream raised (the connection closed) when the exchange fails,
        TimeoutError when no byte came for ``timeout`` seconds; whether to try again is the
        retry policy's to say (``dandizarr.client.retry``).

        A kept connection the server closed while it was idle fails before any answer: the
        request is sent again at once on a new one (as every HTTP client does), not counted
        as a failure."""
        lines = [f"GET {target} HTTP/1.1", f"Host: {host}", f"User-Agent: dandizarr/{__version__}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        while True:
            try:
                answer, keep_alive = await self._exchange(request, expect, sink)
            except _StaleConnection:
                self.close()
                continue
            except BaseException:
                self.close()
                raise
            if not keep_alive:
                self.close()
            return answer

    async def _exchange(
        self, request: bytes, expect: int, sink: Callable[[bytes], None]
    ) -> tuple[Answer, bool]:
        loop = asyncio.get_running_loop()
        kept: list[bytes] = []

        def keep_error(chunk: bytes) -> None:
            if sum(map(len, kept)) < _ERROR_BODY_LIMIT:
                kept.append(chunk)

        async with asyncio.timeout(self._timeout) as deadline:

            def fed(chunk: bytes) -> None:
                deadline.reschedule(loop.time() + self._timeout)
                sink(chunk)

            reader, writer, reused = await self._open()
            writer.write(request)
            try:
                answer, keep_alive = await _read_head(reader)
            except (ConnectionError, asyncio.IncompleteReadError) as error:
                if reused:
                    raise _StaleConnection from error
                raise
            await _read_body(reader, answer, fed if answer.status == expect else keep_error)
        answer.error_body = b"".join(kept)[:_ERROR_BODY_LIMIT]
        return answer, keep_alive


class _StaleConnection(Exception):
    """A kept connection closed by the server before it answered."""


async def _read_head(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1.") or len(rest) < 3 or not rest[:3].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if status != 100:  # a 100 Continue comes before the real answer
            break
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    if "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", ""):
        keep_alive = False  # the body ends with the connection
    return Answer(status, headers), keep_alive


async def _read_body(
    reader: asyncio.StreamReader, answer: Answer, sink: Callable[[bytes], None]
) -> None:
    if answer.status in (204, 304) or 100 <= answer.status < 200:
        return
    if "chunked" in answer.headers.get("transfer-encoding", ""):
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return
            await _read_exactly(reader, size, sink)
            await reader.readexactly(2)
    length = answer.headers.get("content-length")
    if length is not None:
        try:
            remaining = int(length)
        except ValueError:
            raise ProtocolError(f"bad Content-Length {length[:40]!r}") from None
        await _read_exactly(reader, remaining, sink)
        return
    while chunk := await reader.read(CHUNK):
        sink(chunk)


async def _read_exactly(
    reader: asyncio.StreamReader, remaining: int, sink: Callable[[bytes], None]
) -> None:
    while remaining > 0:
        try:
            chunk = await reader.readexactly(min(remaining, CHUNK))
        except asyncio.IncompleteReadError as cut:
            # What came before the connection closed is handed on all the same: a ranged
            # download resumes after it (ranged_gets), the others discard what they got.
            if cut.partial:
                sink(cut.partial)
            raise
        remaining -= len(chunk)
        sink(chunk)


class Connections:
    """A worker's connections, one per origin it has talked to; ``timeout``: the longest
    wait for the next bytes of an answer."""

    def __init__(self, timeout: float, ssl_context: ssl.SSLContext | None = None) -> None:
        self._timeout = timeout
        self._ssl = ssl_context
        self._by_origin: dict[Origin, Connection] = {}

    async def get(
        self, url: str, headers: dict[str, str], expect: int, sink: Callable[[bytes], None]
    ) -> Answer:
        origin, target, host = _origin(url)
        connection = self._by_origin.get(origin)
        if connection is None:
            if origin.scheme == "https" and self._ssl is None:
                self._ssl = ssl.create_default_context()
            connection = self._by_origin[origin] = Connection(origin, self._ssl, self._timeout)
        return await connection.get(target, host, headers, expect, sink)

    def close(self) -> None:
        for connection in self._by_origin.values():
            connection.close()
        self._by_origin.clear()
