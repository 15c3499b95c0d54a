"""What the pages show, read through the API's selectors: dandisets and their archives, a page
of one directory, its arrays and their previews."""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Prefetch

from dandizarr.checksums import DirectoryListing
from dandizarr_server.zarr_api.domain.permissions import Requester
from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Dandiset, ZarrArchive
from dandizarr_server.zarr_api.pages import ome, preview, render_pool
from dandizarr_server.zarr_api.pages.arrays import ArrayInfo, Unsupported
from dandizarr_server.zarr_api.pages.plane_reads import read_plane
from dandizarr_server.zarr_api.pages.reader import ArchiveFiles
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import DirectoryNode
from dandizarr_server.zarr_api.selectors.lookups import archives_annotated, readable_dandisets_list


def dandisets_with_archives(requester: Requester | None) -> list[Dandiset]:
    """Every dandiset ``requester`` may read, its archives (with the API's status annotations)
    in ``archive_list``."""
    archives = archives_annotated(requester).order_by("name")
    return list(
        readable_dandisets_list(requester)
        .order_by("id")
        .prefetch_related(Prefetch("zarr_archives", queryset=archives, to_attr="archive_list"))
    )


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    is_directory: bool
    size: int
    digest: str
    file_count: int  # files below a directory; 1 for a file


@dataclass(frozen=True)
class DirectoryPage:
    path: str
    listing: DirectoryListing
    entries: list[Entry]
    page: int
    pages: int
    total: int


def directory_page(node: DirectoryNode, page: int, page_size: int) -> DirectoryPage:
    """Page ``page`` (from 1) of a directory: directories first, then files, each by name.

    Only the page's entries are built: a directory of 100,000 files costs a sort of its names.
    """
    listing = node.listing
    directories = sorted(listing.directories)
    files = sorted(listing.files)
    total = len(directories) + len(files)
    pages = max(1, -(-total // page_size))
    if not 1 <= page <= pages:
        raise NotFound(f"page {page} is past the end of {node.path or 'the root'}")
    start = (page - 1) * page_size
    stop = start + page_size
    entries = []
    for name in directories[start:stop]:
        d = listing.directories[name]
        entries.append(
            Entry(name, posixpath.join(node.path, name), True, d.size, d.digest, d.count)
        )
    for name in files[max(0, start - len(directories)) : max(0, stop - len(directories))]:
        f = listing.files[name]
        entries.append(Entry(name, posixpath.join(node.path, name), False, f.size, f.digest, 1))
    return DirectoryPage(node.path, listing, entries, page, pages, total)


def archive_files(archive: ZarrArchive) -> ArchiveFiles:
    return ArchiveFiles(archive, get_store())


def archive_arrays(archive: ZarrArchive) -> list[ArrayInfo]:
    """The archive's arrays that are no level of an OME image (found once per tree version)."""
    return ome.plain_arrays(archive)


def preview_png(archive: ZarrArchive, array_path: str) -> bytes:
    """The PNG of the array at ``array_path``; NotFound when there is no such array,
    Unsupported when it has no preview, RendererBusy when no render slot is free.

    Drawn on a render thread (render_pool) within the preview's budget (pages.arrays), and
    its outcome cached per tree version of the archive, a refusal as much as a picture, so a
    reload never pays again. Storage errors are not outcomes: they propagate, uncached."""
    image = ome.image_for(archive, array_path)
    if image is not None:
        outcome = preview.cached(
            archive,
            "preview",
            array_path,
            lambda: render_pool.render(
                lambda: preview.drawn(lambda: ome.draw_image(archive, image))
            ),
        )
        if isinstance(outcome, str):
            raise Unsupported(outcome)
        return outcome
    info = next((a for a in archive_arrays(archive) if a.path == array_path), None)
    if info is None:
        raise NotFound(f"no Zarr array at {array_path!r} in zarr archive {archive.zarr_id}")
    if info.metadata is None:
        raise Unsupported(info.preview_problem or "no preview")
    outcome = preview.cached(
        archive,
        "preview",
        array_path,
        lambda: render_pool.render(lambda: preview.drawn(lambda: _draw(archive, info))),
    )
    if isinstance(outcome, str):
        raise Unsupported(outcome)
    return outcome


def _draw(archive: ZarrArchive, info: ArrayInfo) -> bytes:
    """The PNG; a ValueError says why there is none (malformed chunks, a chunk too large, out
    of time: ``preview.drawn`` makes it the outcome)."""
    files = ArchiveFiles(
        archive, get_store(), deadline=time.monotonic() + settings.DANDIZARR_PREVIEW_SECONDS
    )
    return preview.render_png(read_plane(files, info))
