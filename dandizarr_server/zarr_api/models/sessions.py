"""Write sessions and the files they staged (docs/writing.md)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from dandizarr_server.zarr_api.models.archives import ZarrArchive
from dandizarr_server.zarr_api.models.batches import Batch
from dandizarr_server.zarr_api.models.versions import ArchiveVersion


class WriteSession(models.Model):
    """Writes into an archive's draft staged apart and made visible at once by a commit
    (docs/writing.md). Its files are objects under ``keys.session_prefix``; nothing of it is in
    the draft until the commit turns them into a ``Batch.Kind.SESSION`` batch."""

    class State(models.TextChoices):
        OPEN = "open"
        COMMITTED = "committed"
        ABORTED = "aborted"
        # Open past ``expires`` (its writer gone): ended by the periodic sweep.
        EXPIRED = "expired"

    session_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    archive = models.ForeignKey(ZarrArchive, on_delete=models.CASCADE, related_name="sessions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    # The archive's largest batch sequence when the session began: a batch sequenced after it
    # changed the draft since (the commit's conflict check).
    base_sequence = models.BigIntegerField(default=0)
    # The draft as the session began (a snapshot version), which its reads go through under its
    # own writes; deleted when the session ends.
    snapshot = models.OneToOneField(
        ArchiveVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="session"
    )
    created = models.DateTimeField(auto_now_add=True)
    # Moved forward by every write: a session whose writer is gone ends this long after.
    expires = models.DateTimeField()
    ended = models.DateTimeField(null=True, blank=True)
    # The batch its commit made.
    batch = models.ForeignKey(
        Batch, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Storage done with after the end: an abort's or an expiry's staged objects deleted, a
    # commit's deleted paths' loose objects deleted once its batch applied.
    cleaned = models.BooleanField(default=False)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "expires"])]

    def __str__(self) -> str:
        return f"write session {self.session_id} ({self.state}) of {self.archive_id}"


class SessionFile(models.Model):
    """A path a write session changed: a staged file (its object ``key``, its md5 and size,
    ``verified`` once storage was found to hold them), or a deletion (``deleted``)."""

    session = models.ForeignKey(WriteSession, on_delete=models.CASCADE, related_name="files")
    path = models.TextField()
    deleted = models.BooleanField(default=False)
    md5 = models.CharField(max_length=32, blank=True, default="")
    size = models.BigIntegerField(default=0)
    key = models.TextField(blank=True, default="")
    verified = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "path"], name="unique_session_path")
        ]
        indexes = [models.Index(fields=["key"])]
