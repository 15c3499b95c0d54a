"""Which presigned PUTs the local backend's storage endpoint accepts: only those an open batch
still expects (its key with its md5), so a URL replayed after its batch ended changes nothing.

S3 cannot ask us; there the keys of ended batches are reconciled once their URLs have expired
(``dandizarr_server.zarr_api.services.reconciliation``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import transaction

from dandizarr_server.zarr_api.domain.keys import split_upload_key
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.parsers.identifiers import parse_zarr_id
from dandizarr_server.zarr_api.selectors.expected_uploads import upload_expected

T = TypeVar("T")


def expected_upload_store(key: str, md5: str | None, store: Callable[[], T]) -> T | None:
    """Run ``store`` (which makes the uploaded object visible) if an open batch still expects
    it, holding the archive's row lock, so a batch cannot complete, cancel or be followed by a
    deletion between the check and the write; None (nothing stored) otherwise."""
    split = split_upload_key(key)
    parsed = parse_zarr_id(split[1]) if split else None
    if parsed is None:
        return None
    with transaction.atomic():
        locked = ZarrArchive.objects.select_for_update().filter(zarr_id=parsed)
        if locked.values_list("pk", flat=True).first() is None:
            return None
        if not upload_expected(key, md5):
            return None
        return store()
