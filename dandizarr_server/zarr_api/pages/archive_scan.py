"""What an archive's metadata says: its Zarr arrays and groups, found through its
``.checksum`` tree and read from their metadata documents alone.

Breadth first from the root, through groups and plain directories, reading in each directory
only the metadata documents it has (``.zarray`` or ``zarr.json``; a v2 group's ``.zgroup``
and ``.zattrs``); an array's own directories (its chunks) are never entered. At most
MAX_DIRECTORIES directories and MAX_SCAN_BYTES of metadata, each listing read from the stored
tree (no storage listing), so the cost is the same for an archive of a hundred files or of
millions.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dandizarr.ome.documents import ARRAY_V2, ATTRIBUTES_V2, GROUP_V2, NODE_V3
from dandizarr.sharding.array_documents import MetadataError, parse_document
from dandizarr.sharding.metadata_values import MAX_METADATA_BYTES
from dandizarr_server.zarr_api.pages.arrays import (
    MAX_DIRECTORIES,
    ArrayInfo,
    describe_document,
)
from dandizarr_server.zarr_api.runtime.tree import ListingSource

# The metadata bytes one scan reads and parses at most (each document at most
# MAX_METADATA_BYTES): past it the scan stops, ``truncated``. Of those, the bytes validated
# against the OME spec (about half a CPU-second a megabyte); groups past it are named as not
# checked. A stranger's archive costs one scan at most this much, once per tree version.
MAX_SCAN_BYTES = 4 << 20
MAX_VALIDATED_BYTES = 256 << 10


@dataclass(frozen=True)
class ArchiveScan:
    arrays: list[ArrayInfo]  # by path
    # The metadata documents read, parsed: {archive path of the file: its JSON object}.
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Directories left unread (MAX_DIRECTORIES or MAX_SCAN_BYTES reached).
    truncated: bool = False


def _wanted(names: set[str]) -> list[str]:
    """The documents to read of a directory holding files ``names``."""
    if ARRAY_V2 in names:
        return [ARRAY_V2]
    if NODE_V3 in names:
        return [NODE_V3]
    return [name for name in (GROUP_V2, ATTRIBUTES_V2) if name in names]


class MetadataFiles(Protocol):
    """What a scan reads documents through (an archive's: ``pages.reader.ArchiveFiles``)."""

    def prefetch(self, paths: Iterable[str]) -> None: ...

    def get(self, key: str) -> bytes | None: ...


def scan_archive(tree: ListingSource, files: MetadataFiles) -> ArchiveScan:
    found: list[ArrayInfo] = []
    documents: dict[str, dict[str, Any]] = {}
    level, visited, budget = [""], 0, MAX_SCAN_BYTES
    while level and visited < MAX_DIRECTORIES and budget > 0:
        level = level[: MAX_DIRECTORIES - visited]
        visited += len(level)
        listings = tree.read_many(level)
        reads: dict[str, list[str]] = {}
        for directory in level:
            listing = listings[directory]
            if listing is not None:
                reads[directory] = _wanted(set(listing.files))
        files.prefetch(
            posixpath.join(directory, name) for directory, names in reads.items() for name in names
        )
        deeper: list[str] = []
        for directory in level:
            listing = listings[directory]
            if listing is None:
                continue
            info = None
            for name in reads[directory]:
                path = posixpath.join(directory, name)
                size = listing.files[name].size
                is_array = name in (ARRAY_V2, NODE_V3)
                zarr_format = 2 if name == ARRAY_V2 else 3
                if size > MAX_METADATA_BYTES:
                    if is_array:
                        problem = f"{name} is larger than {MAX_METADATA_BYTES} bytes"
                        info = ArrayInfo.undescribed(directory, zarr_format, problem)
                    continue
                if size > budget:  # the scan's budget is spent: stop after this level
                    budget = 0
                    continue
                budget -= size
                raw = files.get(path)
                if raw is None:
                    continue
                try:
                    doc = parse_document(raw)
                except MetadataError as error:  # bad JSON, nested too deep, no object
                    if is_array:
                        info = ArrayInfo.undescribed(directory, zarr_format, f"{name}: {error}")
                    continue
                documents[path] = doc
                if is_array:
                    info = describe_document(directory, name, doc)  # parsed once, above
            if info is not None:
                found.append(info)
                continue
            deeper += [posixpath.join(directory, d) for d in sorted(listing.directories)]
        level = deeper
    truncated = bool(level) or budget <= 0
    return ArchiveScan(sorted(found, key=lambda info: info.path), documents, truncated)
