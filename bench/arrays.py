"""The metadata of the benchmarks' synthetic arrays, one home for the sources they write."""

from __future__ import annotations

import json


def row_chunked_zarray(rows: int, columns: int, chunk_bytes: int) -> str:
    """A Zarr v2 ``.zarray`` of raw uint8 chunks of one row by ``chunk_bytes`` bytes, nested
    keys ``row/column``: ``rows`` x ``columns`` chunk files."""
    return json.dumps(
        {
            "zarr_format": 2,
            "shape": [rows, columns * chunk_bytes],
            "chunks": [1, chunk_bytes],
            "dtype": "|u1",
            "compressor": None,
            "filters": None,
            "fill_value": 0,
            "order": "C",
            "dimension_separator": "/",
        }
    )
