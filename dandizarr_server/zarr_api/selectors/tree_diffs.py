"""What changed between two states of archives (drafts, versions, a session's snapshot), read
from their ``.checksum`` trees top-down (``dandizarr.checksums.diff``): a page of changes in
tree order, costing listing reads in proportion to the directories that changed."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from itertools import islice

from dandizarr.checksums.diff import Change, tree_changes
from dandizarr_server.zarr_api.models import ArchiveVersion, ZarrArchive
from dandizarr_server.zarr_api.runtime.kept_documents import keeping, kept
from dandizarr_server.zarr_api.selectors.archive_contents import archive_tree_cached
from dandizarr_server.zarr_api.selectors.archive_versions import archive_versions


@dataclass(frozen=True)
class DiffPage:
    changes: list[Change]
    # The last path of this page when more follow (the next page's ``after``), else None.
    next_after: str | None


def archives_diff(before: ZarrArchive, after: ZarrArchive, *, since: str, limit: int) -> DiffPage:
    """The changes from ``before`` to ``after`` (each as looked up: a draft as applied, or the
    version or snapshot it was looked up as) past the path ``since``, at most ``limit``."""
    changes = tree_changes(
        archive_tree_cached(before).read, archive_tree_cached(after).read, after=since
    )
    page = list(islice(changes, limit + 1))
    more = len(page) > limit
    return DiffPage(page[:limit], page[limit - 1].path if more else None)


@dataclass(frozen=True)
class VersionChanges:
    previous: ArchiveVersion
    page: DiffPage
    # Each kind's count among the first changes counted, and whether more changed than that.
    counts: dict[str, int]
    more_than_counted: bool


def changes_since_previous_version(
    archive: ZarrArchive, limit: int, counted: int
) -> VersionChanges | None:
    """For an archive looked up as a published version past the first: the first ``limit``
    changes since the version before it, and the count of each kind among the first
    ``counted`` (what the version's page shows: a walk of at most ``counted`` changes, however
    many the version made)."""
    version = archive.as_of
    if version is None or version.kind != ArchiveVersion.Kind.PUBLISHED or version.number < 2:
        return None
    previous = archive_versions(archive).filter(number__lt=version.number).last()
    if previous is None:
        return None
    # Two versions never change: what one page shows of them is walked once and kept for
    # every process (runtime.kept_documents), not walked again at every view.
    etag = f"version-changes/{previous.version_id}/{version.version_id}/{limit}/{counted}"
    if (held := kept(etag)) is not None:
        summary = json.loads(held)
    else:
        before = copy.copy(archive)
        before.as_of = previous
        walk = tree_changes(archive_tree_cached(before).read, archive_tree_cached(archive).read)
        found = list(islice(walk, max(limit, counted) + 1))
        counts = {kind: 0 for kind in ("added", "modified", "deleted")}
        for change in found[:counted]:
            counts[change.kind] += 1
        summary = {
            "shown": [dataclasses.astuple(c) for c in found[:limit]],
            "more_shown": len(found) > limit,
            "counts": counts,
            "more_counted": len(found) > counted,
        }
        for _ in keeping(etag, [json.dumps(summary)]):
            pass
    shown = [Change(*fields) for fields in summary["shown"]]
    following = shown[-1].path if shown and summary["more_shown"] else None
    return VersionChanges(
        previous, DiffPage(shown, following), summary["counts"], summary["more_counted"]
    )
