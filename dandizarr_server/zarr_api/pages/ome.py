"""An archive's OME-Zarr images, plates, wells and labels (``dandizarr.ome``) from its scan
(pages.archive_scan: metadata documents only), with the spec's verdict on each, and the
pictures of its images; each computed once per tree version of the archive."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings

from dandizarr.ome import Image, Level, Problem, Summary, Validation, describe
from dandizarr.ome import neuroglancer_state as ng
from dandizarr.ome.preview_choice import choose
from dandizarr.ome.validation import validate
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.pages import preview
from dandizarr_server.zarr_api.pages.archive_scan import (
    MAX_VALIDATED_BYTES,
    ArchiveScan,
    scan_archive,
)
from dandizarr_server.zarr_api.pages.arrays import (
    MAX_ARRAYS,
    MAX_PREVIEW_CHUNKS,
    MAX_PREVIEW_DECODED_BYTES,
    ArrayInfo,
    plane_read_cost,
)
from dandizarr_server.zarr_api.pages.plane_reads import read_selection
from dandizarr_server.zarr_api.pages.reader import ArchiveFiles
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree_cached

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchiveOverview:
    """What the scan found, kept without its documents (they may be megabytes), and what the
    pages and the API say of it (pure: the fuzzer calls these without an archive)."""

    arrays: list[ArrayInfo]
    summary: Summary
    truncated: bool

    def plain_arrays(self) -> list[ArrayInfo]:
        """The arrays that are no level of an OME image, at most MAX_ARRAYS."""
        levels = self.summary.level_paths
        return [a for a in self.arrays if a.path not in levels][:MAX_ARRAYS]

    def level_arrays(self) -> dict[str, ArrayInfo]:
        return {a.path: a for a in self.arrays}

    def preview_problem(self, image: Image) -> str | None:
        """Why ``image`` has no picture (None: it has one)."""
        arrays = self.level_arrays()
        if not image.levels:
            return "the image has no readable level"
        if choose(image, preview.PREVIEW_SIDE, _affordable(arrays)) is None:
            first = arrays.get(image.levels[-1].path)
            reason = first.preview_problem if first is not None else None
            return reason or "no level's plane fits within what a preview reads"
        return None

    def viewer_links(self, base_url: str) -> tuple[dict[str, str], dict[str, str]]:
        """ "Open in Neuroglancer" links of the images and plain arrays, by path, for the
        archive (or version) whose ``/zarr/`` base URL is ``base_url``."""
        images = {
            image.path: ng.viewer_link(ng.image_state(image, base_url))
            for image in self.summary.images
            if image.levels
        }
        arrays = {
            array.path: ng.viewer_link(
                ng.array_state(base_url, array.path, array.zarr_format, array.shape)
            )
            for array in self.plain_arrays()
            if array.zarr_format in (2, 3) and array.shape and math.prod(array.shape) > 0
        }
        return images, arrays

    def as_json(self, base_url: str) -> dict[str, Any]:
        """The API's answer: the summary, each image's viewer link, whether the scan stopped."""
        images, _ = self.viewer_links(base_url)
        data = self.summary.as_json()
        for image in data["images"]:
            image["neuroglancer_url"] = images.get(image["path"])
        data["truncated"] = self.truncated
        return data


def overview(scan: ArchiveScan) -> ArchiveOverview:
    """What a scan's documents describe: its arrays (``pages.arrays.describe_document``, which
    never raises), and the OME description and its validation, whose readers are total too.
    A bug in them is no 500: the boundary's backstop describes no OME image, logged, and the
    overview is cached like any other."""
    try:
        summary = validate(scan.documents, describe(scan.documents), MAX_VALIDATED_BYTES)
    except Exception as error:  # the backstop (the OME readers return a Problem, not raise)
        logger.warning("the archive's OME metadata cannot be described", exc_info=True)
        problem = Problem("", f"the OME metadata cannot be described ({type(error).__name__})")
        summary = Summary(validations=(Validation("", "", False, (problem,)),))
    return ArchiveOverview(scan.arrays, summary, scan.truncated)


def archive_scan(archive: ZarrArchive) -> ArchiveOverview:
    """The archive's arrays and OME description with its validation (once per tree version:
    a description that says the metadata cannot be read is cached as much as any other)."""

    def compute() -> ArchiveOverview:
        return overview(
            scan_archive(archive_tree_cached(archive), ArchiveFiles(archive, get_store()))
        )

    return preview.cached(archive, "overview", "", compute)


def archive_ome(archive: ZarrArchive) -> Summary:
    """The archive's OME description and validation."""
    return archive_scan(archive).summary


def plain_arrays(archive: ZarrArchive) -> list[ArrayInfo]:
    """The arrays that are no level of an OME image, at most MAX_ARRAYS."""
    return archive_scan(archive).plain_arrays()


def preview_problem(archive: ZarrArchive, image: Image) -> str | None:
    """Why ``image`` has no picture (None: it has one)."""
    return archive_scan(archive).preview_problem(image)


def _affordable(arrays: dict[str, ArrayInfo]) -> Any:
    def affordable(level: Level, planes: int) -> bool:
        info = arrays.get(level.path)
        if info is None or info.metadata is None or len(info.metadata.shape) < 2:
            return False
        # Shard indexes count as reads (pages.arrays.plane_read_cost).
        chunks, reads, read_bytes = plane_read_cost(info.metadata)
        return (
            max(chunks, reads) * planes <= MAX_PREVIEW_CHUNKS
            and read_bytes * planes <= MAX_PREVIEW_DECODED_BYTES
        )

    return affordable


def draw_image(archive: ZarrArchive, image: Image) -> bytes | str:
    """The picture of ``image`` (preview_choice's level, plane and channels), or why there
    is none; drawn within the preview's budget (chunks, decoded bytes, time). A refusal
    while reading is a ValueError (``preview.drawn`` makes it the outcome)."""
    arrays = archive_scan(archive).level_arrays()
    choice = choose(image, preview.PREVIEW_SIDE, _affordable(arrays))
    if choice is None:
        return preview_problem(archive, image) or "no preview"
    info = arrays[choice.level.path]
    rank = len(choice.level.shape)
    if any(s is not None for s in choice.selections[0][-2:]):
        return "the picture's axes are not the last two"
    files = ArchiveFiles(
        archive, get_store(), deadline=time.monotonic() + settings.DANDIZARR_PREVIEW_SECONDS
    )
    planes = []
    for selection in choice.selections:
        index = tuple(slice(None) if s is None else s for s in selection)
        planes.append(
            np.asarray(read_selection(files, info, index)).reshape(
                choice.level.shape[rank - 2], choice.level.shape[rank - 1]
            )
        )
    return preview.render_channels_png(planes, choice.channels)


def image_for(archive: ZarrArchive, path: str) -> Image | None:
    return next((i for i in archive_ome(archive).images if i.path == path), None)


def viewer_links(archive: ZarrArchive, base_url: str) -> tuple[dict[str, str], dict[str, str]]:
    """ "Open in Neuroglancer" links of the archive's images and plain arrays, by path."""
    return archive_scan(archive).viewer_links(base_url)


def ome_json(archive: ZarrArchive, base_url: str) -> dict[str, Any]:
    """The API's answer (``ArchiveOverview.as_json``)."""
    return archive_scan(archive).as_json(base_url)
