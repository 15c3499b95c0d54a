"""Files on a local disk: listing in archive path order, md5 in parallel threads."""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path

from dandizarr.concurrency import ordered_map

_CHUNK = 1 << 20


def iter_local_files(root: Path) -> Iterator[tuple[str, int]]:
    """(relative posix path, size) of every regular file below ``root``, sorted by path.

    Symlinks are followed (to files and to directories; a directory loop is an ELOOP OSError);
    anything that is not a regular file (sockets, broken links...) is left out. Nothing else
    is skipped: dot files are part of an archive.
    """
    yield from _walk_from(root, sizes=True)


def iter_local_paths(root: Path) -> Iterator[str]:
    """The paths ``iter_local_files`` gives, without their sizes: no file is looked at, only
    directories are read. A size needs the file's inode, read from disk when the cache is
    cold: a walk with sizes takes ten times longer (docs/measurements.md)."""
    for path, _ in _walk_from(root, sizes=False):
        yield path


def _walk_from(root: Path, *, sizes: bool) -> Iterator[tuple[str, int]]:
    top = os.fspath(root)
    info = os.stat(top)
    if not os.path.isdir(top):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", top)
    fd = open_directory(top)
    try:
        yield from _walk(fd, top, "", {(info.st_dev, info.st_ino)}, sizes)
    finally:
        os.close(fd)


def open_directory(path: str, *, dir_fd: int | None = None) -> int:
    """A descriptor of a directory, to look its entries up relative to it (fstatat, openat):
    a full path per entry makes the kernel walk every component of it again
    (docs/measurements.md). The caller closes it."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)


def _walk(
    fd: int, directory: str, prefix: str, active: set[tuple[int, int]], sizes: bool
) -> Iterator[tuple[str, int]]:
    """(path, size) below the open directory ``fd``; the size is -1 without ``sizes``."""
    children: list[tuple[str, str, bool]] = []
    with os.scandir(fd) as scan:
        for entry in scan:
            # Both answer from the entry's type (no system call) but for a symlink, which
            # they follow.
            if entry.is_dir():
                # Sorting "name/" among file names gives the global path order: everything
                # below "a" ("a/...") sorts exactly where "a/" does ("a-b" < "a/x" < "a0").
                children.append((entry.name + "/", entry.name, True))
            elif entry.is_file():
                children.append((entry.name, entry.name, False))
    children.sort()
    for _, name, is_dir in children:
        if not is_dir and not sizes:
            yield prefix + name, -1
            continue
        try:
            info = os.stat(name, dir_fd=fd)
        except OSError as error:  # named by its whole path, as a walk by paths would
            raise OSError(error.errno, error.strerror, os.path.join(directory, name)) from None
        if is_dir:
            path = os.path.join(directory, name)
            identity = (info.st_dev, info.st_ino)
            if identity in active:
                raise OSError(errno.ELOOP, "directory symlink loop", path)
            active.add(identity)
            child = open_directory(name, dir_fd=fd)
            try:
                yield from _walk(child, path, prefix + name + "/", active, sizes)
            finally:
                os.close(child)
            active.discard(identity)
        else:
            yield prefix + name, info.st_size


_buffers = threading.local()


def _hash_file(path: str | Path) -> tuple[int, str]:
    digest = hashlib.md5()
    size = 0
    # One buffer per hashing thread: allocating 1 MiB per file cost more than hashing a small one.
    buffer = getattr(_buffers, "buffer", None)
    if buffer is None:
        buffer = _buffers.buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        while n := file.readinto(buffer):
            digest.update(view[:n])  # hashlib releases the GIL on large updates
            size += n
    return size, digest.hexdigest()


# Files per task of the hashing threads: a future and a thread hand-off per small file cost
# more than hashing it (docs/measurements.md).
FILES_PER_TASK = 32


def _groups(paths: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(paths)
    while group := list(islice(iterator, size)):
        yield group


def _hash_group(base: str, group: list[str]) -> list[tuple[int, str]]:
    return [_hash_file(os.path.join(base, path)) for path in group]


def _named(group: list[str], hashed: list[tuple[int, str]]) -> Iterator[tuple[str, int, str]]:
    for path, (size, md5) in zip(group, hashed, strict=True):
        yield path, size, md5


def md5_file(path: Path) -> str:
    return _hash_file(Path(path))[1]


def md5_files(
    root: Path, paths: Iterable[str], *, jobs: int | None = None
) -> Iterator[tuple[str, int, str]]:
    """(path, size, md5) for each relative path, in input order, hashed by ``jobs`` threads.

    Streaming: at most ``4 * jobs`` tasks of ``FILES_PER_TASK`` files are in flight, whatever
    the length of ``paths``. The size is the number of bytes hashed, so size and md5 always
    agree.
    """
    jobs = max(1, jobs if jobs is not None else os.cpu_count() or 1)
    base = os.fspath(root)
    if jobs == 1:
        for path in paths:
            yield (path, *_hash_file(os.path.join(base, path)))
        return
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="md5") as pool:
        hashed = ordered_map(
            pool,
            lambda group: (group, _hash_group(base, group)),
            _groups(paths, FILES_PER_TASK),
            ahead=4 * jobs,
        )
        try:
            for group, results in hashed:
                yield from _named(group, results)
        finally:
            hashed.close()  # abandoned early (error or consumer stopped): cancel the rest
