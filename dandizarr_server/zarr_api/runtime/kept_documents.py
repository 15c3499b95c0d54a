"""Documents made once and kept: a version's listings, manifests and DANDI ``files`` pages.

A version never changes, so what a read makes of it (a page of its listing, its kerchunk
manifest) is the same bytes every time it is asked the same way. Each is kept in Django's cache
(``DANDIZARR_CACHE_URL``: Redis, which every web process sees; one process's memory without
it) under its strong ETag (``zarr_api.edge.cache_headers.document_etag`` of the version's id
and the URL and format asked for), for ``KEPT_SECONDS`` after its last making. A document longer
than ``DANDIZARR_KEPT_DOCUMENT_BYTES`` is streamed as it is made and not kept (a manifest of
a million files is never held at once).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from django.conf import settings
from django.core.cache import cache

# Unused documents leave the cache after this long (a version read again is made again).
KEPT_SECONDS = 7 * 24 * 3600
_PREFIX = "dandizarr:kept:"

# Documents made and documents served from the cache by this process (tests, benchmarks).
counts = {"made": 0, "kept": 0}


def _encoded(piece: str | bytes) -> bytes:
    return piece.encode("utf-8") if isinstance(piece, str) else piece


def kept(etag: str) -> bytes | None:
    """The kept document whose ETag is ``etag``, if it is kept."""
    found = cache.get(_PREFIX + etag)
    if isinstance(found, bytes):
        counts["kept"] += 1
        return found
    return None


def kept_document(etag: str, make: Iterable[str | bytes]) -> Iterator[bytes]:
    """The document whose ETag is ``etag``: the kept bytes, or ``make``'s pieces as they come
    (kept once the last came, if all of them fit ``DANDIZARR_KEPT_DOCUMENT_BYTES``)."""
    found = kept(etag)
    return iter((found,)) if found is not None else keeping(etag, make)


def keeping(etag: str, make: Iterable[str | bytes]) -> Iterator[bytes]:
    """``make``'s pieces as they come, kept under ``etag`` once the last came if all of them
    fit ``DANDIZARR_KEPT_DOCUMENT_BYTES``."""
    counts["made"] += 1
    limit: int = settings.DANDIZARR_KEPT_DOCUMENT_BYTES
    held: list[bytes] | None = []
    size = 0
    for piece in make:
        data = _encoded(piece)
        if held is not None:
            size += len(data)
            if size <= limit:
                held.append(data)
            else:
                held = None  # too long to keep: streamed only
        yield data
    if held is not None:
        cache.set(_PREFIX + etag, b"".join(held), KEPT_SECONDS)
