"""Reading the member files of the shards being built, several at once, in order.

A packed upload reads every chunk file once, and most are small: the time goes to waiting for
the disk, one open and read after another, so several threads read at once. The files
are read in runs of consecutive members (a task per run, not per file: a future costs more
than reading a cached small file), a few runs ahead of the shard being written.

Each file is read with ``os.open`` and ``os.read`` into a buffer of the size expected (one more
byte, to see the end at once): ``open(path, "rb").read()`` adds a buffered reader
object, an ``isatty`` ioctl, two ``fstat``s and an ``lseek`` per file.

Each file's pages are dropped from the page cache once read (``POSIX_FADV_DONTNEED``): the
upload reads it once, and keeping ten million files' pages made the kernel reclaim memory all
through the upload, evicting the inodes the walk had cached and the rest of the machine's
cache with them. Loose uploads keep their pages: they read a file twice (to hash it, then to
send it). The figures: docs/measurements.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from dandizarr.checksums.local import open_directory
from dandizarr.concurrency import ordered_map

# Not on every system (macOS has no posix_fadvise): there, pages stay cached.
_DROP_PAGES = getattr(os, "posix_fadvise", None)

# Threads reading files for all the shards being built.
READ_THREADS = 8
# Members per read task, and tasks queued ahead per shard being built.
RUN_FILES = 64
RUNS_AHEAD = 8


class TooBig:
    """A file that holds more than the reader's ``limit``: read no further (it is not packed:
    the upload sends it loose, in parts, ``dandizarr.client.shards``)."""


TOO_BIG = TooBig()


def read_file(
    path: str, size_hint: int, *, dir_fd: int | None = None, limit: int | None = None
) -> bytes | TooBig:
    """The whole of a regular file, expected to hold ``size_hint`` bytes (it may hold more or
    fewer: it is read to its end); a relative ``path`` is looked up from ``dir_fd``. TOO_BIG,
    once more than ``limit`` bytes are read (never more than ``limit`` and a block in memory)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        data = os.read(fd, size_hint + 1)
        if not data:
            return data
        parts = [data]
        total = len(data)
        while part := os.read(fd, max(size_hint, 1 << 16)):
            total += len(part)
            if limit is not None and total > limit:
                return TOO_BIG
            parts.append(part)
        if limit is not None and total > limit:
            return TOO_BIG
        if _DROP_PAGES is not None:
            _DROP_PAGES(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _read_run(
    root_fd: int, paths: Sequence[str], sizes: Sequence[int], limit: int | None
) -> list[bytes | TooBig | None]:
    """Each file's bytes, None for one that is gone (reported by the caller)."""
    out: list[bytes | TooBig | None] = []
    for path, size in zip(paths, sizes, strict=True):
        try:
            out.append(read_file(path, size, dir_fd=root_fd, limit=limit))
        except FileNotFoundError:
            out.append(None)
    return out


class MemberReader:
    """A pool of ``READ_THREADS`` threads reading files below one root; ``close`` at the end."""

    def __init__(self, root: str, threads: int = READ_THREADS) -> None:
        self.root = root
        # Paths are looked up from the root's descriptor, not from "/" (the kernel walks
        # fewer components per file); opened at the first read (shards are built by several
        # threads).
        self._root_fd = -1
        self._root_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dandizarr-read")

    def read(
        self, paths: Sequence[str], sizes: Sequence[int], limit: int | None = None
    ) -> Iterator[bytes | TooBig | None]:
        """The bytes of each of ``paths`` in order (None: the file is gone), read ahead by at
        most ``RUN_FILES * RUNS_AHEAD`` files; ``sizes``: the bytes each file is expected to
        hold (read at once; the file is read to its end either way); TOO_BIG for a file over
        ``limit`` bytes. Errors other than a missing file are raised."""
        root_fd = self._root_descriptor()
        runs = ordered_map(
            self._pool,
            lambda start: _read_run(
                root_fd, paths[start : start + RUN_FILES], sizes[start : start + RUN_FILES], limit
            ),
            range(0, len(paths), RUN_FILES),
            ahead=RUNS_AHEAD,
        )
        try:
            for run_data in runs:
                yield from run_data
        finally:
            runs.close()  # abandoned early (an error, or the upload stopped)

    def _root_descriptor(self) -> int:
        with self._root_lock:
            if self._root_fd < 0:
                self._root_fd = open_directory(self.root)
            return self._root_fd

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._root_lock:
            if self._root_fd >= 0:
                os.close(self._root_fd)
                self._root_fd = -1
