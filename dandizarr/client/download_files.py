"""A downloaded file's bytes on their way to disk: hashed as they arrive (``Body``), then
written and renamed into place by a few threads (``FileWriter``) once verified.

Creating a file can take a millisecond on a busy disk; a few threads create many at once
while the event loop goes on with the next GETs. Few, not one per transfer: every thread
more is another contender for the GIL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from dandizarr.client.models import RemoteFile

# A body up to this size is kept in memory until verified, then written with one call.
IN_MEMORY = 1 << 20
WRITER_THREADS = 4
# Packed files side by side in one shard are asked for with one GET of their whole span, up to
# this many bytes and files.
RUN_BYTES = 2 << 20
RUN_FILES = 1000


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Body:
    """A file's bytes as they arrive: hashed, kept in memory, or spilled to ``tmp`` when
    large; at the target only through ``place`` (after verification)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.md5 = hashlib.md5()
        self.size = 0
        self._parts: list[bytes] = []
        self._fd: int | None = None

    def write(self, chunk: bytes) -> None:
        self.md5.update(chunk)
        self.size += len(chunk)
        if self._fd is None and self.size <= IN_MEMORY:
            self._parts.append(chunk)
            return
        if self._fd is None:
            self._fd = self._open()
            self._parts, pending = [], self._parts
            for part in pending:
                _write_all(self._fd, part)
        _write_all(self._fd, chunk)

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            return os.open(self.tmp, flags, 0o644)
        except FileNotFoundError:
            self.tmp.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.tmp, flags, 0o644)

    def place(self, target: Path) -> None:
        """Write what is in memory, close, and rename the file to ``target``."""
        try:
            if self._fd is None:
                self._fd = self._open()
                _write_all(self._fd, b"".join(self._parts))
                self._parts = []
            os.close(self._fd)
            self._fd = None
            os.replace(self.tmp, target)
        except OSError:
            self.discard()
            raise

    def discard(self) -> None:
        self._parts = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


Placed = Callable[[OSError | None], None]


class Placeable(Protocol):
    """A verified file's bytes waiting for their name: a ``Body``, or a big file's
    ``ranged_gets.RangedBody``."""

    def place(self, target: Path) -> None: ...

    def discard(self) -> None: ...


class FileWriter:
    """Places verified bodies at their targets from ``WRITER_THREADS`` threads; each item's
    callback is called (in a writer thread) with None, or with the error that stopped it.
    ``put`` blocks while ``backlog`` items wait (the memory they hold is bounded)."""

    def __init__(self, backlog: int) -> None:
        self._queue: queue.Queue[tuple[Placeable, Path, Placed] | None] = queue.Queue(backlog)
        self._threads = [
            threading.Thread(target=self._drain, name=f"dandizarr-writer-{n}", daemon=True)
            for n in range(WRITER_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    def put(self, body: Placeable, target: Path, placed: Placed) -> None:
        self._queue.put((body, target, placed))

    def close(self) -> None:
        """Wait until every body put is placed (or has failed)."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            body, target, placed = item
            try:
                body.place(target)
            except OSError as error:
                placed(error)
            else:
                placed(None)


def shard_runs(files: Iterable[RemoteFile]) -> Iterator[list[RemoteFile]]:
    """``files`` in order, cut into runs: packed files that follow each other in the same
    shard object (one byte range covers them all) together, every other file alone."""
    run: list[RemoteFile] = []
    span = 0
    for file in files:
        if run and (
            file.size == 0
            or file.shard_offset is None
            or file.download_url != run[-1].download_url
            or file.shard_offset != (run[-1].shard_offset or 0) + run[-1].size
            or len(run) >= RUN_FILES
            or span + file.size > RUN_BYTES
        ):
            yield run
            run, span = [], 0
        run.append(file)
        span += file.size
        if file.size == 0 or file.shard_offset is None:
            yield run
            run, span = [], 0
    if run:
        yield run


def splitter(bodies: list[Body], sizes: list[int]) -> Callable[[bytes], None]:
    """A sink that hands each body its share of one span's bytes, in order (what comes
    past the last one goes to the last, whose size then tells)."""
    state = {"index": 0, "left": sizes[0] if sizes else 0}

    def feed(chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            index, left = state["index"], state["left"]
            if left == 0 and index < len(bodies) - 1:
                state["index"], state["left"] = index + 1, sizes[index + 1]
                continue
            take = len(view) if index == len(bodies) - 1 else min(left, len(view))
            bodies[index].write(bytes(view[:take]))
            state["left"] = left - take
            view = view[take:]

    return feed
