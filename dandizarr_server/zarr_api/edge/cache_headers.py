"""How long a read may be kept, and its revalidation (RFC 9110 section 13, RFC 9111): the one home
of the read routes' cache policy (``/zarr/`` files, shard indexes and listings, manifests, the
DANDI ``files`` listing).

- A version of an open dandiset never changes (docs/versions.md): ``public, max-age=31536000,
  immutable``, with a strong ETag and ``Last-Modified`` its publication. Any cache may keep it
  for good: no reader asks the service twice.
- A draft changes at any moment: ``no-cache`` (a cache keeps it but asks before each use) with
  a strong ETag and ``Last-Modified`` the archive's last change; ``If-None-Match`` and, without
  it, ``If-Modified-Since`` answer 304.
- A private (embargoed) dandiset's reads: ``private, no-cache``, never in a shared cache.
  Whatever an authenticated request gets is ``private`` and varies on its credentials besides
  (``zarr_api.edge.authentication``, for every route).

A 304 carries the headers the 200 would (validators, ``Cache-Control``, ``Vary``) and no body
type: no ``Content-Type`` at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.http import http_date, parse_http_date_safe

from dandizarr.objectstore.digests import strip_etag
from dandizarr_server.zarr_api.models import ZarrArchive

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
PRIVATE = "private, no-cache"


@dataclass(frozen=True)
class Validators:
    """One answer's strong ETag (unquoted), its ``Last-Modified`` and its ``Cache-Control``."""

    etag: str
    last_modified: datetime
    cache_control: str

    @property
    def immutable(self) -> bool:
        return self.cache_control == IMMUTABLE

    def headers(self) -> dict[str, str]:
        return {
            "ETag": f'"{self.etag}"',
            "Last-Modified": http_date(self.last_modified.timestamp()),
            "Cache-Control": self.cache_control,
        }


def read_policy(archive: ZarrArchive) -> str:
    """The ``Cache-Control`` of a read of ``archive`` as it was looked up (a version's id:
    ``archive.as_of``)."""
    # A link's reads are the link's alone: a shared cache would serve them past its
    # revocation (docs/embargo.md).
    if archive.dandiset.is_private or archive.through_link:
        return PRIVATE
    return IMMUTABLE if archive.as_of is not None else REVALIDATE


def read_validators(archive: ZarrArchive, etag: str) -> Validators:
    """``etag`` (a strong one: it changes whenever the bytes do) with the archive's time and
    policy: a version's publication, or the draft's last change."""
    version = archive.as_of
    changed = version.created if version is not None else archive.modified
    return Validators(etag, changed, read_policy(archive))


def read_state(archive: ZarrArchive) -> tuple[str, ...]:
    """What every document made of ``archive`` as it was looked up depends on: a version's id
    (it never changes), or the draft's committed tree version (its id, last change and root
    checksum: every tree update and audit moves them)."""
    if archive.as_of is not None:
        return ("version", str(archive.as_of.version_id))
    return ("draft", str(archive.zarr_id), archive.modified.isoformat(), archive.checksum)


def document_etag(*parts: str) -> str:
    """A strong ETag for a document made from ``parts`` (what determines every byte of it:
    the archive's state or a version's id, and the URL and format asked for) by this release
    of the service (another release may write the same document otherwise)."""
    text = "\0".join((settings.DANDIZARR_VERSION, *parts))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def etag_listed(header: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` / ``If-Match`` list names ``etag`` (or is ``*``)."""
    return any(t.strip() == "*" or strip_etag(t) == etag for t in header.split(","))


def is_not_modified(request: HttpRequest, validators: Validators) -> bool:
    """Whether a GET or HEAD is answered 304: ``If-None-Match`` names the ETag, or, without
    ``If-None-Match``, nothing changed since ``If-Modified-Since`` (RFC 9110 13.2.2; to the
    second, the header's precision)."""
    if request.method not in ("GET", "HEAD"):
        return False
    if (wanted := request.headers.get("If-None-Match")) is not None:
        return etag_listed(wanted, validators.etag)
    since = parse_http_date_safe(request.headers.get("If-Modified-Since", ""))
    return since is not None and int(validators.last_modified.timestamp()) <= since


def not_modified(validators: Validators, **headers: str) -> HttpResponse:
    """A 304: the headers the 200 would carry (``validators``', ``headers``), no body type."""
    response = HttpResponse(status=304, headers={**validators.headers(), **headers})
    del response["Content-Type"]
    return response
