"""OME-Zarr images written by the real libraries, as {archive path: bytes}.

- ``ome_zarr_v2``: NGFF 0.4 (Zarr v2) by the ``ome-zarr`` package: a c/z/y/x pyramid with
  units, voxel size, two channels (``omero``) and a label image.
- ``ngff_v3_sharded``: NGFF 0.5 (Zarr v3) by zarr-python 3, its levels ``sharding_indexed``,
  metadata hand-written per the spec (ome-zarr 0.18 writes a 0.5 labels group without the
  ``version`` the spec requires, so the v3 fixture writes its own).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from ome_zarr.format import FormatV04
from ome_zarr.writer import write_image, write_labels

CHANNELS = [
    {"label": "DAPI", "color": "0000FF", "window": {"start": 0, "end": 1500, "min": 0, "max": 4000}, "active": True},  # noqa: E501
    {"label": "GFP", "color": "00FF00", "window": {"start": 200, "end": 2500, "min": 0, "max": 4000}, "active": True},  # noqa: E501
]  # fmt: skip


def volume(shape: tuple[int, ...]) -> np.ndarray:
    """c/z/y/x uint16: per channel a bright disc on a ramp, each z plane a little brighter."""
    c, z, h, w = shape
    y, x = np.mgrid[0:h, 0:w]
    out = np.empty(shape, np.uint16)
    for ci in range(c):
        cy, cx = h * (0.35 + 0.3 * ci), w * (0.4 + 0.2 * ci)
        disc = ((y - cy) ** 2 + (x - cx) ** 2) < (min(h, w) / 5) ** 2
        for zi in range(z):
            out[ci, zi] = (x * 4 + y * 2 + 2000 * disc + 50 * zi).astype(np.uint16)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


V2_SHAPE = (2, 8, 96, 128)


def ome_zarr_v2(tmp_path: Path) -> dict[str, bytes]:
    """An NGFF 0.4 image written by ome-zarr: three levels, micrometres, two channels."""
    root = tmp_path / f"v2-{uuid.uuid4().hex[:6]}.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    fmt = FormatV04()
    data = volume(V2_SHAPE)
    write_image(
        data,
        group,
        scale_factors=(2, 4),
        fmt=fmt,
        axes="czyx",
        scale={"z": 2.0, "y": 0.5, "x": 0.5},
        axes_units={"z": "micrometer", "y": "micrometer", "x": "micrometer"},
        storage_options={"chunks": (1, 4, 32, 32)},
        name="cells",
    )
    group.attrs["omero"] = {"channels": CHANNELS, "rdefs": {"model": "color"}}
    write_labels((data[0] > 1900).astype("uint8"), group, name="nuclei", axes="zyx", fmt=fmt)
    return _files(root)


V3_SHAPE = (2, 6, 160, 120)


def _axes() -> list[dict[str, Any]]:
    return [
        {"name": "c", "type": "channel"},
        {"name": "z", "type": "space", "unit": "micrometer"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"},
    ]


def ngff_v3_sharded(tmp_path: Path) -> dict[str, bytes]:
    """An NGFF 0.5 image (Zarr v3, sharding_indexed levels) under ``image/`` with zarr-python."""
    root = tmp_path / f"v3-{uuid.uuid4().hex[:6]}.zarr"
    store = zarr.storage.LocalStore(root)
    data = volume(V3_SHAPE)
    levels = [data, data[:, :, ::2, ::2]]
    datasets = [
        {
            "path": str(i),
            "coordinateTransformations": [
                {"type": "scale", "scale": [1.0, 1.5, 0.25 * 2**i, 0.25 * 2**i]}
            ],
        }
        for i in range(len(levels))
    ]
    ome = {
        "version": "0.5",
        "multiscales": [{"name": "tissue", "axes": _axes(), "datasets": datasets}],
        "omero": {"channels": CHANNELS},
    }
    zarr.create_group(store, zarr_format=3, attributes={"note": "a folder"})
    zarr.create_group(store, path="image", zarr_format=3, attributes={"ome": ome})
    for i, level in enumerate(levels):
        array = zarr.create_array(
            store,
            name=f"image/{i}",
            shape=level.shape,
            dtype="uint16",
            chunks=(1, 1, 32, 32),
            shards=(1, 2, 64, 64),
            dimension_names=["c", "z", "y", "x"],
            compressors=zarr.codecs.ZstdCodec(level=1),
        )
        array[...] = level
    return _files(root)


def plain_3d(tmp_path: Path) -> dict[str, bytes]:
    """A plain 3-D Zarr v3 array (no OME metadata) at ``volume/``."""
    root = tmp_path / f"plain-{uuid.uuid4().hex[:6]}.zarr"
    store = zarr.storage.LocalStore(root)
    z, h, w = 6, 80, 100
    y, x = np.mgrid[0:h, 0:w]
    data = np.stack(
        [(x * 2 + y + 400 * ((x - w / 2) ** 2 + (y - h / 2) ** 2 < 300) + 10 * k) for k in range(z)]
    )
    array = zarr.create_array(
        store, name="volume", shape=data.shape, chunks=(2, 32, 32), dtype="float32"
    )
    array[...] = data.astype("float32")
    return _files(root)
