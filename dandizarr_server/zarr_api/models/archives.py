"""Zarr archives: their root checksum, file count and size (the tree of ``.checksum`` files
lives in object storage next to the archive, ``zarr_checksums/{zarr_id}/``)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.db import models

from dandizarr.checksums import EMPTY_DIGEST
from dandizarr_server.zarr_api.domain import keys
from dandizarr_server.zarr_api.models.dandisets import Dandiset

if TYPE_CHECKING:  # the module of versions imports this one
    from dandizarr_server.zarr_api.models.versions import ArchiveVersion


class ZarrArchive(models.Model):
    class Layout(models.TextChoices):
        # One object per file.
        LOOSE = "loose"
        # Chunk files of arrays stored in shard objects (docs/sharded.md).
        SHARDED = "sharded"

    zarr_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=255)
    dandiset = models.ForeignKey(Dandiset, on_delete=models.PROTECT, related_name="zarr_archives")
    # Root checksum of the .checksum tree as of the last applied batch.
    checksum = models.CharField(max_length=64, default=EMPTY_DIGEST)
    file_count = models.BigIntegerField(default=0)
    size = models.BigIntegerField(default=0)
    # The generation the draft's changes belong to: publishing (and a write session's begin, for
    # its snapshot) makes it an ArchiveVersion and starts the next. Changes record what they
    # replace (FileHistory) only while the archive has a version to read them.
    generation = models.BigIntegerField(default=1)
    # Its published versions (``generation`` also moves when a write session begins).
    published_versions = models.IntegerField(default=0)
    layout = models.CharField(max_length=16, choices=Layout.choices, default=Layout.LOOSE)
    # A conversion into shards (POST pack/) is running; uploads wait for it.
    packing = models.BooleanField(default=False)
    # Where storage cannot refuse a presigned PUT (S3): the last moment an upload URL issued
    # for the archive can still be used. Publishing waits for it (docs/architecture.md,
    # replayed URLs).
    upload_urls_valid_until = models.DateTimeField(null=True, blank=True)
    # Keys found differing from the tree when a batch was reconciled with storage after its
    # URLs expired (a replayed URL, a write behind the service); the tree was repaired.
    drift_count = models.BigIntegerField(default=0)
    last_drift_at = models.DateTimeField(null=True, blank=True)
    last_drift = models.TextField(blank=True, default="")
    # The last garbage collection's report (services.garbage.GarbageReport): reclaimable and
    # held bytes.
    garbage = models.JSONField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    modified = models.DateTimeField(auto_now=True)

    # Not a column: the version this instance reads (None: the draft). Set by the read lookups
    # (selectors.lookups.archive_get) for a version's id; services refuse to change it.
    as_of: ArchiveVersion | None = None
    # Looked up through a private read link: its reads are never kept by a shared cache.
    through_link: bool = False

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["dandiset", "name"], name="unique_archive_name"),
        ]

    @property
    def read_id(self) -> uuid.UUID:
        """The id reads of this instance go by: its version's, or the draft's own."""
        return self.as_of.version_id if self.as_of is not None else self.zarr_id

    @property
    def storage_prefix(self) -> str:
        return keys.files_prefix(self.zarr_id)

    @property
    def checksum_prefix(self) -> str:
        return keys.checksums_prefix(self.zarr_id)

    @property
    def shard_prefix(self) -> str:
        return keys.shards_prefix(self.zarr_id)

    def __str__(self) -> str:
        return f"{self.name} ({self.zarr_id})"


class TreeLock(models.Model):
    """One row per archive, locked while its .checksum tree is updated.

    Separate from the archive row so that starting and completing batches (which lock the
    archive) never wait for a tree update in progress.
    """

    archive = models.OneToOneField(ZarrArchive, on_delete=models.CASCADE, related_name="tree_lock")
