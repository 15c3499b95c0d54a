"""The batch SigV4 presigner gives botocore's URLs byte for byte, for any key, endpoint shape
and credential kind (moto accepts any signature, so equality with botocore is the check), and
a batch of them uploads."""

from __future__ import annotations

import base64
import hashlib

import pytest
import requests
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from botocore.utils import percent_encode

from dandizarr.objectstore import sigv4
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr.objectstore.user_bytes import S3_GET_OVERRIDES

KEYS = ["zarr/abc/0/1", "zarr/x y/\u00e9+%~!*'()/\U0001f600", "a//b", "k?x=1#f", ".checksum"]


# botocore's names of S3_GET_OVERRIDES (get_object's parameters), to sign as botocore does.
GET_OVERRIDE_PARAMS = {
    "ResponseContentDisposition": S3_GET_OVERRIDES["response-content-disposition"],
    "ResponseContentType": S3_GET_OVERRIDES["response-content-type"],
}


def content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


def botocore_url(base: str, key: str, md5_b64: str, creds: sigv4.Credentials, region: str) -> str:
    request = AWSRequest(
        method="PUT", url=base + percent_encode(key, safe="/~"), headers={"Content-MD5": md5_b64}
    )
    boto = BotoCredentials(creds.access_key, creds.secret_key, creds.token)
    S3SigV4QueryAuth(boto, "s3", region, expires=600).add_auth(request)
    return str(request.url)


@pytest.mark.parametrize(
    "base",
    [
        "http://127.0.0.1:9000/bucket/",
        "https://bucket.s3.amazonaws.com/",
        "https://s3.example.org:443/bucket/",
        "http://[::1]:9000/bucket/",
        "https://minio.example.org:9443/Bucket.With.Dots/",
    ],
)
@pytest.mark.parametrize("token", [None, "session/token+with=odd&chars"])
def test_batch_urls_equal_botocores(base: str, token: str | None) -> None:
    creds = sigv4.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    items = [(key, content_md5(key.encode())) for key in KEYS]
    for _attempt in range(3):  # both carry the signing second; retry across a tick
        ours = sigv4.presign_puts(
            base, items, credentials=creds, region="eu-central-1", expires_in=600
        )
        reference = [botocore_url(base, k, m, creds, "eu-central-1") for k, m in items]
        if ours == reference:
            break
    assert ours == reference


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def botocore_presigned_put_url(
    store: S3ObjectStore, key: str, md5_hex: str, *, expires_in: int
) -> str:
    """The store's PUT URL through botocore's full pipeline (endpoint rules, event handlers)."""
    return store.presign_client.generate_presigned_url(
        "put_object",
        Params={"Bucket": store.bucket, "Key": key, "ContentMD5": content_md5_header(md5_hex)},
        ExpiresIn=expires_in,
        HttpMethod="PUT",
    )


def _store(s3_store: S3ObjectStore, endpoint: str) -> S3ObjectStore:
    """The moto store, or one addressing AWS (virtual-host URLs)."""
    if endpoint == "moto":
        return s3_store
    return S3ObjectStore("some-bucket", access_key_id="AKIAX", secret_access_key="secret")


@pytest.mark.parametrize("endpoint", ["moto", "aws"])
def test_s3_presigned_put_urls_are_botocores_byte_for_byte(
    s3_store: S3ObjectStore, endpoint: str
) -> None:
    store = _store(s3_store, endpoint)
    for key in ["zarr/abc/0/1", "zarr/x y/\u00e9+%~!*'()/\U0001f600", "a//b", "k?x=1#f"]:
        for _attempt in range(3):  # both carry the signing second; retry across a tick
            ours = store.presigned_put_url(key, md5(b"x"), expires_in=600)
            reference = botocore_presigned_put_url(store, key, md5(b"x"), expires_in=600)
            if ours == reference:
                break
        assert ours == reference


@pytest.mark.parametrize("endpoint", ["moto", "aws"])
def test_s3_presigned_get_urls_are_botocores_byte_for_byte(
    s3_store: S3ObjectStore, endpoint: str
) -> None:
    store = _store(s3_store, endpoint)
    for _attempt in range(3):  # both carry the signing second; retry across a tick
        ours = store.presigned_get_urls(KEYS, expires_in=600)
        reference = [
            store.presign_client.generate_presigned_url(
                "get_object",
                Params={"Bucket": store.bucket, "Key": key, **GET_OVERRIDE_PARAMS},
                ExpiresIn=600,
            )
            for key in KEYS
        ]
        if ours == reference:
            break
    assert ours == reference
    assert (
        store.presigned_get_url(KEYS[0], expires_in=600).split("X-Amz-Date")[0]
        == (ours[0].split("X-Amz-Date")[0])
    )


def test_expiry_must_be_positive() -> None:
    with pytest.raises(ValueError, match="expires_in"):
        sigv4.presign_puts(
            "http://h/b/",
            [("k", "x")],
            credentials=sigv4.Credentials("a", "b"),
            region="us-east-1",
            expires_in=0,
        )


def test_s3_accepts_a_batch_of_urls(moto_server: str, s3_bucket: str) -> None:
    store = S3ObjectStore(
        s3_bucket, endpoint_url=moto_server, access_key_id="testing", secret_access_key="testing"
    )
    bodies = {f"batch/{i}/\u00e9 {i}": f"body {i}".encode() for i in range(5)}
    urls = store.presigned_put_urls(
        [(k, hashlib.md5(b).hexdigest()) for k, b in bodies.items()], expires_in=600
    )
    assert len(set(urls)) == len(bodies)
    for (key, body), url in zip(bodies.items(), urls, strict=True):
        response = requests.put(url, data=body, headers={"Content-MD5": content_md5(body)})
        assert response.status_code == 200, response.text
        assert store.get(key) == body
