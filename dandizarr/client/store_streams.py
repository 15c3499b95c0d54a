"""Big files into a write session as they are read (docs/writing.md, "Big files").

A file over the service's ``multipart_threshold_bytes`` goes in parts: each part is read from
the source, hashed and PUT (its URL bound to its md5) while the next ones are read, at most
``jobs`` parts in flight, so memory holds ``jobs + 1`` parts whatever the file's size, and
nothing touches the local disk. The file's md5 is computed on the way and declared at the
finish; the service proves it from the bytes before the commit applies. A file at or under
the threshold goes in one PUT bound to its md5, so it is read whole first (at most the
threshold's bytes; on storage without multipart uploads, the whole file).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from dandizarr.client.api import ApiClient
from dandizarr.client.digests import content_md5
from dandizarr.client.errors import ClientError
from dandizarr.client.retry import final_status_message


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


# What ``put_stream`` reads from: a binary file-like object, or an iterable of byte chunks.
Source = Readable | Iterable[bytes]


class ExactReader:
    """Reads ``n`` bytes at a time from a ``Source`` (ClientError when it ends early)."""

    def __init__(self, source: Source, what: str) -> None:
        self._read: Callable[[int], bytes] | None = None
        self._chunks: Iterator[bytes] | None = None
        if hasattr(source, "read"):
            self._read = source.read
        else:
            self._chunks = iter(source)
        self._left = b""
        self.what = what

    def _more(self, n: int) -> bytes:
        if self._read is not None:
            return self._read(n)
        assert self._chunks is not None
        return next(self._chunks, b"")

    def take(self, n: int) -> bytes:
        pieces, have = [self._left] if self._left else [], len(self._left)
        self._left = b""
        while have < n:
            data = bytes(self._more(n - have))
            if not data:
                raise ClientError(f"{self.what} ended after {have} of the bytes expected")
            pieces.append(data)
            have += len(data)
        joined = b"".join(pieces)
        self._left = joined[n:]
        return joined[:n]

    def require_end(self) -> None:
        if self._left or self._more(1):
            raise ClientError(f"{self.what} holds more bytes than its declared size")


def stream_in_parts(
    client: ApiClient, zarr_id: str, session_id: str, path: str, source: Source, size: int
) -> str:
    """Send ``size`` bytes of ``source`` as big file ``path`` of the session, in parts; the
    file's md5 once the service staged it."""
    reader = ExactReader(source, f"the stream for {path}")
    upload = client.begin_session_upload(zarr_id, session_id, path, size)
    number_of, part_size = int(upload["upload"]), int(upload["part_size"])
    count = int(upload["part_count"])
    whole = hashlib.md5(usedforsecurity=False)

    def send(number: int, data: bytes) -> None:
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        for attempt in range(2):  # a URL refused (expired): a fresh one, once
            [url] = client.session_part_urls(zarr_id, session_id, number_of, number, [md5])
            response = client.storage_request(
                "PUT", url, data=data, headers={"Content-MD5": content_md5(md5)}
            )
            if response.status_code == 200:
                return
            if attempt == 1 or response.status_code not in (400, 403):
                said = final_status_message(response.status_code, response.text.strip()[:200])
                raise ClientError(f"storage refused part {number} of {path}: {said}")

    jobs = max(1, client.jobs)
    in_flight: deque[Future[None]] = deque()
    with ThreadPoolExecutor(jobs, thread_name_prefix="dandizarr-stream") as pool:
        for number in range(1, count + 1):
            data = reader.take(min(part_size, size - (number - 1) * part_size))
            whole.update(data)
            in_flight.append(pool.submit(send, number, data))
            del data
            while len(in_flight) >= jobs:  # bounded: jobs parts sent, one being read
                in_flight.popleft().result()
        for future in in_flight:
            future.result()
    reader.require_end()
    md5 = whole.hexdigest()
    client.finish_session_upload(zarr_id, session_id, number_of, md5)
    return md5
