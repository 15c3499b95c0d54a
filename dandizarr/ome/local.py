"""The metadata documents of a local Zarr directory (what ``dandizarr upload`` checks before
sending anything): every ``.zgroup``, ``.zattrs``, ``.zarray`` and ``zarr.json``, reading no
chunk and entering no array's own directories (its chunks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dandizarr.ome.documents import ARRAY_V2, DOCUMENT_NAMES, NODE_V3, parse_document

# A metadata document larger than this is not read (as on the service's pages).
MAX_DOCUMENT_BYTES = 1 << 20


def local_documents(root: str | Path) -> dict[str, dict[str, Any]]:
    """{path relative to ``root`` (``/``-separated): parsed document}."""
    documents: dict[str, dict[str, Any]] = {}
    for directory, subdirectories, names in os.walk(root):
        relative = os.path.relpath(directory, root).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        is_array = False
        for name in DOCUMENT_NAMES:
            if name not in names:
                continue
            path = os.path.join(directory, name)
            if os.path.getsize(path) > MAX_DOCUMENT_BYTES:
                continue
            with open(path, "rb") as file:
                doc = parse_document(file.read())
            if doc is None:
                continue
            documents[prefix + name] = doc
            if name == ARRAY_V2 or (name == NODE_V3 and doc.get("node_type") == "array"):
                is_array = True
        if is_array:
            subdirectories.clear()  # an array's directories hold its chunks
        else:
            subdirectories.sort()
    return documents
