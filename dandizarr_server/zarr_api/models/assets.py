"""Assets: an archive at a path of a dandiset version."""

from __future__ import annotations

import uuid

from django.db import models

from dandizarr_server.zarr_api.models.archives import ZarrArchive
from dandizarr_server.zarr_api.models.dandisets import Version
from dandizarr_server.zarr_api.models.versions import ArchiveVersion


class Asset(models.Model):
    asset_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    version = models.ForeignKey(Version, on_delete=models.CASCADE, related_name="assets")
    path = models.CharField(max_length=512)
    zarr = models.ForeignKey(ZarrArchive, on_delete=models.PROTECT, related_name="assets")
    # A published version's asset: the archive version it holds (the draft's: None).
    archive_version = models.ForeignKey(
        ArchiveVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="assets"
    )
    metadata = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    modified = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["version", "path"], name="unique_asset_path"),
        ]

    def __str__(self) -> str:
        return f"{self.version}:{self.path}"
