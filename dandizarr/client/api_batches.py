"""``BatchCalls``: the calls of the service's REST API that change an archive's files.

Upload batches, loose (a file per upload URL) and packed (a shard per upload URL, see
docs/sharded.md), from opening to completing or cancelling, and deleting files: what uploads
(``dandizarr.client.upload``) are built on. ``ApiClient`` (``dandizarr.client.api``) includes
these calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any
from urllib.parse import quote

import requests

from dandizarr.client.api_connection import DEFAULT_WAIT_SECONDS, ApiConnection, poll_until
from dandizarr.client.errors import ClientError
from dandizarr.client.progress import Progress


class BatchCalls(ApiConnection):
    """Upload batches of an archive, and deleting its files."""

    def has_open_batch(self, zarr_id: str) -> bool:
        """Whether the archive has a batch open (anyone's: the service does not say whose)."""
        response = self.request("GET", f"/api/zarr/{quote(zarr_id)}/upload/", expect=(204, 404))
        return response.status_code == 204

    def start_batch(self, zarr_id: str, entries: Sequence[tuple[str, str]]) -> list[str]:
        """Open a batch of ``(path, md5)``; returns the upload URLs in the same order."""
        return self._batch_urls(f"/api/zarr/{quote(zarr_id)}/upload/", entries)

    def add_to_batch(self, zarr_id: str, entries: Sequence[tuple[str, str]]) -> list[str]:
        """Add ``(path, md5)`` to our open batch; returns their upload URLs in order."""
        return self._batch_urls(f"/api/zarr/{quote(zarr_id)}/upload/add/", entries)

    def start_batch_in_parts(
        self, zarr_id: str, entries: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Open a batch of big files, each ``{"path", "etag", "size", "parts"}`` (docs/api.md,
        "Big files"); returns each file's ``{"path", "batch", "part_size", "part_count",
        "first_part", "part_urls", "next_part"}`` in order: its first page of part URLs at most
        (``part_urls`` for the next ones)."""
        return self._batch_answer(f"/api/zarr/{quote(zarr_id)}/upload/", entries)

    def add_in_parts(self, zarr_id: str, entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Declare big files (again) in our open batch: a file declared with the same parts
        keeps the parts it sent."""
        return self._batch_answer(f"/api/zarr/{quote(zarr_id)}/upload/add/", entries)

    def part_urls(self, zarr_id: str, batch: int, path: str, first_part: int) -> dict[str, Any]:
        """The page of part URLs of ``path``, a file our open ``batch`` sends in parts, from
        part ``first_part``: ``{"first_part", "part_urls", "next_part", ...}``."""
        answer: dict[str, Any] = self.request(
            "POST",
            f"/api/zarr/{quote(zarr_id)}/batches/{batch}/parts/",
            json={"path": path, "first_part": first_part},
        ).json()
        return answer

    def _batch_answer(
        self, endpoint: str, entries: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.request("POST", endpoint, json=list(entries)).json()
        if [a.get("path") for a in answer] != [e["path"] for e in entries]:
            raise ClientError("the server answered for other files than those declared")
        return answer

    def _batch_urls(self, endpoint: str, entries: Sequence[tuple[str, str]]) -> list[str]:
        body = [{"path": path, "etag": md5} for path, md5 in entries]
        response = self.request("POST", endpoint, json=body)
        urls = response.json()
        if len(urls) != len(entries):
            raise ClientError(
                f"the server answered {len(urls)} upload URLs for {len(entries)} files"
            )
        for (path, _), item in zip(entries, urls, strict=True):
            if item["path"] != path:
                raise ClientError(
                    f"the server answered an upload URL for {item['path']!r}, expected {path!r}"
                )
        return [item["upload_url"] for item in urls]

    def start_pack_batch(
        self, zarr_id: str, shards: Sequence[tuple[str, bytes | bytearray]]
    ) -> tuple[int, list[str]]:
        """Open a pack batch of shards, each given as its name and its declaration encoded as
        JSON (``{"name", "etag", "size", "members"}``, see docs/sharded.md; encoded, a batch of
        100,000 members takes no dict per member); returns the batch id and the upload URLs in
        the same order."""
        body = b'{"shards":[' + b",".join(encoded for _, encoded in shards) + b"]}"
        response = self.request(
            "POST",
            f"/api/zarr/{quote(zarr_id)}/upload/",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        del body
        answer = response.json()
        items = answer.get("shards") if isinstance(answer, dict) else None
        if not isinstance(items, list) or len(items) != len(shards):
            raise ClientError(
                f"the server answered {len(items) if isinstance(items, list) else 'no'} upload "
                f"URLs for {len(shards)} shards"
            )
        for (name, _), item in zip(shards, items, strict=True):
            if item.get("name") != name:
                raise ClientError(
                    f"the server answered an upload URL for shard {item.get('name')!r}, "
                    f"expected {name!r}"
                )
        return int(answer["batch"]), [item["upload_url"] for item in items]

    def get_batch(self, zarr_id: str, batch_id: int) -> dict[str, Any]:
        """A batch's record: ``{"id", "kind", "state", "error"}``."""
        result: dict[str, Any] = self.get_json(f"/api/zarr/{quote(zarr_id)}/batches/{batch_id}/")
        return result

    def wait_for_batch(
        self,
        zarr_id: str,
        batch_id: int,
        *,
        timeout: float = DEFAULT_WAIT_SECONDS,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Poll a batch until it is no longer open or pending (applied, failed, cancelled)."""
        return poll_until(
            lambda: self.get_batch(zarr_id, batch_id),
            lambda batch: batch.get("state") not in ("open", "pending"),
            timeout=timeout,
            still=lambda batch: (
                f"batch {batch_id} of zarr archive {zarr_id} is still {batch.get('state')}"
            ),
            waiting=f"waiting for the server to verify batch {batch_id}...",
            progress=progress,
        )

    def complete_batch(self, zarr_id: str) -> requests.Response:
        """POST complete; the 200 or the 400 (with ``missing``/``mismatched``) is returned."""
        return self.request(
            "POST", f"/api/zarr/{quote(zarr_id)}/upload/complete/", expect=(200, 400)
        )

    def cancel_batch(self, zarr_id: str) -> bool:
        """Cancel the open batch; False when none was open."""
        response = self.request("DELETE", f"/api/zarr/{quote(zarr_id)}/upload/", expect=(204, 404))
        return response.status_code == 204

    def delete_files(self, zarr_id: str, paths: Iterable[str]) -> None:
        """Delete files from the archive, at most ``batch_limit`` per request, ``paths`` read
        a request's worth at a time (``--sync`` streams them from a listing's column)."""
        limit = self.info().batch_limit
        remaining = iter(paths)
        while chunk := list(islice(remaining, limit)):
            self.request(
                "DELETE",
                f"/api/zarr/{quote(zarr_id)}/files/",
                json=[{"path": p} for p in chunk],
                expect=(204,),
            )
