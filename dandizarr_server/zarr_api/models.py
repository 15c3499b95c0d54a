"""The domain: dandisets with a draft and published versions, zarr archives, upload batches.

Only each archive's root checksum, file count and size live in the database; the tree of
``.checksum`` files lives in object storage next to the archive (``zarr_checksums/{zarr_id}/``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from dandizarr.checksums import EMPTY_DIGEST
from dandizarr_server.zarr_api.domain import keys


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
    # The generation the draft's changes belong to: publishing makes it an ArchiveVersion and
    # starts the next. Changes record what they replace only from generation 2 on
    # (FileHistory): before the first publish no version holds anything.
    generation = models.BigIntegerField(default=1)
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


class Shard(models.Model):
    """One shard object of a sharded archive: immutable once written (a rewrite is a new one)."""

    class State(models.TextChoices):
        # Declared in a pack batch; its members are not files of the archive yet.
        PENDING = "pending"
        # Holds members of the archive.
        LIVE = "live"
        # Cancelled, failed or replaced: its object is (being) deleted.
        DISCARDED = "discarded"

    archive = models.ForeignKey(ZarrArchive, on_delete=models.CASCADE, related_name="shards")
    batch = models.ForeignKey(
        "Batch", null=True, blank=True, on_delete=models.SET_NULL, related_name="shards"
    )
    name = models.TextField()
    key = models.TextField(unique=True)
    size = models.BigIntegerField()
    md5 = models.CharField(max_length=32)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # Every member's md5 was checked against the object's bytes.
    verified = models.BooleanField(default=False)
    # Bytes of members since deleted or overwritten (what compaction would reclaim).
    dead_bytes = models.BigIntegerField(default=0)
    # The index shape of the object's trailing sharding_indexed index, when known.
    chunks_per_shard = models.JSONField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["archive", "state"])]

    def __str__(self) -> str:
        return f"shard {self.name} ({self.state}) of {self.archive_id}"


class ShardMember(models.Model):
    """Where a packed file's bytes are: authoritative (a path without a row is loose)."""

    # No index of its own: the unique (archive, path) index serves every look-up by archive, and
    # with a second one PostgreSQL probed a path by the archive alone where its statistics took
    # a growing archive for a small one (every member read, each look-up: issue #39).
    archive = models.ForeignKey(
        ZarrArchive, on_delete=models.CASCADE, related_name="members", db_index=False
    )
    path = models.TextField()
    shard = models.ForeignKey(Shard, on_delete=models.PROTECT, related_name="members")
    offset = models.BigIntegerField()
    length = models.BigIntegerField()
    md5 = models.CharField(max_length=32)
    slot = models.IntegerField(null=True, blank=True)

    class Meta:
        # No default ordering: "ORDER BY id" on a look-up of some paths made SQLite walk every
        # member of the archive (the archive index gives id order) instead of probing
        # (archive, path) for each: one pack batch's apply cost grew with the archive.
        constraints = [
            models.UniqueConstraint(fields=["archive", "path"], name="unique_member_path")
        ]


class BatchFile(models.Model):
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="files")
    path = models.TextField()
    # Declared md5 for uploads; empty for deletions.
    md5 = models.CharField(max_length=32, blank=True, default="")
    # Size reported by storage at verification (declared, for members); null for deletions.
    size = models.BigIntegerField(null=True, blank=True)
    # For a member of a pack batch: its shard, byte offset and slot in the shard's index.
    shard = models.ForeignKey(
        Shard, null=True, blank=True, on_delete=models.SET_NULL, related_name="declared"
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


class ArchiveVersion(models.Model):
    """An immutable version of an archive, made by publishing its dandiset (docs/versions.md):
    the draft as it was at the end of ``generation``. It owns no objects: it shares them with the
    draft and other versions, and FileHistory says where the draft has moved on."""

    archive = models.ForeignKey(ZarrArchive, on_delete=models.PROTECT, related_name="versions")
    # 1, 2, ... per archive.
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
            models.UniqueConstraint(fields=["archive", "number"], name="unique_archive_version"),
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
