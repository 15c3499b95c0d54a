"""Garbage collection of storage (docs/versions.md): object versions that neither the draft nor
any archive version references, once idle for the undelete window, are deleted for good.

What is referenced, per key of the archive:
- a loose file's object (``zarr/{id}/{path}``): the version holding the md5 the draft's tree
  has for the path (current, or replaced by an upload still open), any version a FileHistory
  row names (its key and md5), and whatever an open upload batch is writing;
- a shard object: while a Shard row that is not discarded has its key, and any of its versions
  a FileHistory row names;
- a file a write session staged (``zarr_shards/{id}/sessions/...``): while the session is open,
  then as the shard its commit made of it;
- a ``.checksum`` listing: the current one (versions are computed, never read from storage).
Everything else (overwritten or deleted files no version holds, cancelled and abandoned uploads,
discarded shards, replaced listings, objects the database never knew) is reclaimable once it has
been idle (replaced, or written if never replaced) for ``DANDIZARR_GC_WINDOW_DAYS``.

Streaming, a page of versions at a time: memory is bounded by a page, and a run killed midway
is resumed by the next run (deleting a version twice is harmless).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from dandizarr.objectstore.versions import ObjectVersion
from dandizarr_server.zarr_api.domain.keys import checksums_prefix, files_prefix, shards_prefix
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.garbage_references import References, garbage_references
from dandizarr_server.zarr_api.selectors.lookups import archives_for_operator
from dandizarr_server.zarr_api.selectors.stored_md5s import UNPROVEN

logger = logging.getLogger(__name__)

_PAGE = 1000
# Replaced .checksum listings are kept at least this long whatever the window: which listing
# is current is known only from the listing order, and a tree update may be writing one.
LISTING_MIN_IDLE = timedelta(hours=1)


@dataclass
class GarbageReport:
    zarr_id: str
    dry_run: bool
    checked_at: str = ""
    # Deleted (or, in a dry run, that would be).
    reclaimed_objects: int = 0
    reclaimed_bytes: int = 0
    # Unreferenced, but idle for less than the window: reclaimable later.
    waiting_objects: int = 0
    waiting_bytes: int = 0
    # Replaced versions kept because an archive version reads them.
    held_objects: int = 0
    held_bytes: int = 0


def _pages(versions: Iterator[ObjectVersion]) -> Iterator[list[ObjectVersion]]:
    """Pages of about ``_PAGE`` versions that never split one key's versions."""
    page: list[ObjectVersion] = []
    for _key, group in itertools.groupby(versions, key=lambda v: v.key):
        page.extend(group)
        if len(page) >= _PAGE:
            yield page
            page = []
    if page:
        yield page


def _needed(version: ObjectVersion, refs: References, checksums: str) -> tuple[bool, bool]:
    """(needed, held by an archive version)."""
    key = version.key
    if key.startswith(checksums):
        return version.latest, False
    md5 = refs.md5_of.get((key, version.etag), version.etag)
    if md5 == UNPROVEN:
        return True, False  # completed in parts, its proof to come: its batch is writing it
    if (key, "") in refs.history or (key, md5) in refs.history:
        return True, not version.latest
    # Not by "latest": a listing racing writes may name another version latest.
    if key in refs.live_shards or key in refs.staged or (key, md5) in refs.writing:
        return True, False
    return refs.draft.get(key) == md5, False


def archive_garbage_collect(
    archive: ZarrArchive, *, dry_run: bool, now: datetime | None = None
) -> GarbageReport:
    """Delete (or, ``dry_run``, count) the archive's unreferenced object versions idle for the
    window; record the report on the archive (reclaimable and held bytes, API and admin)."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.DANDIZARR_GC_WINDOW_DAYS)
    store = get_store()
    report = GarbageReport(str(archive.zarr_id), dry_run, now.isoformat(timespec="seconds"))
    checksums = checksums_prefix(archive.zarr_id)
    for prefix in (files_prefix(archive.zarr_id), shards_prefix(archive.zarr_id), checksums):
        for page in _pages(store.list_versions(prefix)):
            refs = garbage_references(archive, page)
            doomed: list[tuple[str, str]] = []
            for key, group in itertools.groupby(page, key=lambda v: v.key):
                versions = list(group)
                kept = 0
                for version in versions:
                    if version.delete_marker:
                        continue
                    needed, held = _needed(version, refs, checksums)
                    if needed:
                        kept += 1
                        if held:
                            report.held_objects += 1
                            report.held_bytes += version.size
                    elif version.idle_since() < cutoff and (
                        not key.startswith(checksums)
                        or version.idle_since() < now - LISTING_MIN_IDLE
                    ):
                        doomed.append((key, version.version_id))
                        report.reclaimed_objects += 1
                        report.reclaimed_bytes += version.size
                    else:
                        kept += 1
                        report.waiting_objects += 1
                        report.waiting_bytes += version.size
                # Delete markers keep nothing: gone once no older version needs hiding.
                for version in versions:
                    if version.delete_marker and (not version.latest or kept == 0):
                        doomed.append((key, version.version_id))
            if doomed and not dry_run:
                store.delete_versions(doomed)
    ZarrArchive.objects.filter(pk=archive.pk).update(garbage=asdict(report))
    logger.info("garbage collection of zarr archive %s: %s", archive.zarr_id, report)
    return report


def garbage_collect_all(*, dry_run: bool = False) -> list[GarbageReport]:
    """Every archive (once storage keeps versions, any archive's overwrites leave some)."""
    return [
        archive_garbage_collect(archive, dry_run=dry_run)
        for archive in archives_for_operator().iterator()
    ]
