"""Each OME group checked against the NGFF spec by ome-zarr-models (0.4 and 0.5).

Why ome-zarr-models: it is the OME community's pydantic model of the spec itself (0.4 and
0.5, images, labels, plates, wells, bioformats2raw), it validates metadata without reading a
chunk, and its errors name where in the document each problem is. ``ome-zarr`` reads and
writes images (dask, scikit-image) and delegates validation to ome-zarr-models; ``ngff-zarr``
converts images and validates through JSON schemas with less precise locations.

The groups are opened from their metadata documents alone, in a memory store: an image group
with its level arrays' metadata (the spec's rules about levels: dimensions, axes), a labels
group, plate or well by its attributes (the images they list are checked as images).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
import zarr
import zarr.storage
from ome_zarr_models.v04 import bioformats2raw as bf2raw_v04
from ome_zarr_models.v04 import hcs as hcs_v04
from ome_zarr_models.v04 import image as image_v04
from ome_zarr_models.v04 import image_label as image_label_v04
from ome_zarr_models.v04 import labels as labels_v04
from ome_zarr_models.v04 import well as well_v04
from ome_zarr_models.v05 import bioformats2raw as bf2raw_v05
from ome_zarr_models.v05 import hcs as hcs_v05
from ome_zarr_models.v05 import image as image_v05
from ome_zarr_models.v05 import image_label as image_label_v05
from ome_zarr_models.v05 import labels as labels_v05
from ome_zarr_models.v05 import well as well_v05
from zarr.core.buffer import cpu

from dandizarr.ome.documents import Documents, Node, join, node
from dandizarr.ome.dtypes import MAX_LISTED, MAX_NAME_CHARS
from dandizarr.ome.model import Image, Problem, Summary, Validation
from dandizarr.sharding.metadata_values import MetadataError, check_nesting

# The versions ome-zarr-models reads, and the Zarr format each is stored in.
VERSIONS: dict[str, Literal[2, 3]] = {"0.4": 2, "0.5": 3}

_GROUPS: dict[tuple[str, str], Any] = {
    ("0.4", "image"): image_v04.Image,
    ("0.4", "image-label"): image_label_v04.ImageLabel,
    ("0.5", "image"): image_v05.Image,
    ("0.5", "image-label"): image_label_v05.ImageLabel,
}
_ATTRIBUTES: dict[tuple[str, str], Any] = {
    ("0.4", "labels"): labels_v04.LabelsAttrs,
    ("0.4", "plate"): hcs_v04.HCSAttrs,
    ("0.4", "well"): well_v04.WellAttrs,
    ("0.4", "bioformats2raw"): bf2raw_v04.BioFormats2RawAttrs,
    ("0.5", "labels"): labels_v05.LabelsAttrs,
    ("0.5", "plate"): hcs_v05.HCSAttrs,
    ("0.5", "well"): well_v05.WellAttrs,
    ("0.5", "bioformats2raw"): bf2raw_v05.BioFormats2RawAttrs,
}


def _location(loc: tuple[int | str, ...]) -> str:
    return "/".join(str(part) for part in loc)


def _errors(error: Exception, where: Node) -> tuple[Problem, ...]:
    """The verdict's errors: the first MAX_LISTED, and how many more (a list of 50,000 bad
    channels is 50,000 errors)."""
    prefix = "ome/" if where.zarr_format == 3 else ""
    if isinstance(error, pydantic.ValidationError):
        found = error.errors(include_url=False)
        problems = [
            Problem(
                f"{where.metadata_file}#{prefix}{_location(e['loc'])}".rstrip("#/")[
                    :MAX_NAME_CHARS
                ],
                e["msg"][:MAX_NAME_CHARS],
            )
            for e in found[:MAX_LISTED]
        ]
        if len(found) > MAX_LISTED:
            problems.append(Problem(where.metadata_file, f"… {len(found) - MAX_LISTED} more"))
        return tuple(problems)
    return (Problem(where.metadata_file, (str(error) or type(error).__name__)[:MAX_NAME_CHARS]),)


def _version(group: Node, declared: str | None) -> str:
    if declared:
        return declared
    return "0.5" if group.zarr_format == 3 else "0.4"


@dataclass
class Budget:
    """How many bytes of metadata documents a description may still validate (None: no
    limit). Validation costs about half a CPU-second per megabyte (pydantic over every
    channel and level), so a reader answering strangers validates a bounded amount and says
    which groups it did not check."""

    left: int | None = None

    def spend(self, size: int) -> bool:
        if self.left is None:
            return True
        if size > self.left:
            self.left = 0
            return False
        self.left -= size
        return True


def _encoded(doc: Any) -> bytes:
    """A document as the validator's store holds it; MetadataError when it is none JSON
    writes (nested past MAX_JSON_DEPTH, checked first: the writer recurses)."""
    check_nesting(doc, "a document")
    try:
        return json.dumps(doc).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError) as error:  # a key no JSON has; an integer past its digits
        raise MetadataError(f"a document JSON cannot hold ({type(error).__name__})") from None


def _group_contents(docs: Documents, group: str, paths: list[str]) -> dict[str, bytes]:
    """The documents of ``group`` and of ``paths`` under it, by key within the group."""
    wanted = {group, *paths}
    contents: dict[str, bytes] = {}
    for name, doc in docs.items():
        directory = name.rpartition("/")[0]
        if directory in wanted:
            key = name[len(group) + 1 :] if group else name
            contents[key] = _encoded(doc)
    return contents


def _memory_group(contents: dict[str, bytes], zarr_format: Literal[2, 3]) -> zarr.Group:
    """A read-only group holding ``contents``."""
    store = zarr.storage.MemoryStore(
        {key: cpu.Buffer.from_bytes(raw) for key, raw in contents.items()}
    )
    return zarr.open_group(store.with_read_only(True), mode="r", zarr_format=zarr_format)


def _unchecked(path: str, model: Any, group: Node, size: int) -> Validation:
    problem = Problem(
        group.metadata_file,
        f"not checked: its {size:,} bytes of metadata are past what one description validates",
    )
    return Validation(path, _qualified(model), False, (problem,))


def validate_image(docs: Documents, image: Image, budget: Budget | None = None) -> Validation:
    group = node(docs, image.path)
    if group is None:
        return Validation(image.path, "", False, (Problem(image.path, "no group metadata"),))
    version = _version(group, image.version)
    kind = "image-label" if image.is_label else "image"
    model = _GROUPS.get((version, kind))
    if model is None:
        return _unsupported(group, version)
    if VERSIONS[version] != group.zarr_format:
        problem = f"NGFF {version} is stored in Zarr v{VERSIONS[version]}, not v{group.zarr_format}"
        return Validation(
            image.path, model.__name__, False, (Problem(group.metadata_file, problem),)
        )
    try:
        contents = _group_contents(docs, image.path, [level.path for level in image.levels])
    except MetadataError as error:
        return Validation(image.path, _qualified(model), False, _errors(error, group))
    size = sum(map(len, contents.values()))
    if budget is not None and not budget.spend(size):
        return _unchecked(image.path, model, group, size)
    try:
        model.from_zarr(_memory_group(contents, VERSIONS[version]))
    except Exception as error:  # an uploader's document: whatever the parser raises
        return Validation(image.path, _qualified(model), False, _errors(error, group))
    return Validation(image.path, _qualified(model), True, ())


def validate_attributes(
    docs: Documents, path: str, kind: str, declared: str | None, budget: Budget | None = None
) -> Validation:
    group = node(docs, path)
    if group is None:
        return Validation(path, "", False, (Problem(path, "no group metadata"),))
    version = _version(group, declared)
    model = _ATTRIBUTES.get((version, kind))
    if model is None:
        return _unsupported(group, version)
    ome: Mapping[str, Any] = group.ome
    try:
        size = len(_encoded(ome))
    except MetadataError as error:
        return Validation(path, _qualified(model), False, _errors(error, group))
    if budget is not None and not budget.spend(size):
        return _unchecked(path, model, group, size)
    try:
        model.model_validate(dict(ome))
    except Exception as error:
        return Validation(path, _qualified(model), False, _errors(error, group))
    return Validation(path, _qualified(model), True, ())


def _qualified(model: Any) -> str:
    return f"{model.__module__.removeprefix('ome_zarr_models.')}.{model.__name__}"


def _unsupported(group: Node, version: str) -> Validation:
    problem = Problem(
        group.metadata_file,
        f"NGFF version {version!r}: the validator reads {' and '.join(VERSIONS)} only",
    )
    return Validation(group.path, "", False, (problem,))


def validate(docs: Documents, summary: Summary, max_bytes: int | None = None) -> Summary:
    """``summary`` with the verdict on each of its images and collections, validating at most
    ``max_bytes`` of documents (None: all); an image group whose ``multiscales`` list several
    images is validated once (the model reads them all)."""
    budget = Budget(max_bytes)
    verdicts: list[Validation] = []
    by_group: dict[tuple[str, bool], Validation] = {}
    for image in summary.images:
        key = (image.path, image.is_label)
        if key not in by_group:
            by_group[key] = validate_image(docs, image, budget)
        verdicts.append(by_group[key])
    seen = {image.path for image in summary.images}
    for collection in summary.collections:
        if collection.path not in seen:
            verdicts.append(
                validate_attributes(
                    docs, collection.path, collection.kind, collection.version, budget
                )
            )
    return Summary(summary.images, summary.collections, tuple(verdicts), summary.level_paths)


__all__ = ["VERSIONS", "Budget", "join", "validate", "validate_attributes", "validate_image"]
