"""Shard objects and where each packed file lies in one."""

from __future__ import annotations

from django.db import models

from dandizarr_server.zarr_api.models.archives import ZarrArchive


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
    # a growing archive for a small one (every member read, each look-up; docs/performance.md).
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
