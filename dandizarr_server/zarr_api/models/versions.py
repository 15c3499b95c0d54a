"""Archive versions and the history rows that keep them (docs/versions.md)."""

from __future__ import annotations

import uuid

from django.db import models

from dandizarr_server.zarr_api.models.archives import ZarrArchive


class ArchiveVersion(models.Model):
    """An immutable version of an archive, made by publishing its dandiset (docs/versions.md):
    the draft as it was at the end of ``generation``. It owns no objects: it shares them with the
    draft and other versions, and FileHistory says where the draft has moved on.

    A ``snapshot`` is the same thing made for a write session as it begins (docs/writing.md):
    the draft the session reads under its own writes, whatever commits meanwhile. It has no
    number, is listed nowhere, and is deleted when its session ends."""

    class Kind(models.TextChoices):
        PUBLISHED = "published"
        SNAPSHOT = "snapshot"

    archive = models.ForeignKey(ZarrArchive, on_delete=models.PROTECT, related_name="versions")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PUBLISHED)
    # 1, 2, ... per archive among its published versions; 0 for a snapshot.
    number = models.IntegerField()
    generation = models.BigIntegerField()
    # The id a DANDI client reads this version by (a published asset's ``zarr``): the
    # ``/api/zarr/{id}/`` and ``/zarr/{id}/`` routes serve the version under it.
    version_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    checksum = models.CharField(max_length=64)
    file_count = models.BigIntegerField()
    size = models.BigIntegerField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["archive_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["archive", "number"],
                condition=models.Q(kind="published"),
                name="unique_archive_version",
            ),
        ]

    def __str__(self) -> str:
        return f"version {self.number} of {self.archive_id}"


class FileHistory(models.Model):
    """What a file was up to the end of generation ``until_generation``, recorded when a change
    of a later generation replaced it: only what changed after a publish costs a row. A version
    of generation g reads ``path`` from the row with the smallest ``until_generation >= g``;
    without one, the file is what the draft has now."""

    archive = models.ForeignKey(ZarrArchive, on_delete=models.CASCADE, related_name="history")
    path = models.TextField()
    until_generation = models.BigIntegerField()
    # False: there was no such file.
    present = models.BooleanField()
    md5 = models.CharField(max_length=32, blank=True, default="")
    size = models.BigIntegerField(default=0)
    # Where its bytes were: a loose object (found among the key's versions by md5) or a range of
    # a shard object (immutable).
    key = models.TextField(blank=True, default="")
    offset = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["archive", "path", "until_generation"], name="unique_file_history"
            ),
        ]
        indexes = [
            models.Index(fields=["archive", "until_generation"]),
            models.Index(fields=["key"]),
        ]
