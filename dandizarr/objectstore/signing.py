"""Presigned URLs of the local backend: HMAC-SHA256 over (method, key, md5, expiry).

Pure library (no Django): ``LocalObjectStore`` signs, the web app's storage view verifies.
The query string carries ``expires`` (unix seconds), ``md5`` (PUT only) and ``signature``.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from dandizarr.objectstore.digests import check_md5_hex

# Query parameter names.
EXPIRES = "expires"
MD5 = "md5"
ACL = "acl"
SIGNATURE = "signature"


def _signing_key(secret_key: str) -> bytes:
    # Derived, so a signature made here is useless to any other user of SECRET_KEY.
    return hashlib.sha256(b"dandizarr.objectstore.local:" + secret_key.encode()).digest()


def signature(
    secret_key: str, method: str, key: str, md5_hex: str, expires: int, acl: str = ""
) -> str:
    # Newlines cannot occur in a method, an md5, an ACL name or a number and the key (which may
    # hold any character) comes last, so distinct tuples never give the same message.
    acl_part = [f"acl={acl}"] if acl else []
    message = "\n".join([method.upper(), md5_hex, *acl_part, str(expires), key])
    return hmac.new(_signing_key(secret_key), message.encode(), hashlib.sha256).hexdigest()


def quote_key(key: str) -> str:
    """The key as a URL path (slashes kept, everything else outside RFC 3986's unreserved set
    percent-encoded as UTF-8)."""
    return quote(key, safe="/")


def presigned_url(
    base_url: str,
    secret_key: str,
    method: str,
    key: str,
    *,
    expires_in: int,
    md5_hex: str = "",
    acl: str = "",
    now: float | None = None,
) -> str:
    """``{base_url}/{key}?expires=...&md5=...&signature=...`` (``acl=`` instead of ``md5=``
    for a PUT that must carry that ``X-Amz-ACL`` header and no Content-MD5)."""
    if "\n" in acl:
        raise ValueError(f"not an ACL name: {acl!r}")
    if expires_in <= 0:
        raise ValueError(f"expires_in must be positive, got {expires_in}")
    if md5_hex:
        md5_hex = check_md5_hex(md5_hex)
    expires = int(time.time() if now is None else now) + expires_in
    params = {EXPIRES: str(expires)}
    if md5_hex:
        params[MD5] = md5_hex
    if acl:
        params[ACL] = acl
    params[SIGNATURE] = signature(secret_key, method, key, md5_hex, expires, acl)
    return f"{base_url.rstrip('/')}/{quote_key(key)}?{urlencode(params)}"


class Verdict(enum.Enum):
    OK = "ok"
    MISSING = "missing"  # no or malformed signature parameters
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Verified:
    verdict: Verdict
    # The signed md5 (PUT), lower-case hex; "" when none was signed.
    md5_hex: str = ""
    # The signed X-Amz-ACL a PUT must carry; "" when none was signed.
    acl: str = ""


def verify(
    secret_key: str,
    method: str,
    key: str,
    query: Mapping[str, str],
    *,
    now: float | None = None,
) -> Verified:
    """Check a request's query parameters against its method and key.

    The signature is checked before the expiry, so an expired-URL answer is only ever given
    for a URL this service really issued.
    """
    expires_raw = query.get(EXPIRES, "")
    given = query.get(SIGNATURE, "")
    md5_hex = query.get(MD5, "").lower()
    acl = query.get(ACL, "")
    if "\n" in acl or not (expires_raw.isascii() and expires_raw.isdigit()) or not given:
        return Verified(Verdict.MISSING)
    expires = int(expires_raw)
    expected = signature(secret_key, method, key, md5_hex, expires, acl)
    if not hmac.compare_digest(expected, given.lower()):
        return Verified(Verdict.BAD_SIGNATURE)
    if (time.time() if now is None else now) > expires:
        return Verified(Verdict.EXPIRED, md5_hex, acl)
    return Verified(Verdict.OK, md5_hex, acl)
