"""A big file's download in byte ranges fetched at once (docs/api.md, "Big files").

One GET streams at what one connection carries; a file over ``RangedDownloads.threshold`` is
cut into ``range_bytes`` ranges, up to ``parallel`` of them in flight at once (``RangeSlots``:
their connections, shared by every big file of a download), each written into place at its
offset of a temporary file. The md5 cannot be computed in parallel: a thread follows the
written bytes in offset order (``FollowingHasher``), reading them back from the file (from the
page cache: they were written moments before) as each range's bytes become contiguous with
what it has hashed, so memory stays one read block whatever the ranges' order
(docs/measurements.md, "Ranged downloads", for that choice against a window of ranges held in
memory, and for the numbers).

Every range GET goes through the client's one retry policy (``dandizarr.client.retry``); a
range cut short is resumed where its bytes stopped, not fetched again, and a URL that expires
while a big file is read is renewed from the service, keeping what was written (``_Source``).
Every answer must carry the ETag the first one did (ranges of two different objects never make
a file). The file takes its name only when its size and md5 are the tree's; a wrong md5
discards it, and the whole file is tried again under the same policy, as a small file's wrong
bytes are, then reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from dandizarr.client.errors import ClientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.retry import (
    RetryCounter,
    RetryPolicy,
    TryAgain,
    check_status,
    final_status_message,
    retrying_async,
)
from dandizarr.client.storage_gets import Answer, Fetch
from dandizarr.objectstore.multipart import MAX_OBJECT

MIB = 1 << 20
# Bytes the hashing thread reads back at a time.
HASH_BLOCK = 8 * MIB


@dataclass(frozen=True)
class RangedDownloads:
    """When a download cuts a file into ranges (the one home of these numbers; the defaults
    were chosen by measurement, docs/measurements.md "Ranged downloads")."""

    # Files bigger than this are fetched in ranges; smaller ones in one GET.
    threshold: int = 256 * MIB
    range_bytes: int = 32 * MIB
    # Range GETs in flight at once across the download (at most the client's ``jobs``).
    parallel: int = 8

    def __post_init__(self) -> None:
        if self.range_bytes < 1 or self.parallel < 1 or self.threshold < 0:
            raise ValueError(f"not a usable plan of ranged downloads: {self}")

    def applies(self, remote: RemoteFile) -> bool:
        return remote.size > self.threshold and remote.size > self.range_bytes


class RangeSlots:
    """The fetchers range GETs take turns on: ``parallel`` of them, each on a connection of
    its own (kept alive from range to range)."""

    def __init__(self, fetchers: list[tuple[Fetch, Callable[[], None]]]) -> None:
        self._free: asyncio.Queue[Fetch] = asyncio.Queue()
        self._closers = [close for _, close in fetchers]
        for fetch, _ in fetchers:
            self._free.put_nowait(fetch)

    async def get(
        self, url: str, headers: dict[str, str], expect: int, sink: Callable[[bytes], None]
    ) -> Answer:
        fetch = await self._free.get()
        try:
            return await fetch(url, headers, expect, sink)
        finally:
            self._free.put_nowait(fetch)

    def close(self) -> None:
        for close in self._closers:
            close()


class _Relocate(Exception):
    """The object changed while its ranges were read: the whole file is tried again from a
    fresh URL."""


class _Source:
    """Where a file's ranges come from: its URL, renewed when storage refuses it (a URL
    expires while a big file is read: 600 s by default), keeping every byte written so far.
    Refused again before any range came from the new URL, the file has failed."""

    def __init__(self, located: RemoteFile, locate: Callable[[], Awaitable[RemoteFile]]) -> None:
        self.located = located
        self.generation = 0
        self.served = True
        self._locate = locate
        self._lock = asyncio.Lock()

    async def renew(self, generation: int, refused: str) -> None:
        async with self._lock:
            if generation != self.generation:
                return  # another range renewed it meanwhile
            if not self.served:
                raise ClientError(f"from storage: {refused}")
            self.located = await self._locate()
            self.generation += 1
            self.served = False


class FollowingHasher:
    """Hashes a file in offset order as its ranges' bytes are written, from a thread of its
    own; ``written[i]``: the bytes of range ``i`` on disk so far (from its start)."""

    def __init__(self, fd: int, size: int, range_bytes: int) -> None:
        self._fd, self.size, self._range_bytes = fd, size, range_bytes
        self.written = [0] * (-(-size // range_bytes))
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.error: BaseException | None = None
        self._hashed = 0
        self._stopped = False
        self._cond = threading.Condition()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dandizarr-md5", daemon=True)
        self._thread.start()

    def add(self, index: int, count: int) -> None:
        with self._cond:
            self.written[index] += count
            self._cond.notify()

    def _ready(self) -> int:
        """Bytes from ``_hashed`` on that are on disk in order (0: none yet)."""
        index = self._hashed // self._range_bytes
        return index * self._range_bytes + self.written[index] - self._hashed

    def _run(self) -> None:
        try:
            while self._hashed < self.size:
                with self._cond:
                    while not self._stopped and not (ready := self._ready()):
                        self._cond.wait()
                    if self._stopped:
                        return
                left = min(ready, HASH_BLOCK)
                while left:
                    data = os.pread(self._fd, left, self._hashed)
                    if not data:
                        raise ClientError("the file being downloaded was cut short on disk")
                    self.md5.update(data)
                    self._hashed += len(data)
                    left -= len(data)
        except BaseException as error:  # told to the download, which fails the file
            self.error = error
        finally:
            self._done.set()

    def finished(self) -> Awaitable[bool]:
        """Wait (off the event loop) until every byte is hashed; False when stopped first."""
        return asyncio.get_running_loop().run_in_executor(None, self._wait)

    def _wait(self) -> bool:
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self._hashed == self.size

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


class RangedBody:
    """A big file fetched in ranges into ``tmp``; at its target only through ``place``."""

    def __init__(self, tmp: Path, size: int, range_bytes: int) -> None:
        # The size comes from the service's listing: bounded before it sizes the range lists.
        if not 0 <= size <= MAX_OBJECT or range_bytes <= 0:
            raise ClientError(
                f"the server lists a file of {size} bytes: no S3 object holds more than "
                f"{MAX_OBJECT} (or the range size {range_bytes} is not positive)"
            )
        self.tmp = tmp
        self.size = size
        self._io_lock = threading.Lock()
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
        try:
            self._fd: int | None = os.open(tmp, flags, 0o644)
        except FileNotFoundError:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(tmp, flags, 0o644)
        self.hasher = FollowingHasher(self._fd, size, range_bytes)
        self.ranges = [
            (start, min(start + range_bytes, size)) for start in range(0, size, range_bytes)
        ]

    def sink(self, index: int) -> Callable[[bytes], None]:
        """Where range ``index``'s bytes go: at their offset, after those already there."""
        start, end = self.ranges[index]
        fd = self._fd
        assert fd is not None

        def write(chunk: bytes) -> None:
            at = start + self.hasher.written[index]
            if at + len(chunk) > end:
                raise ClientError(f"storage sent more than bytes {start}-{end - 1}")
            view = memoryview(chunk)
            # Under the lock that closes the file: a GET through a proxy runs in a thread
            # that a failed attempt cannot stop, and must not write to a reused descriptor.
            with self._io_lock:
                if self._fd is None:
                    raise ClientError("the download of this file was abandoned")
                while view:
                    done = os.pwrite(fd, view, at)
                    at += done
                    view = view[done:]
            self.hasher.add(index, len(chunk))

        return write

    def left(self, index: int) -> tuple[int, int]:
        """``[from, end)`` of range ``index`` not yet on disk."""
        start, end = self.ranges[index]
        return start + self.hasher.written[index], end

    def place(self, target: Path) -> None:
        try:
            self._close()
            os.replace(self.tmp, target)
        except OSError:
            self.discard()
            raise

    def _close(self) -> None:
        self.hasher.stop()
        with self._io_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def discard(self) -> None:
        self._close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


async def fetch_ranged(
    remote: RemoteFile,
    tmp: Path,
    plan: RangedDownloads,
    slots: RangeSlots,
    locate: Callable[[], Awaitable[RemoteFile]],
    policy: RetryPolicy,
    counter: RetryCounter,
) -> RangedBody:
    """``remote``'s bytes in ranges, verified (in ``tmp``, not yet at its target);
    ClientError when every try failed. ``locate`` asks the service for a fresh URL."""
    located = remote
    relocate = located.download_url is None
    renewed = False  # an object that changed is read again once: changed again, it has failed

    async def attempt() -> RangedBody:
        nonlocal located, relocate, renewed
        if relocate:
            located = await locate()
            relocate = False
        body = RangedBody(tmp, remote.size, plan.range_bytes)
        try:
            source = _Source(located, locate)
            await _fetch_ranges(source, body, slots, plan.parallel, policy, counter)
            located = source.located
            whole = await body.hasher.finished()
        except _Relocate as refused:
            body.discard()
            if renewed:
                raise ClientError(f"from storage: {refused}") from None
            renewed = relocate = True
            raise TryAgain(f"storage refused the URL: {refused}") from None
        except BaseException:
            body.discard()
            raise
        if whole and body.hasher.md5.hexdigest() == remote.digest:
            return body
        got = body.hasher.md5.hexdigest()
        body.discard()
        relocate = True
        raise TryAgain(
            f"got {remote.size} bytes with md5 {got}, expected "
            f"{remote.size} bytes with md5 {remote.digest}"
        )

    return await retrying_async(attempt, policy, what=f"GET of {remote.path}", counter=counter)


async def _fetch_ranges(
    source: _Source,
    body: RangedBody,
    slots: RangeSlots,
    parallel: int,
    policy: RetryPolicy,
    counter: RetryCounter,
) -> None:
    """Every range of ``body`` from ``source``, each under the retry policy (resumed where
    it stopped); the first range that fails for good cancels the others."""
    etags: list[str] = []

    async def one(index: int) -> None:
        async def attempt() -> None:
            begin, end = body.left(index)
            if begin == end:
                return
            generation, located = source.generation, source.located
            assert located.download_url is not None
            base = located.shard_offset or 0
            headers = {"Range": f"bytes={base + begin}-{base + end - 1}"}
            answer = await slots.get(located.download_url, headers, 206, body.sink(index))
            if answer.status != 206:
                said = answer.error_body[:200].decode("utf-8", "replace")
                check_status(answer.status, answer.headers.get("retry-after"), said)
                if answer.status in (403, 404, 416):
                    await source.renew(generation, f"HTTP {answer.status}: {said}")
                    raise TryAgain(f"storage refused the URL: HTTP {answer.status}: {said}")
                raise ClientError(f"from storage: {final_status_message(answer.status, said)}")
            if generation == source.generation:
                source.served = True
            etag = answer.headers.get("etag", "")
            if not etags:
                etags.append(etag)
            elif etag != etags[0]:
                raise _Relocate(f"the object changed while read (ETag {etags[0]}, then {etag})")
            if body.left(index)[0] != end:
                raise TryAgain(f"bytes {begin}-{end - 1}: the answer ended early")

        await retrying_async(
            attempt, policy, what=f"GET of bytes {body.ranges[index]}", counter=counter
        )

    # ``parallel`` workers take the ranges in offset order: the hashing thread never waits
    # on more than that many ranges ahead of it, and a 5 TiB file is no 160,000 tasks.
    indices = iter(range(len(body.ranges)))

    async def worker() -> None:
        for index in indices:
            await one(index)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(parallel, len(body.ranges))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
