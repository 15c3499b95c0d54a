"""What an OME-Zarr is, as ``dandizarr.ome`` describes it: images with their levels, axes,
channels and labels; plates, wells and label collections; problems found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Axis:
    name: str
    type: str | None
    unit: str | None


@dataclass(frozen=True)
class Level:
    path: str  # the level array's path in the archive
    shape: tuple[int, ...]
    chunks: tuple[int, ...]  # a sharded array's shards; its inner chunks in inner_chunks
    inner_chunks: tuple[int, ...] | None
    dtype: str
    scale: tuple[float, ...]
    translation: tuple[float, ...]


@dataclass(frozen=True)
class Channel:
    label: str
    color: str  # six hex digits, RRGGBB
    window: tuple[float, float] | None  # display window (start, end)
    active: bool


@dataclass(frozen=True)
class Problem:
    path: str  # the file, and where in it after "#": "img/.zattrs#multiscales/0/axes"
    message: str


@dataclass(frozen=True)
class Image:
    path: str  # the image group's path in the archive ("" for the root)
    zarr_format: int
    version: str | None  # the NGFF version the metadata declares
    name: str | None
    axes: tuple[Axis, ...]
    levels: tuple[Level, ...]  # largest first, as the metadata lists them
    channels: tuple[Channel, ...]
    labels: tuple[str, ...]  # paths of the label images of this image
    is_label: bool  # an image-label (segmentation)
    problems: tuple[Problem, ...] = ()  # what stopped part of the description

    @property
    def voxel_size(self) -> tuple[tuple[str, float, str | None], ...]:
        """(axis, size, unit) of each space axis at the first level."""
        if not self.levels or len(self.levels[0].scale) != len(self.axes):
            return ()
        return tuple(
            (axis.name, size, axis.unit)
            for axis, size in zip(self.axes, self.levels[0].scale, strict=True)
            if axis.type == "space"
        )

    def axis_index(self, kind: str) -> int | None:
        """The index of the first axis of type ``kind`` ("channel", "time", "space")."""
        return next((i for i, axis in enumerate(self.axes) if axis.type == kind), None)


@dataclass(frozen=True)
class Collection:
    """A group that holds images rather than being one: a plate, a well, a labels group."""

    path: str
    kind: str  # "plate", "well", "labels", "bioformats2raw"
    zarr_format: int
    version: str | None
    members: tuple[str, ...]  # paths of what it lists (wells, fields, label images, series)
    name: str | None = None


@dataclass(frozen=True)
class Validation:
    """The spec's verdict on one OME group (ome-zarr-models)."""

    path: str
    model: str  # the ome-zarr-models class that read it ("" when none applied)
    valid: bool
    errors: tuple[Problem, ...]


@dataclass(frozen=True)
class Summary:
    images: tuple[Image, ...] = ()
    collections: tuple[Collection, ...] = ()
    validations: tuple[Validation, ...] = ()
    # Arrays that are levels of an image (their own description is the image's).
    level_paths: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_ome(self) -> bool:
        return bool(self.images or self.collections)

    def validation_of(self, path: str) -> Validation | None:
        return next((v for v in self.validations if v.path == path), None)

    def as_json(self) -> dict[str, Any]:
        """The summary as plain JSON (the API's answer)."""
        images = []
        for image in self.images:
            data = asdict(image)
            data["voxel_size"] = [
                {"axis": axis, "size": size, "unit": unit} for axis, size, unit in image.voxel_size
            ]
            images.append(data)
        return {
            "is_ome": self.is_ome,
            "images": images,
            "collections": [asdict(c) for c in self.collections],
            "validation": [asdict(v) for v in self.validations],
        }
