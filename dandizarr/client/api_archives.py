"""``ArchiveCalls``: the calls of the service's REST API about dandisets and zarr archives.

Finding, creating and waiting for archives (and the dandisets that hold them) is what every
upload and download starts with; the files inside an archive are read through ``api_browsing``
and written through ``api_batches``. ``ApiClient`` (``dandizarr.client.api``) includes these
calls.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dandizarr.client.api_connection import DEFAULT_WAIT_SECONDS, ApiConnection, poll_until
from dandizarr.client.errors import NotFound
from dandizarr.client.models import Archive
from dandizarr.client.progress import Progress


def _reworded(error: NotFound, message: str) -> NotFound:
    """The same 404, told as what was looked for."""
    return NotFound(
        message, status=error.status, method=error.method, url=error.url, body=error.body
    )


class ArchiveCalls(ApiConnection):
    """Dandisets and zarr archives: get, find, create, wait for the checksum."""

    # --- dandisets ---------------------------------------------------------------------------

    def get_dandiset(self, identifier: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self.get_json(f"/api/dandisets/{quote(identifier)}/")
        except NotFound as error:
            raise _reworded(
                error, f"dandiset {identifier} does not exist on {self.server}"
            ) from None
        return result

    def create_dandiset(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", "/api/dandisets/", json={"name": name}, expect=(201,)
        ).json()
        return result

    def ensure_draft_asset(self, dandiset: str, path: str, zarr_id: str) -> str | None:
        """The id of the asset at ``path`` of ``dandiset``'s draft naming archive ``zarr_id``,
        made when the draft has none there (as the ``dandi`` client adds a Zarr it uploaded);
        None when that path is another archive's asset (never replaced)."""
        assets = f"/api/dandisets/{quote(dandiset)}/versions/draft/assets/"
        for item in self.get_json(assets, params={"path": path}).get("results", []):
            if item.get("path") != path:
                continue  # ?path= is a prefix
            return str(item["asset_id"]) if item.get("zarr_id") == zarr_id else None
        created = self.request(
            "POST", assets, json={"path": path, "zarr_id": zarr_id, "metadata": {}}, expect=(201,)
        ).json()
        return str(created["asset_id"])

    # --- archives ----------------------------------------------------------------------------

    def get_archive(self, zarr_id: str) -> Archive:
        try:
            return Archive.from_json(self.get_json(f"/api/zarr/{quote(zarr_id)}/"))
        except NotFound as error:
            raise _reworded(
                error, f"zarr archive {zarr_id} does not exist on {self.server}"
            ) from None

    def find_archive(self, dandiset: str, name: str) -> Archive | None:
        page = self.get_json("/api/zarr/", params={"dandiset": dandiset, "name": name})
        for item in page.get("results", []):
            if item.get("name") == name and item.get("dandiset") == dandiset:
                return Archive.from_json(item)
        return None

    def create_archive(self, dandiset: str, name: str, *, layout: str | None = None) -> Archive:
        """A new archive; ``layout`` ``"sharded"`` stores chunk files in shards."""
        body = {"name": name, "dandiset": dandiset}
        if layout is not None:
            body["layout"] = layout
        response = self.request("POST", "/api/zarr/", json=body, expect=(201,))
        return Archive.from_json(response.json())

    def wait_for_checksum(
        self,
        zarr_id: str,
        *,
        timeout: float = DEFAULT_WAIT_SECONDS,
        progress: Progress | None = None,
    ) -> Archive:
        """Poll the archive until ``checksum_status`` is ``complete``; raise after ``timeout``."""
        return poll_until(
            lambda: self.get_archive(zarr_id),
            lambda archive: archive.checksum_status == "complete",
            timeout=timeout,
            still=lambda archive: (
                f"the checksum of zarr archive {zarr_id} is still {archive.checksum_status}"
            ),
            waiting="waiting for the server to update the archive's checksum...",
            progress=progress,
        )
