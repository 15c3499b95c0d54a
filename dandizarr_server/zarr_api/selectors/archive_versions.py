"""An archive's versions: the list, one by its number, the newest few, one version's summary,
and what changed between two."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from dandizarr.checksums import FileState
from dandizarr_server.zarr_api.models import ArchiveVersion, Asset, FileHistory, ZarrArchive
from dandizarr_server.zarr_api.parsers.identifiers import parse_row_id
from dandizarr_server.zarr_api.selectors.archive_contents import ArchiveSnapshot
from dandizarr_server.zarr_api.selectors.draft_trees import draft_tree_cached


def archive_versions(archive: ZarrArchive) -> QuerySet[ArchiveVersion]:
    """Its published versions (a write session's snapshot is no version of the archive's)."""
    published = ArchiveVersion.objects.filter(archive=archive, kind=ArchiveVersion.Kind.PUBLISHED)
    return published.order_by("number")


def archive_version_find(archive: ZarrArchive, number: str) -> ArchiveVersion | None:
    """The archive's version ``number`` (as a URL gives it), or None."""
    parsed = parse_row_id(number)
    return archive_versions(archive).filter(number=parsed).first() if parsed else None


def newest_versions(archive: ZarrArchive, count: int) -> tuple[list[ArchiveVersion], int]:
    """The newest ``count`` versions, oldest of them first, and how many are older."""
    versions = archive_versions(archive)
    newest = list(versions.order_by("-number")[:count])[::-1]
    older = versions.count() - len(newest) if len(newest) == count else 0
    return newest, older


def archive_version_summaries(versions: Sequence[ArchiveVersion]) -> list[dict[str, Any]]:
    """Versions as the API shows them; ``zarr_id`` is the id every read route takes for each.
    The dandiset versions naming them are read in one query for them all (a page of a list)."""
    named: dict[int, set[str]] = defaultdict(set)
    rows = Asset.objects.filter(archive_version__in=[v.pk for v in versions]).values_list(
        "archive_version_id", "version__version"
    )
    for archive_version_id, dandiset_version in rows:
        named[archive_version_id].add(dandiset_version)
    return [
        {
            "number": version.number,
            "zarr_id": str(version.version_id),
            "checksum": version.checksum,
            "file_count": version.file_count,
            "size": version.size,
            "created": version.created.isoformat(),
            "dandiset_versions": sorted(named[version.pk]),
        }
        for version in versions
    ]


def archive_version_summary(version: ArchiveVersion) -> dict[str, Any]:
    return archive_version_summaries([version])[0]


@dataclass(frozen=True)
class PathChange:
    path: str
    before: FileState | None
    after: FileState | None

    @property
    def kind(self) -> str:
        if self.before is None:
            return "added"
        return "removed" if self.after is None else "changed"


def _states_at(
    archive: ZarrArchive, generation: int, paths: list[str]
) -> dict[str, FileState | None]:
    """The state at ``generation`` of each of ``paths`` that has a row for it (the others are
    as the draft has them)."""
    found: dict[str, FileState | None] = {}
    for start in range(0, len(paths), 2000):
        rows = (
            FileHistory.objects.filter(
                archive=archive,
                until_generation__gte=generation,
                path__in=paths[start : start + 2000],
            )
            .order_by("path", "until_generation")
            .values_list("path", "present", "md5", "size")
        )
        for path, present, md5, size in rows:
            if path not in found:
                found[path] = FileState(size=size, md5=md5) if present else None
    return found


def version_changes(
    archive: ZarrArchive, older: ArchiveVersion, newer: ArchiveVersion | None
) -> list[PathChange]:
    """Every path whose file differs between ``older`` and ``newer`` (None: the draft as
    applied), in path order. Costs what changed since ``older``, never a walk of the tree."""
    candidates = FileHistory.objects.filter(archive=archive, until_generation__gte=older.generation)
    if newer is not None:
        candidates = candidates.filter(until_generation__lt=newer.generation)
    paths = sorted(set(candidates.values_list("path", flat=True)))
    before = _states_at(archive, older.generation, paths)
    after = _states_at(archive, newer.generation, paths) if newer is not None else {}
    # Without a row at ``newer``, a path has not changed since: it is as the draft has it.
    unresolved = [p for p in paths if p not in after]
    if unresolved:
        after.update(ArchiveSnapshot(draft_tree_cached(archive), {}).files_state(unresolved))
    return [PathChange(p, before[p], after[p]) for p in paths if before[p] != after[p]]
