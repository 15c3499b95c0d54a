"""The names of Zarr's metadata files, the one home of them: every reader, the packer, the
manifest and the object store's inline JSON types take them from here."""

from __future__ import annotations

ARRAY_V2 = ".zarray"
GROUP_V2 = ".zgroup"
ATTRIBUTES_V2 = ".zattrs"
CONSOLIDATED_V2 = ".zmetadata"  # consolidated metadata (zarr-python 2's, read by 3's too)
NODE_V3 = "zarr.json"  # an array's or a group's metadata, attributes included

# Every metadata file: small JSON documents, never packed into shards, served as JSON.
METADATA_FILE_NAMES = frozenset({ARRAY_V2, GROUP_V2, ATTRIBUTES_V2, CONSOLIDATED_V2, NODE_V3})
