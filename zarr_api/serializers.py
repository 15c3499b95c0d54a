"""Output shapes of the API (inputs are validated in services, which name every bad value)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers

from zarr_api.models import Asset, Dandiset, Version, ZarrArchive


class DandisetSerializer(serializers.ModelSerializer[Dandiset]):
    identifier = serializers.CharField(read_only=True)
    owners: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        many=True, read_only=True, slug_field="username"
    )

    class Meta:
        model = Dandiset
        fields = ["identifier", "name", "owners", "created"]


class DandisetCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=255)


class ArchiveSerializer(serializers.ModelSerializer[ZarrArchive]):
    dandiset = serializers.CharField(source="dandiset.identifier", read_only=True)
    s3_path = serializers.SerializerMethodField()
    s3_url = serializers.SerializerMethodField()
    checksum_status = serializers.SerializerMethodField()
    upload_in_progress = serializers.SerializerMethodField()
    shard_count = serializers.SerializerMethodField()

    class Meta:
        model = ZarrArchive
        fields = [
            "zarr_id",
            "name",
            "dandiset",
            "s3_path",
            "s3_url",
            "checksum",
            "checksum_status",
            "file_count",
            "size",
            "upload_in_progress",
            "frozen",
            "layout",
            "packing",
            "shard_count",
            "created",
            "modified",
        ]

    def get_s3_path(self, archive: ZarrArchive) -> str:
        return f"{settings.DANDIZARR_S3_BUCKET}/{archive.storage_prefix}"

    def get_s3_url(self, archive: ZarrArchive) -> str:
        if settings.DANDIZARR_STORAGE == "s3":
            endpoint = (
                settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL or settings.DANDIZARR_S3_ENDPOINT_URL
            )
            if endpoint:
                base = f"{endpoint.rstrip('/')}/{settings.DANDIZARR_S3_BUCKET}"
                return f"{base}/{archive.storage_prefix}"
            return (
                f"https://{settings.DANDIZARR_S3_BUCKET}.s3.amazonaws.com/{archive.storage_prefix}"
            )
        return f"{settings.PUBLIC_URL}/storage/{archive.storage_prefix}"

    def get_checksum_status(self, archive: ZarrArchive) -> str:
        pending = getattr(archive, "has_pending_batch", None)
        if pending is None:
            pending = archive.batches.filter(state="pending").exists()
        return "pending" if pending else "complete"

    def get_shard_count(self, archive: ZarrArchive) -> int:
        count = getattr(archive, "live_shards", None)
        if count is None:
            count = archive.shards.filter(state="live").count()
        return int(count)

    def get_upload_in_progress(self, archive: ZarrArchive) -> bool:
        open_batch = getattr(archive, "has_open_batch", None)
        if open_batch is None:
            open_batch = archive.batches.filter(state="open").exists()
        return bool(open_batch)


class ArchiveCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=255)
    dandiset = serializers.CharField(max_length=16)
    layout = serializers.CharField(max_length=16, required=False)


class AssetSerializer(serializers.ModelSerializer[Asset]):
    zarr_id = serializers.UUIDField(source="zarr.zarr_id", read_only=True)
    version = serializers.CharField(source="version.version", read_only=True)

    class Meta:
        model = Asset
        fields = ["asset_id", "path", "zarr_id", "metadata", "version", "created", "modified"]


class VersionSerializer(serializers.ModelSerializer[Version]):
    dandiset = serializers.CharField(source="dandiset.identifier", read_only=True)
    asset_count = serializers.SerializerMethodField()

    class Meta:
        model = Version
        fields = ["dandiset", "version", "created", "asset_count"]

    def get_asset_count(self, version: Version) -> int:
        return version.assets.count()
