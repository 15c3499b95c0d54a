"""The archive an upload writes into, local or remote (``upload``, ``remote_upload``): found
or created from the options, and once verified made an asset of its dandiset's draft."""

from __future__ import annotations

from dandizarr.client.api import ApiClient
from dandizarr.client.errors import ApiError, ArchiveNotSharded, ClientError
from dandizarr.client.models import Archive
from dandizarr.client.progress import Progress
from dandizarr.client.upload_types import UploadOptions


def resolve_archive(
    client: ApiClient, options: UploadOptions, default_name: str, progress: Progress
) -> Archive:
    """The archive ``zarr_id``, or the one called ``name`` (default: ``default_name``) in
    ``dandiset``, created when absent; ClientError when it cannot be changed."""
    if options.zarr_id:
        archive = client.get_archive(options.zarr_id)
        if options.dandiset and archive.dandiset != options.dandiset:
            raise ClientError(
                f"zarr archive {archive.zarr_id} belongs to dandiset {archive.dandiset}, "
                f"not {options.dandiset}"
            )
    else:
        if not options.dandiset:
            raise ClientError("give a dandiset (and optionally a name), or a zarr_id")
        client.get_dandiset(options.dandiset)  # "does not exist" before anything else
        name = options.name or default_name
        found = client.find_archive(options.dandiset, name)
        if found is None:
            try:
                found = client.create_archive(
                    options.dandiset, name, layout="sharded" if options.pack else None
                )
                layout = ", sharded" if options.pack else ""
                progress.message(f"created zarr archive {found.zarr_id} ({name}{layout})")
            except ApiError as error:
                # Someone created it between our look-up and our POST.
                found = client.find_archive(options.dandiset, name)
                if found is None:
                    raise error from None
        archive = found
    if archive.frozen:
        raise ClientError(
            f"zarr archive {archive.zarr_id} is frozen (a version of its dandiset was "
            "published); it cannot be changed"
        )
    if options.pack and archive.layout != "sharded":
        raise ArchiveNotSharded(archive.zarr_id, archive.layout)
    return archive


def ensure_asset(client: ApiClient, archive: Archive, progress: Progress) -> str | None:
    """The verified archive as an asset of its dandiset's draft (path: its name): the asset's
    id, None when the draft has another archive's asset there (left as it is)."""
    asset = client.ensure_draft_asset(archive.dandiset, archive.name, archive.zarr_id)
    if asset is None:
        progress.message(
            f"the draft of dandiset {archive.dandiset} has another archive's asset at "
            f"{archive.name!r}: left as it is, and this archive is no asset of the draft"
        )
    return asset
