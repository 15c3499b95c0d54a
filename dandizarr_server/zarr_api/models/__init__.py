"""The domain: dandisets with a draft and published versions, zarr archives, upload batches,
shards, archive versions, write sessions and read links; a module each.

Only each archive's root checksum, file count and size live in the database; the tree of
``.checksum`` files lives in object storage next to the archive (``zarr_checksums/{zarr_id}/``).
"""

from dandizarr_server.zarr_api.models.archives import TreeLock, ZarrArchive
from dandizarr_server.zarr_api.models.assets import Asset
from dandizarr_server.zarr_api.models.batches import (
    BUSY_STATES,
    CHANGING_STATES,
    Batch,
    BatchFile,
    MultipartUpload,
)
from dandizarr_server.zarr_api.models.dandisets import Dandiset, Version
from dandizarr_server.zarr_api.models.read_links import ReadLink
from dandizarr_server.zarr_api.models.sessions import SessionFile, WriteSession
from dandizarr_server.zarr_api.models.shards import Shard, ShardMember
from dandizarr_server.zarr_api.models.versions import ArchiveVersion, FileHistory

__all__ = [
    "BUSY_STATES",
    "CHANGING_STATES",
    "ArchiveVersion",
    "Asset",
    "Batch",
    "BatchFile",
    "Dandiset",
    "FileHistory",
    "MultipartUpload",
    "ReadLink",
    "SessionFile",
    "Shard",
    "ShardMember",
    "TreeLock",
    "Version",
    "WriteSession",
    "ZarrArchive",
]
