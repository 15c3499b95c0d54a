"""Zarr data types named as people read them: v2's ``<u2`` is ``uint16``.

Byte order is named only where it matters (more than one byte, big-endian: ``uint16,
big-endian``); structured types list their first MAX_LISTED fields and count the rest; object
and other types a numpy build does not know are described, never an error. A name is at most
MAX_NAME_CHARS characters, whatever the metadata declares.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dandizarr.sharding.array_documents import v2_dtype
from dandizarr.sharding.metadata_values import MetadataError, shown

_KINDS = {"O": "object", "S": "bytes", "U": "unicode string", "V": "raw bytes", "M": "datetime"}
# How many items of a list read from metadata a description names (a structured type's
# fields; on the service's pages an array's codecs and filters, a verdict's errors): the rest
# are counted, not named, so a megabyte of metadata is never a megabyte of page.
MAX_LISTED = 16
MAX_NAME_CHARS = 400


def _numpy_name(dtype: np.dtype[Any]) -> str:
    # Recursive over a structured type's fields: as deep as v2_dtype let numpy nest it
    # (array_documents.MAX_DTYPE_NESTING), each level MAX_LISTED fields at most.
    if dtype.fields:
        fields = list(dtype.fields.items())
        named = ", ".join(f"{name}: {_numpy_name(info[0])}" for name, info in fields[:MAX_LISTED])
        more = f", … {len(fields) - MAX_LISTED} more" if len(fields) > MAX_LISTED else ""
        return f"struct {{{named}{more}}}"
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return f"{_numpy_name(base)}[{'x'.join(map(str, shape))}]"
    if dtype.kind in "biufc":
        name = dtype.newbyteorder("=").name
        if dtype.itemsize > 1 and dtype.byteorder == ">":
            return f"{name}, big-endian"
        if dtype.itemsize > 1 and dtype.byteorder == "<" and np.little_endian is False:
            return f"{name}, little-endian"
        return name
    if dtype.kind in ("S", "U", "V"):
        unit = 4 if dtype.kind == "U" else 1
        return f"{_KINDS[dtype.kind]} of {dtype.itemsize // unit}"
    return _KINDS.get(dtype.kind, str(dtype))


def _bounded(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"


def dtype_name(zarr_format: int, value: Any) -> str:
    """The data type of an array's metadata (v2 ``dtype``, v3 ``data_type``) as a name."""
    if zarr_format == 3:
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            value = value["name"]
        return _bounded(value) if isinstance(value, str) else shown(value)
    if isinstance(value, str) and value == "|O":
        return "object"
    try:
        return _bounded(_numpy_name(v2_dtype(value)))
    except MetadataError:
        if isinstance(value, list):  # a structured type: [[name, type(, shape)], ...]
            return "struct (unreadable fields)"
        return _bounded(value) if isinstance(value, str) else shown(value)
