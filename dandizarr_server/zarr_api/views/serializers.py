"""Output shapes of the API, and the simple input shapes (larger bodies:
``dandizarr_server.zarr_api.parsers``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse
from rest_framework import serializers

from dandizarr_server.zarr_api.models import (
    Asset,
    Batch,
    Dandiset,
    Version,
    ZarrArchive,
)
from dandizarr_server.zarr_api.runtime.storage import bucket_path, prefix_url
from dandizarr_server.zarr_api.selectors.archive_state import archive_state
from dandizarr_server.zarr_api.selectors.archive_versions import archive_version_summary
from dandizarr_server.zarr_api.selectors.dandi import (
    asset_metadata,
    dandiset_summary,
)
from dandizarr_server.zarr_api.services.batch_rules import UploadTarget
from dandizarr_server.zarr_api.services.part_pages import PartPage


class StrictCharField(serializers.CharField):
    """A string, and only a string: ``"name": 5`` is a 400, not the name "5"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class DandisetSerializer(serializers.ModelSerializer[Dandiset]):
    identifier = serializers.CharField(read_only=True)
    owners: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        many=True, read_only=True, slug_field="username"
    )

    class Meta:
        model = Dandiset
        fields = ["identifier", "name", "owners", "created"]

    def to_representation(self, instance: Dandiset) -> dict[str, Any]:
        # The DANDI API's fields beside ours (draft_version, contact_person, ...).
        return {**dandiset_summary(instance), **super().to_representation(instance)}


class DandisetCreateSerializer(serializers.Serializer[Any]):
    name = StrictCharField(max_length=255)
    # Private until its owners release it (also ?embargo=true, as the DANDI API takes it).
    embargo = serializers.BooleanField(required=False, default=False)


class ArchiveSerializer(serializers.ModelSerializer[ZarrArchive]):
    dandiset = serializers.CharField(source="dandiset.identifier", read_only=True)
    s3_path = serializers.SerializerMethodField()
    s3_url = serializers.SerializerMethodField()
    checksum_status = serializers.SerializerMethodField()
    upload_in_progress = serializers.SerializerMethodField()
    shard_count = serializers.SerializerMethodField()
    page_url = serializers.SerializerMethodField()
    status = serializers.SerializerMethodField()
    version_count = serializers.SerializerMethodField()

    class Meta:
        model = ZarrArchive
        fields = [
            "zarr_id",
            "status",
            "name",
            "dandiset",
            "s3_path",
            "s3_url",
            "checksum",
            "checksum_status",
            "file_count",
            "size",
            "upload_in_progress",
            "generation",
            "version_count",
            "layout",
            "packing",
            "shard_count",
            "upload_urls_valid_until",
            "drift_count",
            "last_drift_at",
            "last_drift",
            "garbage",
            "created",
            "modified",
            "page_url",
        ]

    def get_page_url(self, archive: ZarrArchive) -> str:
        """The archive's page for people (tree browser, arrays, previews)."""
        return settings.PUBLIC_URL + reverse("page-archive", args=[archive.zarr_id])

    def to_representation(self, instance: ZarrArchive) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if (version := instance.as_of) is not None:
            # Read as of a published version: its figures, and which version it is.
            data.update(
                checksum=version.checksum,
                file_count=version.file_count,
                size=version.size,
                version=archive_version_summary(version),
            )
        return data

    def get_version_count(self, archive: ZarrArchive) -> int:
        """Published versions (GET versions/ lists them)."""
        return archive.published_versions

    def get_status(self, archive: ZarrArchive) -> str:
        return archive_state(archive).dandi_status

    def get_s3_path(self, archive: ZarrArchive) -> str:
        return bucket_path(archive.storage_prefix)

    def get_s3_url(self, archive: ZarrArchive) -> str:
        return prefix_url(archive.storage_prefix)

    def get_checksum_status(self, archive: ZarrArchive) -> str:
        return archive_state(archive).checksum_status

    def get_shard_count(self, archive: ZarrArchive) -> int:
        return archive_state(archive).live_shards

    def get_upload_in_progress(self, archive: ZarrArchive) -> bool:
        return archive_state(archive).upload_open


class ArchiveCreateSerializer(serializers.Serializer[Any]):
    name = StrictCharField(max_length=255)
    dandiset = StrictCharField(max_length=16)
    layout = StrictCharField(max_length=16, required=False)


class AssetSerializer(serializers.ModelSerializer[Asset]):
    zarr_id = serializers.SerializerMethodField()
    version = serializers.CharField(source="version.version", read_only=True)
    # The DANDI API's fields: the metadata as the server completes it, size, zarr, blob.
    metadata = serializers.SerializerMethodField()
    size = serializers.SerializerMethodField()
    zarr = serializers.SerializerMethodField()
    blob = serializers.SerializerMethodField()

    class Meta:
        model = Asset
        fields = [
            "asset_id",
            "path",
            "zarr_id",
            "metadata",
            "version",
            "created",
            "modified",
            "size",
            "zarr",
            "blob",
        ]

    def get_metadata(self, asset: Asset) -> dict[str, Any]:
        return asset_metadata(asset)

    def get_zarr_id(self, asset: Asset) -> str:
        """A published asset's: its archive version's own id (what DANDI clients read it by)."""
        if asset.archive_version is not None:
            return str(asset.archive_version.version_id)
        return str(asset.zarr.zarr_id)

    def get_zarr(self, asset: Asset) -> str:
        return self.get_zarr_id(asset)

    def get_size(self, asset: Asset) -> int:
        held = asset.archive_version or asset.zarr
        return held.size

    def get_blob(self, asset: Asset) -> None:
        return None


class VersionSerializer(serializers.ModelSerializer[Version]):
    dandiset = serializers.CharField(source="dandiset.identifier", read_only=True)
    asset_count = serializers.SerializerMethodField()

    class Meta:
        model = Version
        fields = ["dandiset", "version", "created", "asset_count"]

    def get_asset_count(self, version: Version) -> int:
        return version.assets.count()


class BatchSerializer(serializers.ModelSerializer[Batch]):
    files = serializers.SerializerMethodField()
    shards = serializers.SerializerMethodField()

    class Meta:
        model = Batch
        fields = [
            "id",
            "kind",
            "state",
            "error",
            "note",
            "files",
            "shards",
            "created",
            "completed",
            "applied",
        ]

    def get_files(self, batch: Batch) -> int:
        return batch.files.count()

    def get_shards(self, batch: Batch) -> int:
        return batch.shards.count()


def part_page_data(page: PartPage) -> dict[str, Any]:
    """A page of a big file's part URLs (docs/api.md, "Big files"): ``part_urls[i]`` is part
    ``first_part + i``'s; ``next_part`` the first it does not reach (null: none left)."""
    return {
        "batch": page.batch,
        "part_size": page.part_size,
        "part_count": page.part_count,
        "first_part": page.first_part,
        "part_urls": page.urls,
        "next_part": page.next_part,
    }


def upload_target_data(target: UploadTarget) -> dict[str, Any]:
    """A file's entry of a start's (or add's) answer: its URL, or its first page of parts."""
    entry: dict[str, Any] = {"path": target.path, "upload_url": target.upload_url}
    if target.parts is not None:
        entry |= part_page_data(target.parts)
    return entry
