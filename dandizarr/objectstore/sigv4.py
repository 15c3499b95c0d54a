"""AWS Signature Version 4 query signing of S3 PUT URLs that carry a signed Content-MD5, and
of GET URLs.

Pure library. botocore signs one request per call through its request pipeline (about 75 us a
URL); a batch asks for 500 URLs, all for one host, one date and one credential scope, so the
scope and the signing key are derived once here and each URL costs one SHA-256 and one HMAC.
The URLs are byte-for-byte botocore's (the tests compare them).

Reference: https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
SIGNED_HEADERS = "content-md5;host"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _utc_now() -> datetime:
    return datetime.now(UTC)


# When a URL is signed: its X-Amz-Date, from which it lives X-Amz-Expires seconds. A test sets
# it back to have storage refuse URLs as expired at once, with no wait.
signing_clock = _utc_now


def _encode(value: str, safe: str = "") -> str:
    """RFC 3986 percent-encoding as SigV4 (and botocore) does it: unreserved kept."""
    return quote(value, safe=safe + "-_.~")


def host_header(url: str) -> str:
    """The Host header a request to ``url`` sends: no default port, IPv6 in brackets."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None and parts.port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def presign_puts(
    object_base_url: str,
    items: Iterable[tuple[str, str]],
    *,
    credentials: Credentials,
    region: str,
    expires_in: int,
) -> list[str]:
    """Presigned PUT URLs for ``(key, content_md5_base64)`` pairs.

    ``object_base_url`` is the URL of the bucket's objects up to the key (``https://b.s3...``
    or ``http://endpoint/bucket/``); keys are appended percent-encoded with ``/`` kept. Every
    URL requires its ``Content-MD5`` header, so storage rejects any other body (BadDigest).
    """
    return _presign(
        "PUT",
        object_base_url,
        [(key, {"content-md5": content_md5.strip()}) for key, content_md5 in items],
        SIGNED_HEADERS,
        credentials=credentials,
        region=region,
        expires_in=expires_in,
    )


def presign_parts(
    object_base_url: str,
    key: str,
    upload_id: str,
    content_md5s: Iterable[str],
    *,
    credentials: Credentials,
    region: str,
    expires_in: int,
    first_part: int = 1,
) -> list[str]:
    """Presigned UploadPart URLs of ``key``'s multipart upload ``upload_id``, parts numbered
    ``first_part``, ``first_part + 1``, ... in the order of their ``content_md5s`` (base64),
    each required as ``presign_puts`` requires it."""
    return [
        _presign(
            "PUT",
            object_base_url,
            [(key, {"content-md5": content_md5.strip()})],
            SIGNED_HEADERS,
            credentials=credentials,
            region=region,
            expires_in=expires_in,
            query={"partNumber": str(number), "uploadId": upload_id},
        )[0]
        for number, content_md5 in enumerate(content_md5s, start=first_part)
    ]


def presign_puts_with_acl(
    object_base_url: str,
    keys: Iterable[str],
    acl: str,
    *,
    credentials: Credentials,
    region: str,
    expires_in: int,
) -> list[str]:
    """Presigned PUT URLs that require the header ``x-amz-acl: {acl}`` and no Content-MD5 (for
    clients that send that header and no md5: storage then checks no digest, so whoever hands
    out these URLs must verify what was stored)."""
    return _presign(
        "PUT",
        object_base_url,
        [(key, {"x-amz-acl": acl}) for key in keys],
        "host;x-amz-acl",
        credentials=credentials,
        region=region,
        expires_in=expires_in,
    )


def presign_gets(
    object_base_url: str,
    keys: Iterable[str],
    *,
    credentials: Credentials,
    region: str,
    expires_in: int,
    query: Mapping[str, str] | None = None,
) -> list[str]:
    """Presigned GET URLs (any ``Range`` header allowed) of ``keys``, as ``presign_puts``;
    ``query`` is signed into each (S3's ``response-*`` header overrides), before SigV4's own
    parameters as botocore orders them."""
    return _presign(
        "GET",
        object_base_url,
        [(key, {}) for key in keys],
        "host",
        credentials=credentials,
        region=region,
        expires_in=expires_in,
        query=query,
    )


def _presign(
    method: str,
    object_base_url: str,
    items: Iterable[tuple[str, dict[str, str]]],
    signed_headers: str,
    *,
    credentials: Credentials,
    region: str,
    expires_in: int,
    query: Mapping[str, str] | None = None,
) -> list[str]:
    """``method`` URLs of ``(key, {header: value})`` pairs, one signing key for all;
    ``signed_headers`` names those headers and ``host`` in SigV4's sorted, ``;``-joined form;
    ``query`` adds parameters of the request itself (signed like the rest)."""
    if expires_in <= 0:
        raise ValueError(f"expires_in must be positive, got {expires_in}")
    timestamp = signing_clock().strftime("%Y%m%dT%H%M%SZ")
    date = timestamp[:8]
    scope = f"{date}/{region}/s3/aws4_request"
    signing_key = _hmac(
        _hmac(_hmac(_hmac(f"AWS4{credentials.secret_key}".encode(), date), region), "s3"),
        "aws4_request",
    )
    parts = urlsplit(object_base_url)
    host = host_header(object_base_url)
    base_path = parts.path
    params = {
        **(query or {}),
        "X-Amz-Algorithm": ALGORITHM,
        "X-Amz-Credential": f"{credentials.access_key}/{scope}",
        "X-Amz-Date": timestamp,
        "X-Amz-Expires": str(expires_in),
        "X-Amz-SignedHeaders": signed_headers,
    }
    if credentials.token is not None:
        params["X-Amz-Security-Token"] = credentials.token
    # The URL keeps botocore's parameter order; the canonical form sorts them.
    encoded = [(_encode(k), _encode(v)) for k, v in params.items()]
    url_query = "&".join(f"{k}={v}" for k, v in encoded)
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted(encoded))
    string_to_sign_head = f"{ALGORITHM}\n{timestamp}\n{scope}\n"
    urls = []
    for key, headers in items:
        path = base_path + _encode(key, safe="/")
        canonical_headers = "".join(
            f"{name}:{value}\n" for name, value in sorted({**headers, "host": host}.items())
        )
        canonical_request = (
            f"{method}\n{path}\n{canonical_query}\n"
            f"{canonical_headers}\n"
            f"{signed_headers}\nUNSIGNED-PAYLOAD"
        )
        digest = hashlib.sha256(canonical_request.encode()).hexdigest()
        signature = hmac.new(
            signing_key, (string_to_sign_head + digest).encode(), hashlib.sha256
        ).hexdigest()
        urls.append(
            f"{parts.scheme}://{parts.netloc}{path}?{url_query}&X-Amz-Signature={signature}"
        )
    return urls
