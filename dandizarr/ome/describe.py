"""OME-NGFF images, plates, wells and labels from a hierarchy's metadata documents.

NGFF 0.4 (Zarr v2: ``multiscales`` in ``.zattrs``) and 0.5 (Zarr v3: under
``attributes.ome`` in ``zarr.json``), at any depth. Every value is checked for its type before
use: a document is an uploader's, so whatever is malformed becomes a ``Problem`` of the
description (and ``validation`` says what the spec says), never an exception.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from dandizarr.ome.documents import Documents, Node, join, nodes
from dandizarr.ome.dtypes import dtype_name
from dandizarr.ome.model import Axis, Channel, Collection, Image, Level, Problem, Summary
from dandizarr.sharding.array_documents import ARRAY_V2, ARRAY_V3, ArrayDocument, MetadataError
from dandizarr.sharding.array_metadata import MAX_RANK

# An uploader's document may list any number of images, levels, channels, labels and members:
# the description keeps the first ones (each image is validated and drawn, each level and
# channel read, each channel becomes a viewer layer), so its work is bounded whatever a
# megabyte of JSON declares. Axes: at most an array's rank (dandizarr.sharding's MAX_RANK).
MAX_IMAGES = 64
MAX_LEVELS = 32
MAX_CHANNELS = 64
MAX_LABELS = 64
MAX_MEMBERS = 4096
_HEX_COLOUR = re.compile(r"[0-9A-Fa-f]{6}")
_DEFAULT_COLOURS = ("FFFFFF", "00FF00", "FF00FF", "00FFFF", "FF0000", "0000FF", "FFFF00")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, list) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in value
    ):
        return tuple(value)
    return ()


def _numbers(value: Any) -> tuple[float, ...] | None:
    if not isinstance(value, list):
        return None
    numbers = [_number(v) for v in value]
    return None if None in numbers else tuple(n for n in numbers if n is not None)


def array_shape(node: Node) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
    """(shape, chunks, inner chunks of a sharded v3 array) from an array's metadata, as the
    one reader of array documents has them; empty for a malformed document."""
    name = ARRAY_V2 if node.zarr_format == 2 else ARRAY_V3
    try:
        array = ArrayDocument.from_json(name, node.array or {})
    except MetadataError:
        return (), (), None
    if array is None:
        return (), (), None
    return array.shape, array.chunks, array.inner_chunks


def array_dtype(node: Node) -> str:
    doc = node.array or {}
    return dtype_name(node.zarr_format, doc.get("dtype" if node.zarr_format == 2 else "data_type"))


def _version(node: Node, multiscale: Mapping[str, Any] | None = None) -> str | None:
    declared = node.ome.get("version") if node.zarr_format == 3 else None
    if declared is None and multiscale is not None:
        declared = multiscale.get("version")
    return _text(declared)


def _axes(raw: Any, where: str, problems: list[Problem]) -> tuple[Axis, ...]:
    if not isinstance(raw, list):
        problems.append(Problem(where, "axes are missing or not a list"))
        return ()
    if len(raw) > MAX_RANK:
        problems.append(Problem(where, f"{len(raw)} axes, more than an array has ({MAX_RANK})"))
        return ()
    axes = []
    for i, axis in enumerate(raw):
        if isinstance(axis, str):  # NGFF 0.3 named axes by strings
            axes.append(Axis(axis, None, None))
        elif isinstance(axis, Mapping) and isinstance(axis.get("name"), str):
            axes.append(Axis(axis["name"], _text(axis.get("type")), _text(axis.get("unit"))))
        else:
            problems.append(Problem(f"{where}/{i}", "an axis without a name"))
            axes.append(Axis(f"d{i}", None, None))
    return tuple(axes)


def _transforms(raw: Any, rank: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(scale, translation) of a list of NGFF coordinate transformations."""
    scale, translation = [1.0] * rank, [0.0] * rank
    for transform in raw if isinstance(raw, list) else []:
        kind = transform.get("type") if isinstance(transform, Mapping) else None
        if not isinstance(kind, str):
            continue
        values = _numbers(transform.get(kind))
        if values is None or len(values) != rank:
            continue
        if kind == "scale":
            scale = [s * v for s, v in zip(scale, values, strict=True)]
            translation = [t * v for t, v in zip(translation, values, strict=True)]
        elif kind == "translation":
            translation = [t + v for t, v in zip(translation, values, strict=True)]
    return tuple(scale), tuple(translation)


def _channels(omero: Any, count: int | None) -> tuple[Channel, ...]:
    raw = omero.get("channels") if isinstance(omero, Mapping) else None
    channels = []
    for i, channel in enumerate(raw[:MAX_CHANNELS] if isinstance(raw, list) else []):
        if not isinstance(channel, Mapping):
            continue
        colour = _text(channel.get("color")) or ""
        window = channel.get("window")
        start = _number(window.get("start")) if isinstance(window, Mapping) else None
        end = _number(window.get("end")) if isinstance(window, Mapping) else None
        channels.append(
            Channel(
                label=_text(channel.get("label")) or f"channel {i}",
                color=colour.upper()
                if _HEX_COLOUR.fullmatch(colour)
                else _DEFAULT_COLOURS[i % len(_DEFAULT_COLOURS)],
                window=(start, end) if start is not None and end is not None else None,
                active=channel.get("active") is not False,
            )
        )
    return tuple(channels[: min(count, MAX_CHANNELS) if count is not None else MAX_CHANNELS])


def _image(
    node: Node, multiscale: Mapping[str, Any], index: int, docs_nodes: dict[str, Node]
) -> Image:
    where = f"{node.metadata_file}#{'ome/' if node.zarr_format == 3 else ''}multiscales/{index}"
    problems: list[Problem] = []
    axes = _axes(multiscale.get("axes"), f"{where}/axes", problems)
    rank = len(axes)
    global_scale, global_translation = _transforms(
        multiscale.get("coordinateTransformations"), rank
    )
    levels = []
    datasets = multiscale.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        problems.append(Problem(f"{where}/datasets", "no datasets (levels)"))
        datasets = []
    if len(datasets) > MAX_LEVELS:
        problems.append(
            Problem(f"{where}/datasets", f"{len(datasets)} levels: the first {MAX_LEVELS} read")
        )
    for i, dataset in enumerate(datasets[:MAX_LEVELS]):
        relative = _text(dataset.get("path")) if isinstance(dataset, Mapping) else None
        if relative is None:
            problems.append(Problem(f"{where}/datasets/{i}", "a dataset without a path"))
            continue
        path = posixpath.normpath(join(node.path, relative))
        level_node = docs_nodes.get(path)
        if level_node is None or not level_node.is_array:
            problems.append(Problem(f"{where}/datasets/{i}", f"no array at {relative!r}"))
            continue
        shape, chunks, inner = array_shape(level_node)
        scale, translation = _transforms(dataset.get("coordinateTransformations"), rank)
        scale = tuple(s * g for s, g in zip(scale, global_scale, strict=True))
        translation = tuple(
            t * g + o for t, g, o in zip(translation, global_scale, global_translation, strict=True)
        )
        if rank and len(shape) != rank:
            problems.append(
                Problem(
                    f"{where}/datasets/{i}",
                    f"the array at {relative!r} has {len(shape)} dimensions, the axes {rank}",
                )
            )
        levels.append(
            Level(path, shape, chunks, inner, array_dtype(level_node), scale, translation)
        )
    channel_axis = next((i for i, a in enumerate(axes) if a.type == "channel"), None)
    count = (
        levels[0].shape[channel_axis]
        if levels and channel_axis is not None and len(levels[0].shape) > channel_axis
        else None
    )
    labels_node = docs_nodes.get(join(node.path, "labels"))
    label_names = labels_node.ome.get("labels") if labels_node is not None else None
    labels = tuple(
        join(join(node.path, "labels"), name)
        for name in (label_names[:MAX_LABELS] if isinstance(label_names, list) else [])
        if isinstance(name, str)
    )
    return Image(
        path=node.path,
        zarr_format=node.zarr_format,
        version=_version(node, multiscale),
        name=_text(multiscale.get("name")),
        axes=axes,
        levels=tuple(levels),
        channels=_channels(node.ome.get("omero"), count),
        labels=labels,
        is_label="image-label" in node.ome,
        problems=tuple(problems),
    )


def _members(node: Node, kind: str) -> tuple[str, ...]:
    ome = node.ome
    if kind == "plate":
        plate = ome.get("plate")
        wells = plate.get("wells") if isinstance(plate, Mapping) else None
        found = [
            w.get("path")
            for w in (wells if isinstance(wells, list) else [])[:MAX_MEMBERS]
            if isinstance(w, Mapping)
        ]
    elif kind == "well":
        well = ome.get("well")
        images = well.get("images") if isinstance(well, Mapping) else None
        found = [
            i.get("path")
            for i in (images if isinstance(images, list) else [])[:MAX_MEMBERS]
            if isinstance(i, Mapping)
        ]
    elif kind == "labels":
        labels = ome.get("labels")
        found = labels if isinstance(labels, list) else []
    else:
        found = []
    return tuple(join(node.path, p) for p in found[:MAX_MEMBERS] if isinstance(p, str))


def describe(docs: Documents) -> Summary:
    """Every OME image and collection the documents hold, and which arrays are levels."""
    found = nodes(docs)
    images: list[Image] = []
    collections: list[Collection] = []
    for path, node in found.items():
        if node.is_array:
            continue
        ome = node.ome
        multiscales = ome.get("multiscales")
        if isinstance(multiscales, list):
            for i, multiscale in enumerate(multiscales):
                if isinstance(multiscale, Mapping) and len(images) < MAX_IMAGES:
                    images.append(_image(node, multiscale, i, found))
        for kind in ("plate", "well", "labels"):
            if kind in ome and not isinstance(multiscales, list):
                plate_or_well = ome.get(kind)
                name = plate_or_well.get("name") if isinstance(plate_or_well, Mapping) else None
                collections.append(
                    Collection(
                        path,
                        kind,
                        node.zarr_format,
                        _version(node)
                        or _text(
                            plate_or_well.get("version")
                            if isinstance(plate_or_well, Mapping)
                            else None
                        ),
                        _members(node, kind),
                        _text(name),
                    )
                )
        if "bioformats2raw.layout" in ome:
            collections.append(
                Collection(path, "bioformats2raw", node.zarr_format, _version(node), ())
            )
    level_paths = frozenset(level.path for image in images for level in image.levels)
    return Summary(tuple(images), tuple(collections), (), level_paths)
