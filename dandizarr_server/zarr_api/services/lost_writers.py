"""Losing write access ends one's uploads: when owners are removed from a dandiset (the admin,
or any code that changes ``Dandiset.owners``), their open batches in its archives are
cancelled, after the change commits. Until then, and for good on the local backend, their
upload URLs stop working at once: a PUT is accepted only for a batch whose uploader may still
write (``selectors.expected_uploads``), and completing needs write access too."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth.models import User

from dandizarr_server.zarr_api.domain.permissions import user_can_write
from dandizarr_server.zarr_api.edge.exceptions import Forbidden, NotFound
from dandizarr_server.zarr_api.models import Dandiset
from dandizarr_server.zarr_api.runtime.scheduling import (
    END_LOST_WRITERS_BATCHES,
    schedule_on_commit,
)
from dandizarr_server.zarr_api.selectors.batch_states import open_batches_of_dandiset
from dandizarr_server.zarr_api.services.upload_batches import batch_cancel

logger = logging.getLogger(__name__)


def lost_writers_schedule(dandiset_pk: int, user_pks: Iterable[int]) -> None:
    """After this transaction: end the open batches of ``user_pks`` in the dandiset's archives."""
    ordered = sorted(set(user_pks))
    if ordered:
        schedule_on_commit(END_LOST_WRITERS_BATCHES, dandiset_pk, *ordered)


def lost_writers_batches_end(dandiset_pk: int, *user_pks: int) -> int:
    """Cancel each open batch of ``user_pks`` in the dandiset whose uploader can no longer
    write to it (one given write access back meanwhile keeps theirs)."""
    dandiset = Dandiset.objects.filter(pk=dandiset_pk).first()
    if dandiset is None:
        return 0
    ended = 0
    batches = (
        open_batches_of_dandiset(dandiset)
        .filter(user_id__in=user_pks)
        .select_related("archive", "user")
    )
    for batch in batches:
        if batch.user is not None and user_can_write(batch.user, dandiset):
            continue
        try:
            batch_cancel(
                user=None,
                archive=batch.archive,
                reason=f"its uploader lost write access to dandiset {dandiset.identifier}",
            )
        except (NotFound, Forbidden):
            continue  # ended meanwhile
        ended += 1
    logger.info("dandiset %s: ended %d open batches of removed writers", dandiset_pk, ended)
    return ended


def owners_changed(
    action: str, instance: Dandiset | User, pk_set: set[int] | None, **_: object
) -> None:
    """The ``m2m_changed`` receiver of ``Dandiset.owners``, from either side of the relation."""
    if action == "pre_clear" and isinstance(instance, Dandiset):
        lost_writers_schedule(instance.pk, instance.owners.values_list("pk", flat=True))
    elif action == "post_remove" and pk_set:
        if isinstance(instance, Dandiset):
            lost_writers_schedule(instance.pk, pk_set)
        else:
            for dandiset_pk in pk_set:
                lost_writers_schedule(dandiset_pk, [instance.pk])
