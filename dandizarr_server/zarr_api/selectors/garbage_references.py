"""What may reference a page of an archive's object versions, for the garbage collection
(services.garbage, which decides from it what goes): open batches' uploads, live shards, the
draft's tree and the FileHistory rows, and open write sessions' staged files, read in the one
safe order."""

from __future__ import annotations

from dataclasses import dataclass

from dandizarr.objectstore.versions import ObjectVersion
from dandizarr_server.zarr_api.domain.keys import files_prefix
from dandizarr_server.zarr_api.models import BUSY_STATES, BatchFile, FileHistory, Shard, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_contents import ArchiveSnapshot
from dandizarr_server.zarr_api.selectors.draft_trees import draft_tree_cached
from dandizarr_server.zarr_api.selectors.stored_md5s import stored_md5s
from dandizarr_server.zarr_api.selectors.write_sessions import staged_keys


@dataclass
class References:
    """What one page of versions may be referenced by."""

    history: set[tuple[str, str]]  # (key, md5) of loose files; (key, "") of shards
    draft: dict[str, str]  # loose key -> md5 the draft's tree has for its path
    writing: set[tuple[str, str]]  # (loose key, md5) a batch not yet applied writes
    live_shards: set[str]
    # (key, composite ETag) -> the md5 proven of that multipart object's bytes.
    md5_of: dict[tuple[str, str], str]
    # Files open write sessions staged (shard keys no Shard row has yet).
    staged: set[str]


def garbage_references(archive: ZarrArchive, page: list[ObjectVersion]) -> References:
    """What may reference the page's versions, read in the one safe order. A tree update
    commits its rows, then writes the tree's listings, then commits the tree with its batches
    applied. So: the batches not yet applied first, then the archive's row (whose version keys
    the listing cache), then the listings, then the rows: a change racing these reads is seen
    as a batch still writing, in the listings, or in the rows."""
    keys = sorted({v.key for v in page})
    loose_prefix = files_prefix(archive.zarr_id)
    paths = {k[len(loose_prefix) :]: k for k in keys if k.startswith(loose_prefix)}
    # Uploads not yet in the tree: open, or verified and waiting for their tree update.
    open_files = BatchFile.objects.filter(
        batch__archive=archive, batch__state__in=BUSY_STATES, path__in=list(paths)
    ).values_list("path", "md5")
    writing = {(paths[p], md5) for p, md5 in open_files}
    # Before the shards: a session committing meanwhile has its files' Shard rows by then.
    staged = staged_keys(archive, keys)
    live = Shard.objects.filter(archive=archive, key__in=keys).exclude(state=Shard.State.DISCARDED)
    live_shards = set(live.values_list("key", flat=True))
    archive = ZarrArchive.objects.get(pk=archive.pk)
    states = ArchiveSnapshot(draft_tree_cached(archive), {}).files_state(paths)
    draft = {paths[p]: s.md5 for p, s in states.items() if s is not None}
    rows = FileHistory.objects.filter(archive=archive, key__in=keys, present=True)
    history = {
        (key, "" if offset is not None else md5)
        for key, md5, offset in rows.values_list("key", "md5", "offset")
    }
    # Files sent in parts: their versions' ETags mapped to the md5s proven of their bytes.
    md5s = stored_md5s((v.key, v.etag) for v in page if not v.delete_marker)
    # SeaweedFS's version listing of a bucket without versioning gives a multipart object
    # another composite ETag than its HEAD does: the current object's is asked for then.
    strays = [v for v in page if v.latest and not v.delete_marker and md5s[(v.key, v.etag)] is None]
    heads = get_store().head_many([v.key for v in strays]) if strays else {}
    current = stored_md5s((i.key, i.etag) for i in heads.values() if i is not None)
    for v in strays:
        head = heads[v.key]
        if head is not None and head.size == v.size:
            md5s[(v.key, v.etag)] = current[(head.key, head.etag)]
    md5_of = {pair: md5 for pair, md5 in md5s.items() if md5 is not None and md5 != pair[1]}
    return References(history, draft, writing, live_shards, md5_of, staged)
