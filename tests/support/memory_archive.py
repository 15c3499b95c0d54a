"""An archive held in memory as the pages' scan reads one (``pages.archive_scan``): its
listings from ``compute_tree`` (the tree hash's own engine), its files by path. No database
and no storage: the fuzzer of the service's describing code (tests/zarr_api/
test_describe_fuzz.py) scans thousands of archives a run; the corpus walk
(test_hostile_metadata.py) reads its archives through the real service."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from dandizarr.checksums import DirectoryListing
from dandizarr.checksums.tree import compute_tree


class MemoryTree:
    """A ``ListingSource`` of the archive holding ``files`` ({path: bytes})."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self._listings: dict[str, DirectoryListing] = {}
        entries = [(path, len(data), hashlib.md5(data).hexdigest()) for path, data in files.items()]
        compute_tree(entries, on_directory=self._listings.__setitem__)

    def read(self, directory: str) -> DirectoryListing | None:
        return self._listings.get(directory)

    def read_many(self, directories: Sequence[str]) -> dict[str, DirectoryListing | None]:
        return {directory: self.read(directory) for directory in directories}


class MemoryFiles:
    """The archive's files as a scan reads them (``archive_scan.MetadataFiles``)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self._files = files

    def prefetch(self, paths: Iterable[str]) -> None:
        pass  # all in memory

    def get(self, key: str) -> bytes | None:
        return self._files.get(key)
