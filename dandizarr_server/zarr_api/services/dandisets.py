"""Creating dandisets (with their draft) and the zarr archives in them."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from dandizarr_server.zarr_api.domain.paths import path_problem
from dandizarr_server.zarr_api.domain.permissions import Requester, recorded_user, require_writer
from dandizarr_server.zarr_api.edge.exceptions import Forbidden, ValidationFailed
from dandizarr_server.zarr_api.models import Dandiset, TreeLock, Version, ZarrArchive
from dandizarr_server.zarr_api.services.embargo import public_reads_schedule


def dandiset_create(*, user: Requester, name: str, embargoed: bool = False) -> Dandiset:
    """A dandiset owned by ``user``; ``embargoed``: private until its owners release it."""
    owner = recorded_user(user)
    if owner is None:
        raise Forbidden("only a signed-in user can own a dandiset")
    status = Dandiset.EmbargoStatus.EMBARGOED if embargoed else Dandiset.EmbargoStatus.OPEN
    with transaction.atomic():
        dandiset = Dandiset.objects.create(name=name, embargo_status=status)
        dandiset.owners.add(owner)
        Version.objects.create(dandiset=dandiset, version=Version.DRAFT)
    return dandiset


def archive_create(
    *, user: Requester, dandiset: Dandiset, name: str, layout: str = ZarrArchive.Layout.LOOSE
) -> ZarrArchive:
    require_writer(user, dandiset)
    # An asset path (the DANDI API names a zarr after its asset: "sub-1/x.ome.zarr").
    problem = path_problem(name)
    if problem:
        raise ValidationFailed(f"archive name {name!r} {problem}")
    if layout not in ZarrArchive.Layout.values:
        raise ValidationFailed(
            f"layout {layout!r} is not one of {', '.join(ZarrArchive.Layout.values)}"
        )
    try:
        with transaction.atomic():
            archive = ZarrArchive.objects.create(dandiset=dandiset, name=name, layout=layout)
            TreeLock.objects.create(archive=archive)
            if not dandiset.is_private:
                public_reads_schedule()
    except IntegrityError as error:
        # 400 with "Zarr already exists", as the DANDI API answers (dandi-cli looks for it).
        raise ValidationFailed(
            f"Zarr already exists: dandiset {dandiset.identifier} already has a zarr archive "
            f"named {name!r}"
        ) from error
    return archive
