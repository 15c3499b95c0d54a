"""The admin: dandisets, archives (with batch history, cancel and audit actions, the storage
garbage report), their versions, shards."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from dandizarr_server.zarr_api.edge.exceptions import DomainError
from dandizarr_server.zarr_api.models import (
    ArchiveVersion,
    Asset,
    Batch,
    BatchFile,
    Dandiset,
    Shard,
    Version,
    ZarrArchive,
)
from dandizarr_server.zarr_api.services.audit import archive_audit
from dandizarr_server.zarr_api.services.upload_batches import batch_cancel


@admin.register(Dandiset)
class DandisetAdmin(admin.ModelAdmin[Dandiset]):
    list_display = ["identifier", "name", "created"]
    filter_horizontal = ["owners"]


@admin.register(Version)
class VersionAdmin(admin.ModelAdmin[Version]):
    list_display = ["dandiset", "version", "created"]


@admin.register(Asset)
class AssetAdmin(admin.ModelAdmin[Asset]):
    list_display = ["asset_id", "version", "path", "zarr"]


@admin.register(ArchiveVersion)
class ArchiveVersionAdmin(admin.ModelAdmin[ArchiveVersion]):
    """Published versions: immutable, so shown and never edited."""

    list_display = ["archive", "number", "checksum", "file_count", "size", "created"]
    search_fields = ["archive__zarr_id", "version_id"]
    readonly_fields = [
        "archive",
        "number",
        "generation",
        "version_id",
        "checksum",
        "file_count",
        "size",
        "created",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


# A batch is history: the admin shows it and never edits it.
BATCH_FIELDS = (
    "kind",
    "state",
    "user",
    "sequence",
    "created",
    "completed",
    "applied",
    "reconcile_after",
    "note",
)


class BatchInline(admin.TabularInline[Batch, ZarrArchive]):
    model = Batch
    fields = readonly_fields = BATCH_FIELDS
    extra = 0
    can_delete = False
    ordering = ["-id"]

    def has_add_permission(self, request: HttpRequest, obj: ZarrArchive | None = None) -> bool:
        return False


@admin.register(ZarrArchive)
class ZarrArchiveAdmin(admin.ModelAdmin[ZarrArchive]):
    list_display = [
        "zarr_id",
        "name",
        "dandiset",
        "checksum",
        "file_count",
        "size",
        "layout",
        "generation",
        "drift_count",
    ]
    list_filter = ["layout"]
    search_fields = ["zarr_id", "name"]
    readonly_fields = [
        "zarr_id",
        "checksum",
        "file_count",
        "size",
        "generation",
        "garbage",
        "upload_urls_valid_until",
        "drift_count",
        "last_drift_at",
        "last_drift",
        "created",
        "modified",
    ]
    inlines = [BatchInline]
    actions = ["cancel_stuck_upload", "recompute_checksum"]

    @admin.action(description="Cancel stuck upload")
    def cancel_stuck_upload(self, request: HttpRequest, queryset: QuerySet[ZarrArchive]) -> None:
        for archive in queryset:
            try:
                batch_cancel(user=request.user, archive=archive, reason="cancelled by admin")
            except DomainError as error:
                self.message_user(request, f"{archive}: {error.message}", messages.WARNING)
            else:
                self.message_user(request, f"{archive}: open batch cancelled")

    @admin.action(description="Recompute checksum from storage (audit)")
    def recompute_checksum(self, request: HttpRequest, queryset: QuerySet[ZarrArchive]) -> None:
        for archive in queryset:
            try:
                report = archive_audit(archive)
            except DomainError as error:
                self.message_user(request, f"{archive}: {error.message}", messages.WARNING)
                continue
            if report.drift:
                self.message_user(
                    request,
                    f"{archive}: drift repaired: checksum {report.checksum_before} -> "
                    f"{report.checksum_after}; {len(report.directories_rewritten)} .checksum "
                    f"file(s) rewritten, {len(report.stale_checksum_files_deleted)} stale deleted; "
                    f"{len(report.corrupted_members)} corrupted member(s) "
                    f"({', '.join(c['path'] for c in report.corrupted_members[:5])}), "
                    f"{len(report.stale_loose_copies_deleted)} stale loose copies and "
                    f"{len(report.orphan_shards_deleted)} orphan shard object(s) deleted",
                    messages.WARNING,
                )
            else:
                self.message_user(request, f"{archive}: no drift ({report.checksum_after})")


class BatchFileInline(admin.TabularInline[BatchFile, Batch]):
    model = BatchFile
    fields = readonly_fields = ("path", "md5", "size")
    extra = 0
    can_delete = False


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin[Batch]):
    list_display = ["id", "archive", "kind", "state", "user", "created", "completed", "applied"]
    list_filter = ["state", "kind"]
    readonly_fields = ("archive", *BATCH_FIELDS)
    inlines = [BatchFileInline]


@admin.register(Shard)
class ShardAdmin(admin.ModelAdmin[Shard]):
    list_display = ["id", "archive", "name", "state", "size", "dead_bytes", "verified", "created"]
    list_filter = ["state"]
    search_fields = ["name", "key"]
    readonly_fields = [f.name for f in Shard._meta.fields]
