"""Sharded archives for the client's live tests: local trees written by zarr-python (an
OME-Zarr-like pyramid and other arrays), uploaded with ``upload --pack``, and read back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import LocalStore

from dandizarr.client.upload import Uploader
from tests.support.live_client import Service

MakeUploader = Callable[..., Uploader]
"""The ``uploader`` fixture: ``uploader(root, **options)`` makes an Uploader."""

# OME-Zarr-like levels: (shape, chunks) of a (t, c, y, x) uint16 image.
LEVELS = [
    ((2, 2, 48, 40), (1, 1, 16, 16)),
    ((2, 2, 24, 20), (1, 2, 8, 8)),
    ((2, 2, 12, 10), (2, 1, 12, 5)),
]


def local_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path, sorted: path -> bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# A v2 array of 60 raw chunks of 20 bytes (write_v2).
V2_DATA = (np.arange(600, dtype="uint16") * 7) % 1000


def write_v2(root: Path) -> dict[str, bytes]:
    """A v2 group: 60 raw chunks of 20 bytes of one array, plus metadata."""
    group = zarr.open_group(LocalStore(root), mode="w", zarr_format=2)
    group.attrs["title"] = "packed v2"
    array = group.create_array("x", shape=(600,), chunks=(10,), dtype="uint16", compressors=None)
    array[:] = V2_DATA
    return local_files(root)


def tree_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path: path -> bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def write_archive(root: Path) -> dict[str, bytes]:
    """The pyramid, a 2-D v2 label image of odd chunks, and a 1-D v3 array (zstd)."""
    group = zarr.open_group(LocalStore(root), mode="w", zarr_format=2)
    group.attrs["multiscales"] = [{"version": "0.4", "datasets": [{"path": "0"}, {"path": "1"}]}]
    rng = np.random.default_rng(7)
    for level, (shape, chunks) in enumerate(LEVELS):
        array = group.create_array(
            str(level),
            shape=shape,
            chunks=chunks,
            dtype="uint16",
            compressors=numcodecs.Zstd(level=3),
            chunk_key_encoding={"name": "v2", "separator": "/"},
        )
        array[:] = rng.integers(0, 4000, size=shape, dtype="uint16") // 16
    labels = group.create_array(
        "labels", shape=(20, 21), chunks=(5, 7), dtype="uint8", compressors=None
    )
    labels[:] = np.arange(420, dtype="uint8").reshape(20, 21)
    v3 = zarr.create_array(
        LocalStore(root / "table"),
        shape=(1000,),
        chunks=(64,),
        dtype="float32",
        compressors=ZstdCodec(level=1),
    )
    v3[:] = np.linspace(0, 1, 1000, dtype="float32")
    return local_files(root)


def upload_packed(service: Service, root: Path) -> dict[str, Any]:
    """``dandizarr upload --pack`` of ``root`` with 2 KiB shards; returns the CLI's JSON result."""
    status, result = service.cli_json(
        "upload", str(root), "--dandiset", service.dandiset, "--pack", "--shard-size", "2K"
    )
    assert status == 0 and result["ok"], result
    assert result["shards"] > 3 and result["packed_files"] > 80, result
    return result
