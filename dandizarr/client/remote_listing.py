"""What the server already holds of an upload, matched against its local listing.

A resumed upload of ten million files used to keep the server's listing as a dict of path to
``RemoteFile`` and the local paths as a set to find the files only the server has: a
gigabyte or more before a byte was sent. Both listings come in path order (the service's
``recursive`` listing and ``iter_local_files`` sort alike), so one merge of the two streams
matches them: memory keeps a byte per local file (none for a new archive); the server's size
and md5 of each file it holds, and the files only it holds, go to temporary files
(``listing_columns``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dandizarr.client.errors import ClientError
from dandizarr.client.listing_columns import PathColumn, RecordColumn
from dandizarr.client.models import RemoteFile

# Matched records gathered before they are written (in runs of neighbouring positions).
_WRITE_EVERY = 1 << 16


class RemoteListing:
    """The server's files against ``local_paths`` (in path order): which local positions it
    holds a file at, with its size and md5, and the files it holds that are not local.
    ``close`` when done (its temporary files)."""

    def __init__(self, local_paths: Iterable[str], count: int, remote: Iterable[RemoteFile]):
        self._count = count
        # Made at the first match, so a new archive costs nothing per file: a byte per local
        # file (1 where the server holds its path) and the server's size and md5 by position.
        self._held = bytearray()
        self._records: RecordColumn | None = None
        self.held_count = 0
        self.only_paths = PathColumn()
        self._only_records = RecordColumn()
        try:
            self._merge(iter(local_paths), remote)
        except BaseException:
            self.close()
            raise
        self.only_paths.seal()
        self._only_records.seal()

    def _merge(self, local: Iterator[str], remote: Iterable[RemoteFile]) -> None:
        matched: list[tuple[int, int, bytes]] = []
        position, current = 0, next(local, None)
        previous: str | None = None
        for file in remote:
            path = file.path
            if previous is not None and path <= previous:
                raise ClientError(
                    f"the server listed {path!r} after {previous!r}: its listing is not in path "
                    "order, so it cannot be matched against the local files"
                )
            previous = path
            while current is not None and current < path:
                position, current = position + 1, next(local, None)
            if current == path:
                matched.append((position, file.size, bytes.fromhex(file.digest)))
                if len(matched) >= _WRITE_EVERY:
                    self._write_held(matched)
                    matched = []
            else:
                self.only_paths.append(path)
                self._only_records.append(file.size, bytes.fromhex(file.digest))
        self._write_held(matched)

    def _write_held(self, matched: list[tuple[int, int, bytes]]) -> None:
        if not matched:
            return
        if self._records is None:
            self._held = bytearray(self._count)
            self._records = RecordColumn()
            self._records.append_empty(self._count)
            self._records.seal()
        for position, _, _ in matched:
            self._held[position] = 1
        self._records.write_many(matched)
        self.held_count += len(matched)

    def __len__(self) -> int:
        """Files the server holds."""
        return self.held_count + len(self.only_paths)

    def holds(self, i: int) -> bool:
        """Whether the server holds a file at local file ``i``'s path."""
        return self._records is not None and bool(self._held[i])

    def state(self, i: int) -> tuple[int, str] | None:
        """The server's size and md5 of local file ``i``, or None if it holds no such path."""
        if self._records is None or not self._held[i]:
            return None
        size, digest = self._records.read(i)
        return size, digest.hex()

    def only_entries(self) -> Iterator[tuple[str, int, str]]:
        """(path, size, md5) of each file only the server holds, in path order."""
        for path, (size, digest) in zip(self.only_paths, self._only_records, strict=True):
            yield path, size, digest.hex()

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
        self.only_paths.close()
        self._only_records.close()
