"""Presigned URLs of the S3 backend: PUTs bound to their Content-MD5, parts, GETs with the
user-bytes overrides, all signed by ``sigv4`` with one signing key a call (botocore's URLs byte
for byte; tests/objectstore/test_sigv4.py). Mixed into ``s3.S3ObjectStore``."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dandizarr.objectstore import sigv4
from dandizarr.objectstore.base import ObjectStoreError
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.user_bytes import S3_GET_OVERRIDES

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class S3Presigning:
    """The presigning half of ``S3ObjectStore`` (its clients, bucket, region and session)."""

    client: S3Client
    presign_client: S3Client
    bucket: str
    region: str
    _session: Any
    _presign_base: str | None
    _request_base: str | None

    def presigned_part_urls(
        self,
        key: str,
        upload_id: str,
        part_md5s: Sequence[str],
        *,
        expires_in: int,
        first_part: int = 1,
    ) -> builtins.list[str]:
        base, credentials = self._signer()
        return sigv4.presign_parts(
            base,
            key,
            upload_id,
            [content_md5_header(m) for m in part_md5s],
            credentials=credentials,
            region=self.region,
            expires_in=expires_in,
            first_part=first_part,
        )

    def presigned_put_url(self, key: str, md5_hex: str, *, expires_in: int) -> str:
        return self.presigned_put_urls([(key, md5_hex)], expires_in=expires_in)[0]

    def presigned_put_urls(
        self, items: Sequence[tuple[str, str]], *, expires_in: int
    ) -> builtins.list[str]:  # bare "list" is the method below
        """PUT URLs with Content-MD5 among the signed headers (SigV4 query signing).

        Signed by ``dandizarr.objectstore.sigv4`` with one signing key for the whole batch instead
        of
        botocore's per-call pipeline (endpoint rules, event handlers, key derivation): 500
        URLs in a few milliseconds. The URLs are byte-for-byte what ``generate_presigned_url``
        gives (a test checks).
        """
        base, credentials = self._signer()
        return sigv4.presign_puts(
            base,
            [(key, content_md5_header(md5_hex)) for key, md5_hex in items],
            credentials=credentials,
            region=self.region,
            expires_in=expires_in,
        )

    def presigned_put_urls_with_acl(
        self, keys: Sequence[str], acl: str, *, expires_in: int
    ) -> builtins.list[str]:
        base, credentials = self._signer()
        return sigv4.presign_puts_with_acl(
            base, keys, acl, credentials=credentials, region=self.region, expires_in=expires_in
        )

    def presigned_get_urls(self, keys: Sequence[str], *, expires_in: int) -> builtins.list[str]:
        """GET URLs signed as ``presigned_put_urls`` signs (botocore's URLs byte for byte)."""
        base, credentials = self._signer()
        return sigv4.presign_gets(
            base,
            keys,
            credentials=credentials,
            region=self.region,
            expires_in=expires_in,
            query=S3_GET_OVERRIDES,
        )

    def _signer(self, *, requests: bool = False) -> tuple[str, sigv4.Credentials]:
        """The object URL prefix and the credentials that sign for it: of URLs handed to
        clients (the presign endpoint), or with ``requests`` of requests sent from here (the
        endpoint this process reaches storage at)."""
        base = self._request_base if requests else self._presign_base
        if base is None:
            client = self.client if requests else self.presign_client
            # The object URL prefix (endpoint, addressing style, bucket) as botocore builds it.
            probe = client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": "probe"}, ExpiresIn=60
            )
            base = probe.split("?", 1)[0][: -len("probe")]
            if requests:
                self._request_base = base
            else:
                self._presign_base = base
        # The session's credentials, which its clients sign with (refreshable ones refresh here).
        credentials = self._session.get_credentials()
        frozen = credentials.get_frozen_credentials() if credentials is not None else None
        if frozen is None or frozen.access_key is None or frozen.secret_key is None:
            raise ObjectStoreError("no S3 credentials to sign URLs with")
        return base, sigv4.Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    def presigned_get_url(self, key: str, *, expires_in: int) -> str:
        # One signer for every URL handed out (botocore's URL byte for byte, and its clock the
        # one tests set: sigv4.signing_clock).
        return self.presigned_get_urls([key], expires_in=expires_in)[0]
