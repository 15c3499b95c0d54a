"""Part URLs of big files, a page at a time (docs/api.md, "Big files"): a batch start (or add)
gives each file sent in parts its first page, within a bound on the whole answer, and
``POST batches/{id}/parts/`` gives its uploader any later page while the batch is open. Neither
an answer nor its signing grows with the sizes or parts a client declared: at most
``DANDIZARR_PART_URLS_PAGE`` URLs a file, ``PAGES_PER_START`` pages an answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from dandizarr_server.zarr_api.domain.permissions import Requester, recorded_user, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Conflict, ValidationFailed
from dandizarr_server.zarr_api.models import Batch, MultipartUpload, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.declared_parts import open_upload_get
from dandizarr_server.zarr_api.selectors.lookups import batch_get
from dandizarr_server.zarr_api.services.archive_locks import lock_archive
from dandizarr_server.zarr_api.services.url_lifetimes import upload_urls_issued

# A start's (or add's) answer holds at most this many pages of part URLs over all its files; a
# file past them gets none there (its client asks for its pages).
PAGES_PER_START = 10


@dataclass(frozen=True)
class PartPage:
    """Some part URLs of one file of ``batch`` sent in parts: ``urls[i]`` takes one PUT of
    part ``first_part + i`` (of ``part_count``, each ``part_size`` bytes but the last)."""

    batch: int
    part_size: int
    part_count: int
    first_part: int
    urls: tuple[str, ...]

    @property
    def next_part(self) -> int | None:
        """The first part this page does not reach; None when it reaches the last."""
        after = self.first_part + len(self.urls)
        return after if after <= self.part_count else None


def part_page_sign(upload: MultipartUpload, first_part: int, most: int) -> PartPage:
    """URLs of at most ``most`` parts of ``upload`` from ``first_part`` (1 to its count). The
    caller has recorded that the archive's upload URLs are issued now (``upload_urls_issued``,
    under its row lock), as for any upload URL."""
    md5s = upload.part_md5s[first_part - 1 : first_part - 1 + most]
    urls = (
        get_store().presigned_part_urls(
            upload.key,
            upload.upload_id,
            md5s,
            expires_in=settings.DANDIZARR_PRESIGNED_URL_EXPIRY_SECONDS,
            first_part=first_part,
        )
        if md5s
        else []
    )
    assert upload.batch_id is not None  # an open upload's batch is open: never deleted
    return PartPage(
        upload.batch_id, upload.part_size, len(upload.part_md5s), first_part, tuple(urls)
    )


def first_pages_sign(uploads: Sequence[MultipartUpload]) -> dict[str, PartPage]:
    """Each upload's first page, by path, in order, until ``PAGES_PER_START`` pages are
    signed in all (later files get an empty page: their ``next_part`` is 1)."""
    page = int(settings.DANDIZARR_PART_URLS_PAGE)
    left = page * PAGES_PER_START
    pages = {}
    for upload in uploads:
        signed = part_page_sign(upload, 1, min(page, left))
        left -= len(signed.urls)
        pages[upload.path] = signed
    return pages


def part_urls_next(
    *, user: Requester, archive: ZarrArchive, batch_id: str, path: str, first_part: int
) -> PartPage:
    """The page of part URLs of ``path`` from ``first_part``, for the uploader of ``batch_id``
    while it is open. Under the archive's row lock, as a batch's completion is: URLs are
    never signed for a batch that has ended, and their lifetime is recorded before a batch
    ended after them sets when it is reconciled (``services.url_lifetimes``)."""
    with transaction.atomic():
        archive = lock_archive(archive)
        require_writer(user, archive.dandiset)
        batch = batch_get(archive, batch_id)
        if batch.state != Batch.State.OPEN:
            raise Conflict(
                f"batch {batch.pk} of zarr archive {archive.zarr_id} has ended "
                f"({batch.state}): its files take no more part URLs",
                code="batch_ended",
            )
        if recorded_user(user) != batch.user:
            raise Conflict(
                f"zarr archive {archive.zarr_id}: batch {batch.pk} is another client's upload; "
                "part URLs are given to its uploader alone",
                code="batch_not_yours",
            )
        upload = open_upload_get(batch, path)
        count = len(upload.part_md5s)
        if first_part > count:
            raise ValidationFailed(f"first_part is past the file's {count} parts")
        upload_urls_issued(archive)
        return part_page_sign(upload, first_part, int(settings.DANDIZARR_PART_URLS_PAGE))
