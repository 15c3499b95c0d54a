"""Dandisets and their versions (the draft and published ones), as the DANDI API has them."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Dandiset(models.Model):
    class EmbargoStatus(models.TextChoices):
        # Everyone reads it.
        OPEN = "OPEN"
        # Private: its owners and staff alone see anything of it
        # (dandizarr_server.zarr_api.domain.permissions).
        EMBARGOED = "EMBARGOED"
        # Released by its owners; still private until the release's work is done.
        UNEMBARGOING = "UNEMBARGOING"

    name = models.CharField(max_length=255)
    owners = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="dandisets")
    created = models.DateTimeField(auto_now_add=True)
    embargo_status = models.CharField(
        max_length=16, choices=EmbargoStatus.choices, default=EmbargoStatus.OPEN
    )

    @property
    def is_private(self) -> bool:
        return self.embargo_status != self.EmbargoStatus.OPEN

    class Meta:
        ordering = ["id"]

    @property
    def identifier(self) -> str:
        return f"{self.pk:06d}"

    def __str__(self) -> str:
        return f"{self.identifier} {self.name}"


class Version(models.Model):
    DRAFT = "draft"

    dandiset = models.ForeignKey(Dandiset, on_delete=models.CASCADE, related_name="versions")
    # "draft", or the published version's name, 0.YYMMDD.HHMM (services.publishing).
    version = models.CharField(max_length=32)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["dandiset_id", "created"]
        constraints = [
            models.UniqueConstraint(fields=["dandiset", "version"], name="unique_version"),
        ]

    @property
    def is_draft(self) -> bool:
        return self.version == self.DRAFT

    def __str__(self) -> str:
        return f"{self.dandiset.identifier}/{self.version}"
