"""Whether an open batch still expects an upload of a key with an md5 (the local backend's
storage endpoint accepts no other PUT)."""

from __future__ import annotations

from zarr_api.keys import split_upload_key
from zarr_api.models import Batch, BatchFile, Shard
from zarr_api.selectors.lookups import parse_zarr_id


def upload_expected(key: str, md5: str | None) -> bool:
    """An open batch lists ``key`` with ``md5``: a loose file of an open upload batch of its
    archive, or a shard object of an open pack batch. ``md5`` None (an ACL URL of an old dandi
    client, which signs no md5): any md5; the batch's completion verifies the bytes."""
    same_md5 = {} if md5 is None else {"md5": md5}
    split = split_upload_key(key)
    if split is None:
        return False
    kind, zarr_id, rest = split
    parsed = parse_zarr_id(zarr_id)
    if parsed is None:
        return False
    if kind == "file":
        return BatchFile.objects.filter(
            batch__archive__zarr_id=parsed,
            batch__state=Batch.State.OPEN,
            batch__kind=Batch.Kind.UPLOAD,
            path=rest,
            **same_md5,
        ).exists()
    return Shard.objects.filter(
        archive__zarr_id=parsed,
        key=key,
        batch__state=Batch.State.OPEN,
        batch__kind=Batch.Kind.PACK,
        **same_md5,
    ).exists()
