"""The S3 backend (AWS, MinIO, moto), through one shared, thread-safe boto3 client."""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.httpsession import URLLib3Session

from dandizarr.objectstore import s3_gets, s3_multipart, s3_puts, s3_versions, sigv4
from dandizarr.objectstore.base import (
    DELETE_BATCH_SIZE,
    InvalidRange,
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    range_header,
    validate_range,
)
from dandizarr.objectstore.digests import content_md5_header, strip_etag
from dandizarr.objectstore.multipart import UnfinishedUpload, UploadedPart
from dandizarr.objectstore.s3_errors import (
    NOT_FOUND_CODES,
    error_code,
    error_status,
    translate_error,
)
from dandizarr.objectstore.s3_presigning import S3Presigning
from dandizarr.objectstore.s3_session import new_session
from dandizarr.objectstore.versions import ObjectVersion, with_replacement_times

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _http_session(client: S3Client) -> URLLib3Session:
    """The client's HTTP session: its connection pool, and the TLS verification, proxies and
    timeouts botocore resolved for it (arguments, config files, environment)."""
    session: URLLib3Session = client._endpoint.http_session  # type: ignore[attr-defined]
    return session


class S3ObjectStore(S3Presigning, ObjectStore):
    remote = True
    takes_multipart = True

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        presign_endpoint_url: str | None = None,
        max_pool_connections: int = 64,
        concurrency: int = 32,
        timeout: float = 60,  # seconds a connection or a read may wait (botocore's default)
        retries: int = s3_puts.RETRIES,  # of a failed request, after its first try
    ) -> None:
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.presign_endpoint_url = presign_endpoint_url
        self.concurrency = concurrency
        self._session = new_session(access_key_id, secret_access_key)
        limits = Config(
            connect_timeout=timeout,
            read_timeout=timeout,
            # botocore's "max_attempts" here counts the retries, not the first try.
            retries={"mode": "standard", "max_attempts": retries},
        )
        self.client = self._make_client(
            self._session, endpoint_url, region, max(max_pool_connections, concurrency), limits
        )
        # Signing is local computation, but the signature covers the Host header: URLs handed to
        # clients must be signed for the address the clients use.
        self.presign_client = (
            self._make_client(self._session, presign_endpoint_url, region, 1, limits)
            if presign_endpoint_url
            else self.client
        )
        self.region = region
        # The object URL prefixes: of URLs handed to clients, and of requests sent from here.
        self._presign_base: str | None = None
        self._request_base: str | None = None

    @staticmethod
    def _make_client(
        session: boto3.session.Session,
        endpoint_url: str | None,
        region: str,
        max_pool_connections: int,
        limits: Config,
    ) -> S3Client:
        config = Config(
            region_name=region,
            # SigV4 puts Content-MD5 into the signed headers of a presigned PUT.
            signature_version="s3v4",
            # Batch methods run ``concurrency`` requests at once; a smaller pool would queue them.
            max_pool_connections=max_pool_connections,
            # Custom endpoints (MinIO, moto) have no per-bucket DNS names.
            s3={"addressing_style": "path" if endpoint_url else "auto"},
            # The newer default adds CRC32 checksum headers to uploads and presigned URLs, which
            # S3-compatible servers do not all accept; integrity comes from Content-MD5 instead.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ).merge(limits)
        client: S3Client = session.client("s3", endpoint_url=endpoint_url, config=config)
        return client

    def __repr__(self) -> str:
        return f"S3ObjectStore(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r})"

    # --- writes ---------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> ObjectInfo:
        md5_hex = hashlib.md5(data, usedforsecurity=False).hexdigest()
        extra: dict[str, Any] = {"ContentType": content_type} if content_type else {}
        try:
            # Content-MD5 makes S3 reject a body corrupted on the way.
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ContentMD5=content_md5_header(md5_hex),
                **extra,
            )
        except ClientError as error:
            raise ObjectStoreError(f"put {key}: {error}") from error
        return ObjectInfo(key=key, size=len(data), etag=strip_etag(response["ETag"]))

    def put_many(self, items: Mapping[str, bytes]) -> None:
        """Concurrent PUTs of presigned URLs over the client's connections, without botocore's
        per-call pipeline (``s3_puts``): less than half the CPU of a ``put`` each."""
        http = _http_session(self.client)

        def put_one(pair: tuple[str, bytes]) -> None:
            key, data = pair
            md5_hex = hashlib.md5(data, usedforsecurity=False).hexdigest()
            content_md5 = content_md5_header(md5_hex)

            def sign() -> str:
                base, credentials = self._signer(requests=True)
                return sigv4.presign_puts(
                    base,
                    [(key, content_md5)],
                    credentials=credentials,
                    region=self.region,
                    expires_in=s3_puts.URL_EXPIRES_IN,
                )[0]

            s3_puts.put_object(http, sign, key, data, content_md5)

        self.map_requests(put_one, builtins.list(items.items()))

    def delete_many(self, keys: Iterable[str]) -> None:
        iterator = iter(keys)
        failed: list[str] = []
        while batch := list(islice(iterator, DELETE_BATCH_SIZE)):
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
                )
            except ClientError as error:
                raise ObjectStoreError(f"delete of {len(batch)} keys failed: {error}") from error
            # Quiet mode reports only the failures; absent keys are not failures.
            failed.extend(
                f"{item.get('Key')} ({item.get('Code')}: {item.get('Message')})"
                for item in response.get("Errors", [])
            )
        if failed:
            raise ObjectStoreError(f"could not delete {len(failed)} keys: {', '.join(failed)}")

    # --- reads ----------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            raise translate_error(error, key) from error
        return response["Body"].read()

    def read_range(
        self, key: str, start: int, end: int | None = None, *, if_match: str | None = None
    ) -> tuple[bytes, str]:
        return self._read_range(key, start, end, if_match)

    def _read_range(
        self, key: str, start: int, end: int | None, if_match: str | None
    ) -> tuple[bytes, str]:
        validate_range(start, end)
        extra: dict[str, Any] = {}
        if if_match is not None:
            extra["IfMatch"] = f'"{strip_etag(if_match)}"'
        if end == start:
            # An empty range: S3 cannot express it, so check existence and bounds with a HEAD.
            info = self._head_checked(key, extra)
            if start > info.size:
                raise InvalidRange(f"{key}: start {start} is past the end ({info.size} bytes)")
            return b"", info.etag
        headers = {"If-Match": extra["IfMatch"]} if if_match is not None else {}
        if (header := range_header(start, end)) is not None:
            headers["Range"] = header
        try:
            return self._get(key, headers, if_match=if_match)
        except s3_gets.RangeRefused as error:
            # S3 refuses any range starting at or after the end, including every range of
            # an empty object; the interface only refuses a start *past* the end.
            info = self._head_checked(key, extra)
            if start < 0 or start == info.size:
                return b"", info.etag
            raise InvalidRange(
                f"{key}: start {start} is past the end ({info.size} bytes)"
            ) from error

    def _get(
        self, key: str, headers: Mapping[str, str], *, version_id: str | None = None, **kw: Any
    ) -> tuple[bytes, str]:
        """A GET of ``key`` (its version ``version_id``) presigned and sent over the client's
        connections (``s3_gets``): less than half the CPU of a ``get_object``."""
        query = {"versionId": version_id} if version_id is not None else None

        def sign() -> str:
            base, credentials = self._signer(requests=True)
            expiry = s3_puts.URL_EXPIRES_IN
            return sigv4.presign_gets(
                base, [key], credentials=credentials, region=self.region, expires_in=expiry,
                query=query,
            )[0]  # fmt: skip

        return s3_gets.get_object(_http_session(self.client), sign, key, headers, **kw)

    def _head_checked(self, key: str, extra: dict[str, Any]) -> ObjectInfo:
        """HEAD that raises ObjectNotFound / PreconditionFailed like the GET would have."""
        conditions = {"IfMatch": extra["IfMatch"]} if "IfMatch" in extra else {}
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=key, **conditions)
        except ClientError as error:
            raise translate_error(error, key, extra.get("IfMatch")) from error
        return ObjectInfo(key, response["ContentLength"], strip_etag(response["ETag"]))

    def iter_chunks(self, key: str, chunk_size: int = 8 << 20) -> Iterator[bytes]:
        # The request is made here, not on first iteration, so ObjectNotFound raises at call.
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            raise translate_error(error, key) from error
        body = response["Body"]

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(chunk_size)
            finally:
                body.close()

        return chunks()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if error_code(error) in NOT_FOUND_CODES or error_status(error) == 404:
                return None
            raise ObjectStoreError(f"head {key}: {error}") from error
        return ObjectInfo(key, response["ContentLength"], strip_etag(response["ETag"]))

    def list(
        self, prefix: str = "", *, start_after: str | None = None, page_size: int = 1000
    ) -> Iterator[ObjectInfo]:
        if not 1 <= page_size <= 1000:
            raise ValueError(f"page_size must be between 1 and 1000, got {page_size}")
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": page_size}
        if start_after:
            params["StartAfter"] = start_after
        previous = None
        while True:
            try:
                response = self.client.list_objects_v2(**params)
            except ClientError as error:
                raise ObjectStoreError(f"list {prefix!r}: {error}") from error
            for item in response.get("Contents", []):
                # SeaweedFS may repeat a page's last key first on the next page.
                if item["Key"] != previous:
                    previous = item["Key"]
                    yield ObjectInfo(item["Key"], item["Size"], strip_etag(item["ETag"]))
            if not response.get("IsTruncated"):
                return
            # The continuation token supersedes StartAfter on the following pages.
            params.pop("StartAfter", None)
            params["ContinuationToken"] = response["NextContinuationToken"]

    # --- versions (dandizarr.objectstore.s3_versions) --------------------------------------------

    def enable_versioning(self) -> None:
        s3_versions.enable(self.client, self.bucket)

    def versioning_enabled(self) -> bool:
        return s3_versions.enabled(self.client, self.bucket)

    def list_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        return with_replacement_times(s3_versions.raw_versions(self.client, self.bucket, prefix))

    def get_version_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        validate_range(start, end)
        if end == start:
            return b""
        headers = {"Range": f"bytes={start}-{end - 1}"}
        return self._get(key, headers, version_id=version_id)[0]

    def delete_versions(self, versions: Iterable[tuple[str, str]]) -> None:
        s3_versions.delete(self.client, self.bucket, versions)

    def restore_version(self, key: str, version_id: str) -> None:
        s3_versions.restore(self.client, self.bucket, key, version_id)

    # --- multipart uploads (dandizarr.objectstore.s3_multipart) --------------------------------

    def create_multipart_upload(self, key: str) -> str:
        return s3_multipart.create(self.client, self.bucket, key)

    def list_parts(self, key: str, upload_id: str) -> builtins.list[UploadedPart]:
        return s3_multipart.list_parts(self.client, self.bucket, key, upload_id)

    def complete_multipart_upload(
        self, key: str, upload_id: str, parts: Sequence[tuple[int, str]]
    ) -> str:
        return s3_multipart.complete(self.client, self.bucket, key, upload_id, parts)

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        s3_multipart.abort(self.client, self.bucket, key, upload_id)

    def list_multipart_uploads(self, prefix: str) -> Iterator[UnfinishedUpload]:
        return s3_multipart.unfinished(self.client, self.bucket, prefix)

    def warm_up(self) -> None:
        super().warm_up()
        # Their first calls ask botocore for the URL prefixes: 50 ms of CPU.
        self._signer()
        self._signer(requests=True)
