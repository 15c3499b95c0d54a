"""The metadata documents of a Zarr hierarchy, by path: what every OME reading starts from.

A reader (the service's archive pages, the client's upload check) gathers the documents it
needs (``.zgroup``, ``.zattrs``, ``.zarray``, ``zarr.json``), never a chunk, into
``Documents``: ``{archive path of the file: its parsed JSON object}``. Everything in
``dandizarr.ome`` reads only these.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dandizarr.sharding import array_documents
from dandizarr.zarr_names import ARRAY_V2, ATTRIBUTES_V2, GROUP_V2, NODE_V3

# The files a Zarr node's metadata lives in (v2: group marker, attributes, array; v3: one).
DOCUMENT_NAMES = (ARRAY_V2, NODE_V3, GROUP_V2, ATTRIBUTES_V2)

Documents = Mapping[str, Mapping[str, Any]]


def parse_document(raw: bytes) -> dict[str, Any] | None:
    """A metadata file's JSON object; None for anything else (bad JSON, not an object): the
    library's one rule of a metadata document (dandizarr.sharding.array_documents)."""
    try:
        return array_documents.parse_document(raw)
    except array_documents.MetadataError:
        return None


def join(directory: str, name: str) -> str:
    return posixpath.join(directory, name) if directory else name


@dataclass(frozen=True)
class Node:
    """One directory of the hierarchy: a group or an array, and its attributes."""

    path: str
    zarr_format: int
    is_array: bool
    attributes: Mapping[str, Any]  # v2: .zattrs; v3: zarr.json's "attributes"
    array: Mapping[str, Any] | None  # the array's metadata document

    @property
    def ome(self) -> Mapping[str, Any]:
        """The OME-NGFF metadata: v3's ``attributes.ome``, v2's attributes themselves."""
        if self.zarr_format == 3:
            ome = self.attributes.get("ome")
            return ome if isinstance(ome, Mapping) else {}
        return self.attributes

    @property
    def metadata_file(self) -> str:
        if self.zarr_format == 3:
            return join(self.path, NODE_V3)
        return join(self.path, ARRAY_V2 if self.is_array else ATTRIBUTES_V2)


def node(docs: Documents, path: str) -> Node | None:
    """The group or array at ``path``, or None when none of its documents was read."""
    v3 = docs.get(join(path, NODE_V3))
    if v3 is not None and v3.get("node_type") in ("group", "array"):
        attributes = v3.get("attributes")
        is_array = v3.get("node_type") == "array"
        return Node(
            path,
            3,
            is_array,
            attributes if isinstance(attributes, Mapping) else {},
            v3 if is_array else None,
        )
    array = docs.get(join(path, ARRAY_V2))
    attributes = docs.get(join(path, ATTRIBUTES_V2))
    if array is None and attributes is None and join(path, GROUP_V2) not in docs:
        return None
    return Node(path, 2, array is not None, attributes or {}, array)


def nodes(docs: Documents) -> dict[str, Node]:
    """Every node some document of ``docs`` belongs to, by path."""
    paths = {posixpath.dirname(name) for name in docs}
    found = {path: node(docs, path) for path in sorted(paths)}
    return {path: n for path, n in found.items() if n is not None}
