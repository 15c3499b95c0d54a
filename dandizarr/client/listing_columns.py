"""The columns of an upload's local listing, sized for archives of ten million files.

A path kept as a ``str`` in a list costs about 65 bytes and its size and md5 another 24 or
more: a listing of 10,000,000 files would hold a gigabyte before a byte is sent. Here the
paths (UTF-8, one after another) and each file's size and md5 (a 24-byte record) live in
unlinked temporary files, written once as the tree is walked and read back in path order for
the local checksum, or one at a time where a file is needed; memory holds a 4-byte end offset
per path (docs/sharded.md, "Client memory"). The page cache, not the process, keeps them.
"""

from __future__ import annotations

import os
import struct
import tempfile
from array import array
from collections.abc import Iterable, Iterator
from typing import IO

_ENCODING = ("utf-8", "surrogatepass")  # any str round-trips, undecodable file names included
_BLOCK = 1 << 20  # bytes read at a time when a column is read in order


def _widened(column: array[int], value: int) -> array[int]:
    """``column`` itself, or a copy with 8-byte items once ``value`` no longer fits its type."""
    if column.typecode != "q" and value >= 1 << (8 * column.itemsize):
        return array("q", column)
    return column


class _SpillFile:
    """An unlinked temporary file: appended to while the listing is made, then read and
    overwritten in place with positional reads and writes (thread-safe)."""

    def __init__(self, prefix: str) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix=prefix)  # noqa: SIM115 (close)
        self.fd = self._file.fileno()

    def append(self, data: bytes) -> None:
        self._file.write(data)  # buffered: one write call per 8 KiB or so

    def seal(self) -> None:
        """Every append readable by position from now on."""
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class PathColumn:
    """Paths in a temporary file, one after another, and the end of each (in memory)."""

    def __init__(self) -> None:
        self._names = _SpillFile("dandizarr-paths-")
        self._ends: array[int] = array("I")
        self._ends_limit = 1 << (8 * self._ends.itemsize)
        self._size = 0

    def append(self, path: str) -> None:
        encoded = path.encode(*_ENCODING)
        self._names.append(encoded)
        self._size += len(encoded)
        if self._size >= self._ends_limit:
            self._ends = _widened(self._ends, self._size)
            self._ends_limit = 1 << 63
        self._ends.append(self._size)

    def seal(self) -> None:
        self._names.seal()

    def close(self) -> None:
        self._names.close()

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> str:
        ends = self._ends
        if i < 0:
            i += len(ends)
        start = ends[i - 1] if i else 0
        return os.pread(self._names.fd, ends[i] - start, start).decode(*_ENCODING)

    def __iter__(self) -> Iterator[str]:
        fd, ends = self._names.fd, self._ends
        block, block_start = b"", 0
        start = 0
        for end in ends:
            if end > block_start + len(block):
                block_start = start
                block = os.pread(fd, max(_BLOCK, end - start), start)
            yield block[start - block_start : end - block_start].decode(*_ENCODING)
            start = end


class RecordColumn:
    """Each file's size and md5 digest as a 24-byte record, by position, in a temporary file.
    Writes of neighbouring positions are joined into one."""

    SIZE = 24
    _RECORD = struct.Struct("<Q16s")
    _READ_RECORDS = 1 << 15

    def __init__(self) -> None:
        self._records = _SpillFile("dandizarr-records-")
        self._count = 0

    def append(self, size: int, digest: bytes = bytes(16)) -> None:
        self._records.append(self._RECORD.pack(size, digest))
        self._count += 1

    def append_empty(self, count: int) -> None:
        """``count`` records of size 0 and no digest, to be written by position later."""
        for first in range(0, count, self._READ_RECORDS):
            n = min(self._READ_RECORDS, count - first)
            self._records.append(bytes(self.SIZE * n))
            self._count += n

    def seal(self) -> None:
        self._records.seal()

    def close(self) -> None:
        self._records.close()

    def __len__(self) -> int:
        return self._count

    def write(self, i: int, size: int, digest: bytes) -> None:
        os.pwrite(self._records.fd, self._RECORD.pack(size, digest), self.SIZE * i)

    def write_many(self, items: Iterable[tuple[int, int, bytes]]) -> None:
        """Write (position, size, digest) records: one write per run of consecutive
        positions."""
        pack, record_size, fd = self._RECORD.pack, self.SIZE, self._records.fd
        run_start, run = -1, bytearray()
        for i, size, digest in sorted(items):
            if run and i == run_start + len(run) // record_size:
                run += pack(size, digest)
                continue
            if run:
                os.pwrite(fd, run, record_size * run_start)
            run_start, run = i, bytearray(pack(size, digest))
        if run:
            os.pwrite(fd, run, record_size * run_start)

    def read(self, i: int) -> tuple[int, bytes]:
        size, digest = self._RECORD.unpack(os.pread(self._records.fd, self.SIZE, self.SIZE * i))
        return size, digest

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        """(size, digest) of every position, in order."""
        step = self._READ_RECORDS
        for first in range(0, self._count, step):
            block = os.pread(
                self._records.fd, self.SIZE * min(step, self._count - first), self.SIZE * first
            )
            yield from self._RECORD.iter_unpack(block)
