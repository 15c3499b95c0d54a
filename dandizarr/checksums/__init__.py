"""The zarr tree-hash engine: pure Python, no Django.

``compute_tree`` hashes a whole archive from a (path, size, md5) listing; ``apply_changes``
updates a stored tree of ``.checksum`` files for a batch of changed files (``changed_tree``
computes every affected listing without writing); ``local`` hashes files on disk. The format
is the DANDI Archive's Zarr checksum ("Tree hashing scheme" of its
design document zarr-support-3, https://github.com/dandi/dandi-archive/blob/master/doc/design/zarr-support-3.md).
"""

from dandizarr.checksums.listing import (
    EMPTY_DIGEST,
    ChecksumFormatError,
    DirectoryEntry,
    DirectoryListing,
    FileEntry,
    decode_checksum_file,
    encode_checksum_file,
    is_md5,
    parse_directory_digest,
)
from dandizarr.checksums.tree import TreeSummary, compute_tree
from dandizarr.checksums.tree_directories import UnsortedEntriesError
from dandizarr.checksums.update import (
    ChangedTree,
    ChecksumTree,
    FileState,
    MemoryChecksumTree,
    apply_changes,
    changed_tree,
)

__all__ = [
    "EMPTY_DIGEST",
    "ChangedTree",
    "ChecksumFormatError",
    "ChecksumTree",
    "DirectoryEntry",
    "DirectoryListing",
    "FileEntry",
    "FileState",
    "MemoryChecksumTree",
    "TreeSummary",
    "UnsortedEntriesError",
    "apply_changes",
    "changed_tree",
    "compute_tree",
    "decode_checksum_file",
    "encode_checksum_file",
    "is_md5",
    "parse_directory_digest",
]
