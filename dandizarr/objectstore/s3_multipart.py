"""S3 multipart uploads for ``S3ObjectStore`` (dandizarr.objectstore.multipart)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dandizarr.objectstore.base import ObjectNotFound, ObjectStoreError
from dandizarr.objectstore.digests import strip_etag
from dandizarr.objectstore.multipart import UnfinishedUpload, UploadedPart
from dandizarr.objectstore.s3_errors import error_code, error_status, translate_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# An upload that is gone: completed, aborted, or never there.
NO_UPLOAD_CODES = {"NoSuchUpload", "NoSuchKey", "404"}


def _gone(error: ClientError) -> bool:
    return error_code(error) in NO_UPLOAD_CODES or error_status(error) == 404


def create(client: S3Client, bucket: str, key: str) -> str:
    try:
        return client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    except ClientError as error:
        raise translate_error(error, key) from error


def list_parts(client: S3Client, bucket: str, key: str, upload_id: str) -> list[UploadedPart]:
    params: dict[str, Any] = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
    parts: list[UploadedPart] = []
    while True:
        try:
            page = client.list_parts(**params)
        except ClientError as error:
            if _gone(error):
                raise ObjectNotFound(key) from error
            raise translate_error(error, key) from error
        parts.extend(
            UploadedPart(p["PartNumber"], strip_etag(p["ETag"]), p["Size"])
            for p in page.get("Parts", [])
        )
        if not page.get("IsTruncated"):
            return sorted(parts, key=lambda p: p.number)
        params["PartNumberMarker"] = page["NextPartNumberMarker"]


def complete(
    client: S3Client, bucket: str, key: str, upload_id: str, parts: Sequence[tuple[int, str]]
) -> str:
    try:
        response = client.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={
                "Parts": [{"PartNumber": n, "ETag": f'"{strip_etag(e)}"'} for n, e in parts]
            },
        )
    except ClientError as error:
        if _gone(error):
            raise ObjectNotFound(key) from error
        raise ObjectStoreError(f"completing the upload of {key}: {error}") from error
    return strip_etag(response["ETag"])


def abort(client: S3Client, bucket: str, key: str, upload_id: str) -> None:
    try:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except ClientError as error:
        if _gone(error):
            return
        raise ObjectStoreError(f"aborting the upload of {key}: {error}") from error


def unfinished(client: S3Client, bucket: str, prefix: str) -> Iterator[UnfinishedUpload]:
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        try:
            page = client.list_multipart_uploads(**params)
        except ClientError as error:
            raise ObjectStoreError(f"multipart uploads under {prefix!r}: {error}") from error
        for upload in page.get("Uploads", []):
            yield UnfinishedUpload(upload["Key"], upload["UploadId"], upload["Initiated"])
        if not page.get("IsTruncated"):
            return
        params["KeyMarker"] = page.get("NextKeyMarker", "")
        params["UploadIdMarker"] = page.get("NextUploadIdMarker", "")
