"""Upload batches, their declared files and their big files' multipart uploads."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from dandizarr_server.zarr_api.models.archives import ZarrArchive


class Batch(models.Model):
    class Kind(models.TextChoices):
        UPLOAD = "upload"
        DELETE = "delete"
        # Shard objects whose members are files of the archive.
        PACK = "pack"
        # A write session's commit (WriteSession): its staged files, each a one-member shard
        # (rows with a shard), and its deletions (rows without an md5), applied at once.
        SESSION = "session"

    class State(models.TextChoices):
        # Upload URLs handed out, files being PUT.
        OPEN = "open"
        # Verified (or a deletion accepted); waiting for its tree update.
        PENDING = "pending"
        # Reflected in the .checksum tree and the archive's checksum.
        APPLIED = "applied"
        CANCELLED = "cancelled"
        # A pack batch with a member whose bytes did not match its declared md5.
        FAILED = "failed"
        # Intents committed before storage is touched, finished by the request or, after a
        # crash, by the periodic sweep: a cancel deleting its uploads, a deletion its objects.
        CANCELLING = "cancelling"
        DELETING = "deleting"

    archive = models.ForeignKey(ZarrArchive, on_delete=models.CASCADE, related_name="batches")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Order in which pending batches are applied; assigned under the archive's row lock.
    sequence = models.BigIntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    completed = models.DateTimeField(null=True, blank=True)
    applied = models.DateTimeField(null=True, blank=True)
    # Why a deletion batch exists (user request, cancel of an upload, ...), for the admin.
    note = models.CharField(max_length=255, blank=True, default="")
    # Why a batch failed, naming the paths.
    error = models.TextField(blank=True, default="")
    # Where storage cannot refuse a presigned PUT (S3): when the URLs that could still change
    # this batch's keys have expired, so its keys are to be checked against the tree; null
    # once checked (or when there is nothing to check).
    reconcile_after = models.DateTimeField(null=True, blank=True)
    # An open upload batch's directories (every ancestor of its files), so files joining it
    # are checked against them without reading all of its files again.
    directories = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # The database itself guarantees at most one open upload per archive.
            models.UniqueConstraint(
                fields=["archive"], condition=Q(state="open"), name="one_open_batch_per_archive"
            ),
        ]
        indexes = [models.Index(fields=["archive", "state", "sequence"])]

    def __str__(self) -> str:
        return f"{self.kind} batch {self.pk} ({self.state}) of {self.archive.zarr_id}"


# Batches that will still change their archive: its tree, or (cancels, deletions) its storage.


CHANGING_STATES = (Batch.State.CANCELLING, Batch.State.DELETING, Batch.State.PENDING)
BUSY_STATES = (Batch.State.OPEN, *CHANGING_STATES)


class BatchFile(models.Model):
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="files")
    path = models.TextField()
    # Declared md5 for uploads; empty for deletions.
    md5 = models.CharField(max_length=32, blank=True, default="")
    # Size reported by storage at verification (declared, for members); null for deletions.
    size = models.BigIntegerField(null=True, blank=True)
    # For a member of a pack batch: its shard, byte offset and slot in the shard's index.
    shard = models.ForeignKey(
        "Shard", null=True, blank=True, on_delete=models.SET_NULL, related_name="declared"
    )
    offset = models.BigIntegerField(null=True, blank=True)
    slot = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["batch", "path"], name="unique_batch_path")]


class MultipartUpload(models.Model):
    """A file of an upload batch sent in parts (docs/api.md, "Big files"): S3's upload, the
    parts the client declared, and what the service proved of the object it completed into.

    Kept after its batch ends: a proven row is how every reader of storage maps the object's
    composite ETag (which is no md5) to the md5 its bytes have (``selectors.stored_md5s``)."""

    class State(models.TextChoices):
        # Parts being PUT.
        OPEN = "open"
        # Completed in storage into ``etag``; its md5 is not proven yet.
        COMPLETED = "completed"
        # The object's bytes were read and their md5 is ``md5``.
        PROVEN = "proven"
        # Its bytes' md5 is not the declared one (the batch failed), or it was aborted.
        FAILED = "failed"
        ABORTED = "aborted"

    archive = models.ForeignKey(ZarrArchive, on_delete=models.CASCADE, related_name="multipart")
    batch = models.ForeignKey(
        "Batch", null=True, blank=True, on_delete=models.SET_NULL, related_name="multipart"
    )
    # A write session's big file (docs/writing.md): its parts declared as they are sent, its
    # md5 when it is finished; the session's commit makes ``batch`` the batch that applies it.
    session = models.ForeignKey(
        "WriteSession",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="multipart",
    )
    path = models.TextField()
    key = models.TextField()
    upload_id = models.TextField(unique=True)
    size = models.BigIntegerField()
    part_size = models.BigIntegerField()
    # The md5 hex of each part, in part order, as declared.
    part_md5s = models.JSONField()
    # The file's md5 as declared (checked against its bytes before the file is applied).
    md5 = models.CharField(max_length=32)
    # The ETag the declared parts complete into (multipart.composite_etag).
    etag = models.CharField(max_length=48)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["key", "etag"]),
            models.Index(fields=["batch", "state"]),
        ]

    def __str__(self) -> str:
        return f"multipart upload of {self.key} ({self.state})"
