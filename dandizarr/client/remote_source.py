"""A Zarr tree in a remote store, read through fsspec (``s3://``, ``gs://``, ``https://``,
``memory://``, ``file://``, any fsspec protocol): its files in archive path order, and each
file's bytes in bounded pieces, for ``dandizarr upload URL`` (``remote_upload``).

Nothing here holds a whole file: a file is read in pieces of ``piece_bytes`` at most, once
to learn its md5 (kept whole only when it fits in one piece), and again as the body of its
PUT when it does not (a Content-MD5 header goes before the body, so its md5 must be known
before the first byte is sent).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dandizarr.client.errors import ClientError

# Bytes read from the source at a time (and the most a file kept in memory whole has): big
# enough that a request's latency is small beside its transfer, small enough that
# jobs x 2 pieces is little memory.
PIECE_BYTES = 8 << 20
# What makes a directory a Zarr: the metadata file at its top (v3, or v2 group or array).
ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray")
# ``scheme://`` or an fsspec chain (``simplecache::s3://...``): not a local path.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*(://|::)")
# How a file is opened to be read front to back. HTTP: a streamed GET (``block_size=0``), not
# ranged reads, which a server without Range support (python's http.server) would answer with
# the whole file each time. Elsewhere: no cache, so each read is one ranged GET of a piece.
_STREAMED_OPEN: dict[str, dict[str, Any]] = {
    "http": {"block_size": 0},
    "https": {"block_size": 0},
}
_INSTALL_HINT = "pip install 'dandizarr[remote]'"


def is_remote_url(text: str) -> bool:
    """Whether ``text`` names a remote source (a URL with a scheme), not a local path."""
    return bool(_URL.match(text))


def parse_storage_options(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` items as fsspec storage options: a value that is JSON (``true``, ``3``,
    ``{"endpoint_url": "..."}``) as decoded, any other as the string."""
    options: dict[str, Any] = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ClientError(f"a storage option is key=value, not {item[:80]!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


@contextlib.contextmanager
def source_errors(what: str) -> Iterator[None]:
    """Errors of the source's filesystem (botocore's, aiohttp's, OSError...) as ClientError."""
    try:
        yield
    except ClientError:
        raise
    except FileNotFoundError:
        raise ClientError(f"{what}: not found") from None
    except Exception as error:  # any library's: named by its class, its message bounded
        text = str(error).strip().replace("\n", " ")[:300]
        raise ClientError(f"{what}: {type(error).__name__}: {text}") from error


@dataclass
class Hashed:
    """A source file as read once: its size, md5 and, when it fits in one piece, its bytes."""

    size: int
    md5: str
    data: bytes | None


class RemoteTree:
    """The directory ``url`` of an fsspec filesystem, opened with ``storage_options``."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        piece_bytes: int = PIECE_BYTES,
    ) -> None:
        try:
            import fsspec
        except ImportError:
            raise ClientError(f"uploading from a URL needs fsspec: {_INSTALL_HINT}") from None
        self.url = url
        self.piece_bytes = piece_bytes
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except ImportError as error:  # fsspec names the package its protocol needs
            raise ClientError(f"{url}: {error} ({_INSTALL_HINT})") from None
        except ValueError as error:  # an unknown protocol
            raise ClientError(f"{url}: {error}") from None
        except TypeError as error:  # a storage option the filesystem does not take
            raise ClientError(f"{url}: a storage option was refused: {error}") from None
        self.root = root.rstrip("/")
        protocol = self.fs.protocol
        first = protocol if isinstance(protocol, str) else protocol[0]
        self._open_options = _STREAMED_OPEN.get(first, {"cache_type": "none"})

    @property
    def name(self) -> str:
        """The tree's directory name: an archive's default name."""
        return self.root.rstrip("/").rsplit("/", 1)[-1] or self.url

    def _full(self, path: str) -> str:
        return f"{self.root}/{path}"

    def check_zarr(self) -> None:
        """ClientError unless the tree exists and is a Zarr (a metadata file at its top)."""
        with source_errors(self.url):
            try:
                entries = self.fs.ls(self.root, detail=False)
            except (FileNotFoundError, NotADirectoryError):
                raise ClientError(f"{self.url} does not exist or is not a directory") from None
        names = {str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries}
        if not names & set(ZARR_METADATA):
            raise ClientError(
                f"{self.url} is not a Zarr: none of {', '.join(ZARR_METADATA)} at its top"
            )

    def files(self) -> list[tuple[str, int]]:
        """(path in the archive, size; -1 when the listing gives none) of every file, in
        archive path order."""
        with source_errors(f"listing {self.url}"):
            found = self.fs.find(self.root, detail=True, withdirs=False)
        prefix = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        files = []
        for name, info in found.items():
            stripped = self.fs._strip_protocol(name)
            if info.get("type") == "directory" or not stripped.startswith(prefix):
                continue
            size = info.get("size")
            files.append((stripped[len(prefix) :], -1 if size is None else int(size)))
        files.sort()
        return files

    def pieces(self, path: str) -> Iterator[bytes]:
        """The bytes of file ``path``, front to back, ``piece_bytes`` at most at a time."""
        with (
            source_errors(f"reading {self._full(path)}"),
            self.fs.open(self._full(path), "rb", **self._open_options) as file,
        ):
            while True:
                piece = _read_up_to(file, self.piece_bytes)
                if not piece:
                    return
                yield piece

    def hash(self, path: str) -> Hashed:
        """Read ``path`` once: its size, md5 and (when one piece holds it) its bytes."""
        md5 = hashlib.md5(usedforsecurity=False)
        size = 0
        kept: bytes | None = b""  # an empty file: no piece
        for number, piece in enumerate(self.pieces(path)):
            md5.update(piece)
            size += len(piece)
            kept = piece if number == 0 else None  # the first piece dropped at the second
        return Hashed(size, md5.hexdigest(), kept)

    def body(self, path: str, size: int) -> PieceReader:
        """A PUT body streaming ``path`` (``size`` bytes) a piece at a time."""
        return PieceReader(self, path, size)


def _read_up_to(file: Any, count: int) -> bytes:
    """``count`` bytes, fewer only at the end: a streamed read may answer less at a time."""
    first = file.read(count)
    if not first or len(first) == count:
        return bytes(first)
    parts = [first]
    got = len(first)
    while got < count:
        more = file.read(count - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class PieceReader:
    """A file of the tree as a streamed PUT body: ``len`` its size (so the PUT has a
    Content-Length), read in the tree's pieces however small the sender's reads are, hashed
    as it goes (``md5``) and stopped at ``size`` bytes."""

    def __init__(self, tree: RemoteTree, path: str, size: int) -> None:
        self._tree, self._path, self._size = tree, path, size
        self._pieces: Iterator[bytes] | None = None
        self._buffer = memoryview(b"")
        self._left = size
        self.md5 = hashlib.md5(usedforsecurity=False)

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        if not self._buffer:
            if self._pieces is None:
                self._pieces = self._tree.pieces(self._path)
            piece = next(self._pieces, b"")
            if not piece:
                whole = self._tree._full(self._path)
                raise ClientError(f"{whole} is shorter than when it was read")
            self._buffer = memoryview(piece)
        n = len(self._buffer) if n is None or n < 0 else n
        n = min(n, len(self._buffer), self._left)
        data = bytes(self._buffer[:n])
        self._buffer = self._buffer[n:]
        self._left -= n
        self.md5.update(data)
        return data
