"""The digests object stores speak: ETags without their quotes, md5 hex checked, and the
``Content-MD5`` header's base64 both ways."""

from __future__ import annotations

import base64
import binascii

from dandizarr.checksums import is_md5


def strip_etag(etag: str) -> str:
    """The ETag without the quotes HTTP puts around it (and without a weak ``W/`` marker)."""
    etag = etag.strip()
    if etag.startswith("W/"):
        etag = etag[2:]
    return etag.strip('"')


def check_md5_hex(md5_hex: str) -> str:
    """``md5_hex`` lower-cased; ValueError unless it is 32 hex digits."""
    normalized = md5_hex.strip().lower()
    if not is_md5(normalized):
        raise ValueError(f"not an md5 hex digest: {md5_hex!r}")
    return normalized


def content_md5_header(md5_hex: str) -> str:
    """The ``Content-MD5`` header value (base64 of the digest) for an md5 hex string."""
    return base64.b64encode(bytes.fromhex(check_md5_hex(md5_hex))).decode("ascii")


def md5_hex_from_content_md5(header: str) -> str:
    """The md5 hex of a ``Content-MD5`` header; ValueError when it is not base64 of 16 bytes."""
    try:
        digest = base64.b64decode(header.strip(), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"malformed Content-MD5: {header!r}") from error
    if len(digest) != 16:
        raise ValueError(f"malformed Content-MD5: {header!r}")
    return digest.hex()
