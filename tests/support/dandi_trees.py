"""Small Zarr v2 and v3 trees as the dandi tests upload them: nested groups, attributes,
unicode names, an empty file."""

from __future__ import annotations

import json
from pathlib import Path


def _write(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _array_v2(shape: list[int], chunks: list[int]) -> bytes:
    meta = {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": "<u1",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
    return json.dumps(meta).encode()


def zarr_v2(root: Path) -> None:
    group = json.dumps({"zarr_format": 2}).encode()
    _write(
        root,
        {
            ".zgroup": group,
            ".zattrs": json.dumps({"title": "dandi test", "ünïcode": "✓"}).encode(),
            "arr/.zarray": _array_v2([4, 4], [2, 2]),
            "arr/0.0": bytes(range(4)),
            "arr/0.1": b"\x01" * 4,
            "arr/1.0": b"\x02" * 4,
            "arr/1.1": b"",  # an empty file
            "grüße/.zgroup": group,
            "grüße/sub/.zgroup": group,
            "grüße/sub/vals/.zarray": _array_v2([2], [1]),
            "grüße/sub/vals/0": b"\x07",
            "grüße/sub/vals/1": b"\x08",
        },
    )


def zarr_v3(root: Path) -> None:
    array = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [4],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
    group = {"zarr_format": 3, "node_type": "group", "attributes": {"naïve": True}}
    _write(
        root,
        {
            "zarr.json": json.dumps(group).encode(),
            "x/zarr.json": json.dumps(array).encode(),
            "x/c/0": b"\x01\x02",
            "x/c/1": b"",  # an empty file
            "déjà/zarr.json": json.dumps({**group, "attributes": {}}).encode(),
            "déjà/y/zarr.json": json.dumps(array).encode(),
            "déjà/y/c/0": b"\x05\x06",
        },
    )


def modify(root: Path, *, changed: str, added: str, removed: str) -> None:
    """Change one file, add one, remove one (what a re-upload must carry over)."""
    (root / changed).write_bytes(b"changed " + (root / changed).read_bytes())
    (root / added).parent.mkdir(parents=True, exist_ok=True)
    (root / added).write_bytes(b"\x09\x09")
    (root / removed).unlink()
