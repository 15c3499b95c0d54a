"""S3 bucket versioning for ``S3ObjectStore`` (dandizarr.objectstore.versions)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dandizarr.objectstore.base import DELETE_BATCH_SIZE, ObjectStoreError
from dandizarr.objectstore.digests import strip_etag

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Raw = tuple[str, str, str, int, bool, datetime]


def enable(client: S3Client, bucket: str) -> None:
    try:
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    except ClientError as error:
        raise ObjectStoreError(f"cannot enable versioning of {bucket}: {error}") from error


def enabled(client: S3Client, bucket: str) -> bool:
    try:
        return client.get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled"
    except ClientError as error:
        raise ObjectStoreError(f"versioning of {bucket}: {error}") from error


def raw_versions(client: S3Client, bucket: str, prefix: str) -> Iterator[Raw]:
    """``(key, version_id, etag, size, delete_marker, last_modified)``, keys in order, each
    key's versions newest first."""
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
    while True:
        try:
            page = client.list_object_versions(**params)
        except ClientError as error:
            raise ObjectStoreError(f"list versions {prefix!r}: {error}") from error
        entries: list[tuple[Raw, bool]] = [
            (
                (
                    v["Key"],
                    v["VersionId"],
                    strip_etag(v["ETag"]),
                    v["Size"],
                    False,
                    v["LastModified"],
                ),
                v["IsLatest"],
            )
            for v in page.get("Versions", [])
        ]
        entries += [
            ((m["Key"], m["VersionId"], "", 0, True, m["LastModified"]), m["IsLatest"])
            for m in page.get("DeleteMarkers", [])
        ]
        # A page lists versions and delete markers apart: merged, newest first per key.
        entries.sort(key=lambda e: (e[0][0], not e[1], -e[0][5].timestamp()))
        for raw, _ in entries:
            yield raw
        if not page.get("IsTruncated"):
            return
        params["KeyMarker"] = page["NextKeyMarker"]
        params["VersionIdMarker"] = page["NextVersionIdMarker"]


def delete(client: S3Client, bucket: str, versions: Iterable[tuple[str, str]]) -> None:
    iterator = iter(versions)
    while batch := list(islice(iterator, DELETE_BATCH_SIZE)):
        objects: Any = [{"Key": key, "VersionId": version_id} for key, version_id in batch]
        try:
            response = client.delete_objects(
                Bucket=bucket, Delete={"Objects": objects, "Quiet": True}
            )
        except ClientError as error:
            raise ObjectStoreError(f"delete of {len(batch)} versions failed: {error}") from error
        if errors := response.get("Errors"):
            raise ObjectStoreError(f"could not delete {len(errors)} versions: {errors[:5]}")


def restore(client: S3Client, bucket: str, key: str, version_id: str) -> None:
    """Make ``version_id`` current: delete the delete markers above it when nothing else is
    (a deleted object back, no byte moved); else a server-side copy of it onto the key."""
    above: list[Raw] = []
    for raw in raw_versions(client, bucket, key):
        if raw[0] != key:
            continue
        if raw[1] == version_id:
            break
        above.append(raw)
    else:
        raise ObjectStoreError(f"{key} has no version {version_id}")
    try:
        if not above:
            return  # current already
        if all(marker for _k, _v, _e, _s, marker, _m in above):
            delete(client, bucket, [(key, v) for _k, v, _e, _s, _marker, _m in above])
            return
        client.copy_object(
            Bucket=bucket,
            Key=key,
            CopySource={"Bucket": bucket, "Key": key, "VersionId": version_id},
        )
    except ClientError as error:
        raise ObjectStoreError(f"restoring {key} version {version_id}: {error}") from error
