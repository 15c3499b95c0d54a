"""Private read links (docs/embargo.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from dandizarr_server.zarr_api.models.archives import ZarrArchive
from dandizarr_server.zarr_api.models.versions import ArchiveVersion


class ReadLink(models.Model):
    """A private read link (docs/embargo.md): a secret URL reading one archive (or one of its
    versions) without credentials. Only the secret's sha256 is kept: the database never holds
    what opens the archive."""

    archive = models.ForeignKey(ZarrArchive, on_delete=models.CASCADE, related_name="read_links")
    version = models.ForeignKey(
        ArchiveVersion, on_delete=models.CASCADE, null=True, related_name="read_links"
    )
    secret_sha256 = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField()
    revoked = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"read link {self.pk} to {self.archive_id}"
