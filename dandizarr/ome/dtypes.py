"""Zarr data types named as people read them: v2's ``<u2`` is ``uint16``.

Byte order is named only where it matters (more than one byte, big-endian: ``uint16,
big-endian``); structured types list their fields; object and other types a numpy build does
not know are described, never an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_KINDS = {"O": "object", "S": "bytes", "U": "unicode string", "V": "raw bytes", "M": "datetime"}
_MAX_FIELDS = 16


def _numpy_name(dtype: np.dtype[Any]) -> str:
    if dtype.fields:
        fields = list(dtype.fields.items())
        shown = ", ".join(f"{name}: {_numpy_name(info[0])}" for name, info in fields[:_MAX_FIELDS])
        more = f", … {len(fields) - _MAX_FIELDS} more" if len(fields) > _MAX_FIELDS else ""
        return f"struct {{{shown}{more}}}"
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


def dtype_name(zarr_format: int, value: Any) -> str:
    """The data type of an array's metadata (v2 ``dtype``, v3 ``data_type``) as a name."""
    if zarr_format == 3:
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            return value["name"]
        return repr(value)
    if isinstance(value, list):  # a structured type: [[name, type(, shape)], ...]
        try:
            return _numpy_name(np.dtype([tuple(field) for field in value]))
        except (TypeError, ValueError):
            return "struct (unreadable fields)"
    if value == "|O":
        return "object"
    try:
        return _numpy_name(np.dtype(value))
    except (TypeError, ValueError):
        return str(value)
