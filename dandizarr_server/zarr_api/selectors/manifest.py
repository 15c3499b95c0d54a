"""The archive as a kerchunk reference set (version 1), for readers that go straight to storage.

``{"version": 1, "dandizarr": {...}, "refs": {path: [url] | [url, offset, length] | text}}``:
a loose file is ``[url]``, a packed file ``[shard_url, offset, length]``, an empty file and a
small Zarr metadata file are inlined (text, or ``base64:...``). URLs are presigned GETs that
expire (``dandizarr.expires``, and the ``X-Dandizarr-Expires`` header), or plain object URLs
when the bucket is public (``DANDIZARR_S3_PUBLIC_READ_URL``). Streamed: the tree is walked
in path order a page at a time, so an archive of a million files is never held at once.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from dandizarr.objectstore.signing import quote_key
from dandizarr.zarr_names import METADATA_FILE_NAMES
from dandizarr_server.zarr_api.domain.keys import file_key
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import files_below
from dandizarr_server.zarr_api.selectors.file_bytes import file_location
from dandizarr_server.zarr_api.selectors.shard_members import iter_member_bytes, member_locations

PAGE = 1000
INLINE_NAMES = METADATA_FILE_NAMES
INLINE_LIMIT = 64 << 10
# S3 signs GET URLs for at most a week.
MAX_EXPIRES_IN = 7 * 24 * 3600


@dataclass(frozen=True)
class Manifest:
    expires: datetime | None  # when the first URL expires; None when URLs do not expire
    chunks: Iterator[str]  # the JSON text, in pieces


def public_read_url(archive: ZarrArchive) -> str | None:
    """The public bucket's URL for the archive's objects: never for a private archive, whose
    objects are read with a signature only (docs/embargo.md)."""
    public: str | None = settings.DANDIZARR_S3_PUBLIC_READ_URL
    return None if archive.dandiset.is_private else public


def object_urls(public: str | None, expires_in: int) -> Callable[[list[str]], list[str]]:
    """How a reader reaches objects: the public bucket's URLs, else presigned GETs (signed
    together: a page of a thousand in milliseconds)."""
    if public:
        base = public.rstrip("/")
        return lambda keys: [f"{base}/{quote_key(key)}" for key in keys]
    store = get_store()
    return lambda keys: store.presigned_get_urls(keys, expires_in=expires_in)


def _inline(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text.encode("utf-8") == data and not text.startswith("base64:"):
        return text
    return "base64:" + base64.b64encode(data).decode("ascii")


def manifest(
    archive: ZarrArchive, prefix: str, *, expires_in: int, refresh_url: str, site_url: str = ""
) -> Manifest:
    """The reference set of every file below ``prefix`` ("" = the whole archive), keys being
    archive paths. ``site_url``: the service's own URL as the reader reaches it (a version's
    references point there; default: DANDIZARR_PUBLIC_URL)."""
    public = public_read_url(archive) is not None
    expires = None if public else datetime.now(UTC) + timedelta(seconds=expires_in)
    version = archive.as_of
    header: dict[str, Any] = {
        "zarr_id": str(archive.zarr_id),
        "checksum": archive.checksum if version is None else version.checksum,
        "prefix": prefix,
        "expires": expires.isoformat(timespec="seconds") if expires else None,
        "refresh": refresh_url,
    }
    if version is not None:
        header.update(version=version.number, version_id=str(version.version_id), expires=None)
        site = (site_url or settings.PUBLIC_URL).rstrip("/")
        return Manifest(None, _version_chunks(archive, prefix, header, site))
    return Manifest(expires, _chunks(archive, prefix, expires_in, header))


def _version_chunks(
    archive: ZarrArchive, prefix: str, header: dict[str, Any], site: str
) -> Iterator[str]:
    """A version's references point at the service's reads of the version (``/zarr/{version
    id}/``), which find the bytes wherever the draft left them: URLs that never expire."""
    assert archive.as_of is not None
    base = f"{site}/zarr/{archive.as_of.version_id}/"
    yield f'{{"version": 1, "dandizarr": {json.dumps(header)}, "refs": {{'
    separator = "\n"
    for node in files_below(archive, prefix):
        ref: str | list[str]
        if node.size == 0:
            ref = ""
        elif node.path.rsplit("/", 1)[-1] in INLINE_NAMES and node.size <= INLINE_LIMIT:
            ref = _inline(b"".join(iter_member_bytes(file_location(archive, node.path))))
        else:
            ref = [base + quote_key(node.path)]
        yield f"{separator}{json.dumps(node.path)}: {json.dumps(ref)}"
        separator = ",\n"
    yield "\n}}\n"


def _chunks(
    archive: ZarrArchive, prefix: str, expires_in: int, header: dict[str, Any]
) -> Iterator[str]:
    urls_of = object_urls(public_read_url(archive), expires_in)
    shard_urls: dict[str, str] = {}
    store = get_store()
    yield f'{{"version": 1, "dandizarr": {json.dumps(header)}, "refs": {{'
    separator = "\n"
    files = files_below(archive, prefix)
    while page := list(itertools.islice(files, PAGE)):
        members = member_locations(archive, (node.path for node in page))
        refs: dict[str, Any] = {}
        loose: list[str] = []
        for node in page:
            member = members.get(node.path)
            if node.size == 0:
                refs[node.path] = ""
            elif member is not None:
                refs[node.path] = [member.key, member.offset, member.length]
            elif node.path.rsplit("/", 1)[-1] in INLINE_NAMES and node.size <= INLINE_LIMIT:
                refs[node.path] = _inline(store.get(file_key(archive.zarr_id, node.path)))
            else:
                loose.append(node.path)
        new_shards = sorted({m.key for m in members.values()} - shard_urls.keys())
        shard_urls.update(zip(new_shards, urls_of(new_shards), strict=True))
        keys = [file_key(archive.zarr_id, path) for path in loose]
        refs.update((path, [url]) for path, url in zip(loose, urls_of(keys), strict=True))
        lines: list[str] = []
        for node in page:
            ref = refs[node.path]
            if isinstance(ref, list) and len(ref) == 3:
                ref = [shard_urls[ref[0]], ref[1], ref[2]]
            lines.append(f"{separator}{json.dumps(node.path)}: {json.dumps(ref)}")
            separator = ",\n"
        yield "".join(lines)
    yield "\n}}\n"
