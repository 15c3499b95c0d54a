"""What changed between two archive states, and what an upload would change, for ``dandizarr
diff`` and ``dandizarr upload --dry-run`` (issue #49): the service's diff route a page at a time,
and the same top-down walk of ``.checksum`` listings (``dandizarr.checksums.diff``) between an
archive's tree, read through the API a directory at a time, and a local tree's, hashed here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dandizarr.checksums import DirectoryEntry, DirectoryListing, FileEntry, compute_tree
from dandizarr.checksums.diff import Change, tree_changes
from dandizarr.client.api import ApiClient
from dandizarr.client.errors import NotFound


@dataclass
class Diff:
    """Changes from one state to another: paths (relative to the archive) and bytes."""

    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    bytes_added: int = 0  # of the files added, and of the modified ones' new content
    bytes_deleted: int = 0  # of the files deleted, and of the modified ones' old content

    def add(self, change: Change) -> None:
        getattr(self, change.kind).append(change.path)
        self.bytes_added += change.bytes_added
        self.bytes_deleted += change.bytes_deleted

    def add_page(self, page: dict[str, Any]) -> None:
        self.added += page["added"]
        self.modified += page["modified"]
        self.deleted += page["deleted"]
        self.bytes_added += int(page["bytes_added"])
        self.bytes_deleted += int(page["bytes_deleted"])

    def to_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "modified": self.modified,
            "deleted": self.deleted,
            "bytes_added": self.bytes_added,
            "bytes_deleted": self.bytes_deleted,
        }


def resolve_state(client: ApiClient, name: str) -> str:
    """The id a read goes by for ``ZARR_ID`` or ``ZARR_ID@VERSION`` (a version's number)."""
    zarr_id, _, version = name.partition("@")
    if not version:
        return zarr_id
    answer = client.get_json(f"/api/zarr/{quote(zarr_id, safe='')}/versions/{quote(version)}/")
    return str(answer["zarr_id"])


def service_diff(client: ApiClient, before: str, after: str) -> Diff:
    """The service's diff of two states (ids as ``resolve_state`` gives), every page."""
    diff = Diff()
    url: str | None = f"/api/zarr/{quote(before, safe='')}/diff/"
    params: dict[str, Any] | None = {"to": after, "limit": 10000}
    while url:
        page = client.get_json(url, params=params)
        diff.add_page(page)
        url, params = page.get("next"), None  # ``next`` carries the query
    return diff


class RemoteListings:
    """An archive's ``.checksum`` listings read through the API, a directory at a time (its
    every page); a path that is no directory reads as None."""

    def __init__(self, client: ApiClient, zarr_id: str) -> None:
        self.client, self.zarr_id = client, zarr_id

    def __call__(self, directory: str) -> DirectoryListing | None:
        listing = DirectoryListing()
        url: str | None = f"/api/zarr/{quote(self.zarr_id, safe='')}/tree/{quote(directory)}"
        params: dict[str, Any] | None = {"page_size": 1000}
        while url:
            try:
                page = self.client.get_json(url, params=params)
            except NotFound:
                return None
            if page.get("type") != "directory":
                return None
            for item in page["results"]:
                if item["type"] == "directory":
                    listing.set_directory(
                        DirectoryEntry(item["name"], item["digest"], int(item["size"]))
                    )
                else:
                    listing.set_file(FileEntry(item["name"], item["digest"], int(item["size"])))
            url, params = page.get("next"), None
        return listing


def local_listings(root: Path, *, jobs: int) -> dict[str, DirectoryListing]:
    """Every directory's listing of the local tree at ``root`` (each file hashed)."""
    from dandizarr.checksums.local import iter_local_paths, md5_files

    listings: dict[str, DirectoryListing] = {}
    compute_tree(
        md5_files(root, iter_local_paths(root), jobs=jobs), on_directory=listings.__setitem__
    )
    return listings


def upload_changes(
    client: ApiClient, root: Path, zarr_id: str | None, *, jobs: int
) -> Iterator[Change]:
    """What uploading ``root`` into the archive ``zarr_id`` (None: a new one) would change,
    computed from the two trees' listings, nothing sent."""
    local = local_listings(root, jobs=jobs)
    remote = RemoteListings(client, zarr_id) if zarr_id else (lambda directory: None)
    return tree_changes(remote, local.get)
