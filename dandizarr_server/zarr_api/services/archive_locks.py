"""Shared by the archive services: the row locks they take and the states they refuse.

Locking (Zulip's rules): whatever reads state and then writes based on it holds a row lock, and
locks are always taken in one order: Dandiset -> ZarrArchive -> (the uploader's User row) ->
TreeLock. Batch operations lock the archive row; tree updates, compaction and conversion lock
the archive's TreeLock row (member rows only change under it), so a batch may be started or
completed while the previous one is being applied.
"""

from __future__ import annotations

from django.contrib.auth.models import User

from dandizarr_server.zarr_api.edge.exceptions import Conflict
from dandizarr_server.zarr_api.models import TreeLock, ZarrArchive
from dandizarr_server.zarr_api.selectors.lookups import require_draft


def lock_archive(archive: ZarrArchive) -> ZarrArchive:
    """The archive's row, locked, for a change of its draft (Conflict for a version)."""
    require_draft(archive)
    return ZarrArchive.objects.select_for_update().select_related("dandiset").get(pk=archive.pk)


def lock_account(user_id: int | None) -> None:
    """Lock the user's row, so that what their open batches declare in parts (a cap across
    archives: ``domain.declarations.check_declared_in_parts``) is read and added to by one
    start at a time. FOR NO KEY UPDATE: the key-share lock a new batch row takes on its user
    does not conflict with it, so two starts holding such locks cannot deadlock here."""
    if user_id is not None:
        list(User.objects.select_for_update(no_key=True).filter(pk=user_id).values_list("pk"))


def lock_tree(archive_pk: int) -> None:
    """Lock the archive's TreeLock row (TreeLock.DoesNotExist: the archive was deleted)."""
    TreeLock.objects.select_for_update().get(archive_id=archive_pk)


def require_not_converting(archive: ZarrArchive) -> None:
    if archive.packing:
        raise Conflict(
            f"zarr archive {archive.zarr_id} is being converted into shards; try again when "
            "its detail shows packing: false",
            code="archive_packing",
        )
