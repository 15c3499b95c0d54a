"""``BrowsingCalls``: the calls of the service's REST API that read an archive's tree.

Files with their sizes, md5s and (signed a page at a time) download URLs, single files and
directories, all from ``/api/zarr/{id}/tree/``: what downloads (``dandizarr.client.download``),
``dandizarr ls`` and an upload's comparison with the archive read. ``ApiClient``
(``dandizarr.client.api``) includes these calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from dandizarr.client.api_connection import ApiConnection
from dandizarr.client.errors import ClientError, NotFound
from dandizarr.client.models import DirectoryEntry, RemoteFile


class BrowsingCalls(ApiConnection):
    """An archive's files and directories, as the service lists them."""

    def _files_url(self, zarr_id: str, path: str) -> str:
        return f"/api/zarr/{quote(zarr_id)}/tree/{quote(path.strip('/'), safe='/')}"

    def iter_files(
        self, zarr_id: str, prefix: str = "", *, page_size: int | None = None, urls: bool = False
    ) -> Iterator[RemoteFile]:
        """Every file below ``prefix`` (a directory; empty for all), in path order; with
        ``urls``, each with its download URL (and shard range), signed a page at a time."""
        for page in self.iter_file_pages(zarr_id, prefix, page_size=page_size, urls=urls):
            yield from page

    def iter_file_pages(
        self, zarr_id: str, prefix: str = "", *, page_size: int | None = None, urls: bool = False
    ) -> Iterator[list[RemoteFile]]:
        """``iter_files`` a page (one request) at a time."""
        query = {"recursive": "true", "limit": page_size, "urls": "true" if urls else None}
        params: dict[str, Any] | None = {k: v for k, v in query.items() if v}
        url: str | None = self._files_url(zarr_id, prefix)
        while url:
            try:
                page = self.get_json(url, params=params)
            except NotFound:
                if prefix:
                    raise
                return  # an empty archive has no root yet
            yield [RemoteFile.from_json(item) for item in page["results"]]
            url, params = page.get("next"), None  # ``next`` carries the query

    def stat(self, zarr_id: str, path: str = "") -> dict[str, Any]:
        """The file's record, or the directory's first page (see ``iter_directory``)."""
        result: dict[str, Any] = self.get_json(self._files_url(zarr_id, path))
        return result

    def locate(self, zarr_id: str, path: str) -> RemoteFile:
        """A file with a freshly signed download URL (and its shard range, if packed)."""
        entry = self.stat(zarr_id, path)
        if entry.get("type") != "file":
            raise ClientError(f"{path} is not a file of {zarr_id}")
        return RemoteFile.from_json(entry)

    def iter_directory(
        self, zarr_id: str, path: str = "", *, page_size: int = 1000
    ) -> Iterator[DirectoryEntry]:
        """The entries of a directory: directories first, then files, each by name."""
        url: str | None = self._files_url(zarr_id, path)
        params: dict[str, Any] | None = {"page_size": page_size}
        while url:
            page = self.get_json(url, params=params)
            if page.get("type") == "file":
                raise ClientError(f"{path} is a file, not a directory")
            for item in page["results"]:
                yield DirectoryEntry(
                    type=item["type"],
                    name=item["name"],
                    path=item["path"],
                    size=int(item.get("size") or 0),
                    digest=item.get("digest"),
                )
            url, params = page.get("next"), None
