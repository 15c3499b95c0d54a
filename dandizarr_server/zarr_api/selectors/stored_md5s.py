"""The md5 of the bytes storage holds, from what a HEAD, a listing or a version listing says.

A single PUT's ETag is its md5. A multipart upload's ETag (``<hex>-<parts>``) is not: the
service knows the md5 of an object it completed once a worker proved it from the bytes
(``MultipartUpload`` rows, state proven). Every reader that compares storage with the tree asks
here instead of comparing ETags with md5s (docs/api.md, "Big files"). The proof itself reads
the bytes (``object_md5``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from dandizarr.checksums import is_md5
from dandizarr_server.zarr_api.models import Batch, MultipartUpload
from dandizarr_server.zarr_api.runtime.storage import get_store

# A composite ETag whose object's md5 is not (yet) proven.
UNPROVEN = "unproven"
# Bytes per ranged GET of a proof: large enough that a request's round trip is noise.
PROOF_BLOCK = 16 << 20
# Paths per IN (...) look-up.
_KEYS_PER_LOOKUP = 1000


def stored_md5s(objects: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """``{(key, etag): md5}`` of ``(key, etag)`` pairs storage reported: the ETag itself where it
    is an md5; the proven md5 of a multipart object; ``UNPROVEN`` for one completed by an
    upload whose proof is still to come; None for a composite ETag the service never made."""
    pairs = set(objects)
    found: dict[tuple[str, str], str | None] = {p: p[1] for p in pairs if is_md5(p[1])}
    composite = sorted(p for p in pairs if p not in found)
    for start in range(0, len(composite), _KEYS_PER_LOOKUP):
        chunk = composite[start : start + _KEYS_PER_LOOKUP]
        rows = MultipartUpload.objects.filter(
            key__in=[k for k, _ in chunk],
            state__in=[MultipartUpload.State.PROVEN, MultipartUpload.State.COMPLETED],
        ).values_list("key", "etag", "state", "md5")
        for key, etag, state, md5 in rows:
            proven = state == MultipartUpload.State.PROVEN
            if proven or found.get((key, etag)) is None:
                found[(key, etag)] = md5 if proven else UNPROVEN
    return {p: found.get(p) for p in pairs}


def proven_etags(key: str, md5: str) -> list[str]:
    """The ETags of the multipart objects at ``key`` whose bytes were proven to have ``md5``,
    newest first: how a reader finds a version of the key by md5."""
    rows = MultipartUpload.objects.filter(key=key, md5=md5, state=MultipartUpload.State.PROVEN)
    return list(dict.fromkeys(rows.order_by("-pk").values_list("etag", flat=True)))


def stored_md5(key: str, etag: str) -> str | None:
    return stored_md5s([(key, etag)])[(key, etag)]


def unproven_batches(archive_pk: int) -> set[int]:
    """Pending batches of the archive with a file sent in parts whose md5 is not proven yet:
    no tree update applies them (or what follows them) before it proves them."""
    return set(
        MultipartUpload.objects.filter(
            archive_id=archive_pk,
            batch__state=Batch.State.PENDING,
            state=MultipartUpload.State.COMPLETED,
        ).values_list("batch_id", flat=True)
    )


def object_md5(key: str, etag: str, size: int) -> str:
    """The md5 of the object at ``key`` read in ranges, each only while its ETag is ``etag``
    (PreconditionFailed once it was replaced)."""
    store = get_store()
    digest = hashlib.md5(usedforsecurity=False)
    for start in range(0, size, PROOF_BLOCK):
        data, _ = store.read_range(key, start, min(start + PROOF_BLOCK, size), if_match=etag)
        digest.update(data)
    return digest.hexdigest()
