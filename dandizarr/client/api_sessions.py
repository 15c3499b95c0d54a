"""``SessionCalls``: the calls of the service's write sessions (docs/writing.md, docs/api.md
"Write sessions"): begin, stage files, delete paths, read the session's own changes, commit,
abort. ``ApiClient`` (``dandizarr.client.api``) includes them; ``ArchiveStore`` writes with
them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

from dandizarr.client.api_connection import ApiConnection
from dandizarr.client.errors import ClientError, Conflict


class SessionCalls(ApiConnection):
    """Write sessions of an archive."""

    def _session_path(self, zarr_id: str, session_id: str, rest: str = "") -> str:
        return f"/api/zarr/{quote(zarr_id, safe='')}/sessions/{quote(session_id, safe='')}/{rest}"

    def begin_session(self, zarr_id: str) -> dict[str, Any]:
        """A new write session on the archive's draft: ``{"session_id", "state", ...}``."""
        response = self.request(
            "POST", f"/api/zarr/{quote(zarr_id, safe='')}/sessions/", expect=(201,)
        )
        answer: dict[str, Any] = response.json()
        return answer

    def get_session(self, zarr_id: str, session_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.get_json(self._session_path(zarr_id, session_id))
        return answer

    def stage_files(
        self, zarr_id: str, session_id: str, files: Sequence[tuple[str, str, int]]
    ) -> list[str]:
        """Upload URLs for ``(path, md5, size)`` files of the session, in order (at most the
        service's ``batch_limit`` per call)."""
        response = self.request(
            "POST",
            self._session_path(zarr_id, session_id, "files/"),
            json=[{"path": p, "etag": m, "size": s} for p, m, s in files],
        )
        items = response.json()
        if [item.get("path") for item in items] != [p for p, _, _ in files]:
            raise ClientError("the service answered URLs for other paths than were asked for")
        return [str(item["upload_url"]) for item in items]

    def stage_deletions(self, zarr_id: str, session_id: str, paths: Sequence[str]) -> None:
        self.request(
            "POST",
            self._session_path(zarr_id, session_id, "deletions/"),
            json=[{"path": p} for p in paths],
            expect=(204,),
        )

    def session_change(
        self, zarr_id: str, session_id: str, path: str, *, urls: bool = False
    ) -> dict[str, Any] | None:
        """The session's change of ``path`` (``{"path", "deleted", "md5", "size",
        "download_url"?}``), or None when the session did not change it."""
        params = {"path": path, **({"urls": "true"} if urls else {})}
        answer = self.get_json(self._session_path(zarr_id, session_id, "changes/"), params=params)
        results: list[dict[str, Any]] = answer["results"]
        return results[0] if results else None

    def session_changes(
        self, zarr_id: str, session_id: str, prefix: str = ""
    ) -> Iterator[dict[str, Any]]:
        """Every change of the session below ``prefix`` (a key prefix), in path order."""
        url: str | None = self._session_path(zarr_id, session_id, "changes/")
        params: dict[str, Any] | None = {"prefix": prefix, "limit": 10_000}
        while url:
            answer = self.get_json(url, params=params)
            yield from answer["results"]
            url, params = answer.get("next"), None

    def begin_session_upload(
        self, zarr_id: str, session_id: str, path: str, size: int
    ) -> dict[str, Any]:
        """Open a big file of the session, sent in parts: ``{"upload", "part_size",
        "part_count", ...}`` (docs/writing.md, "Big files")."""
        answer: dict[str, Any] = self.request(
            "POST",
            self._session_path(zarr_id, session_id, "uploads/"),
            json={"path": path, "size": size},
            expect=(201,),
        ).json()
        return answer

    def session_part_urls(
        self, zarr_id: str, session_id: str, upload: int, first_part: int, md5s: Sequence[str]
    ) -> list[str]:
        """PUT URLs of parts ``first_part`` on of big file ``upload``, each bound to its md5."""
        answer = self.request(
            "POST",
            self._session_path(zarr_id, session_id, f"uploads/{upload}/parts/"),
            json={"first_part": first_part, "md5s": list(md5s)},
        ).json()
        urls = answer.get("part_urls")
        if answer.get("first_part") != first_part or not isinstance(urls, list):
            raise ClientError(f"the server answered no URLs for part {first_part}")
        if len(urls) != len(md5s):
            raise ClientError(f"the server answered {len(urls)} URLs for {len(md5s)} parts")
        return [str(u) for u in urls]

    def finish_session_upload(
        self, zarr_id: str, session_id: str, upload: int, md5: str
    ) -> dict[str, Any]:
        """Complete big file ``upload`` (its parts all sent) with its md5; staged then."""
        answer: dict[str, Any] = self.request(
            "POST",
            self._session_path(zarr_id, session_id, f"uploads/{upload}/finish/"),
            json={"etag": md5},
        ).json()
        return answer

    def commit_session(self, zarr_id: str, session_id: str) -> dict[str, Any]:
        """Commit: the session's record with the ``batch`` that applies it."""
        try:
            answer: dict[str, Any] = self.request(
                "POST", self._session_path(zarr_id, session_id, "commit/")
            ).json()
        except Conflict as error:
            # A try that timed out may have committed before this one came: the session's
            # record says so (committed, with its batch), and that commit is this one's.
            record = self.get_session(zarr_id, session_id)
            took = record.get("state") == "committed" and record.get("batch") is not None
            if error.code == "session_ended" and took:
                return record
            raise
        return answer

    def abort_session(self, zarr_id: str, session_id: str) -> None:
        self.request("DELETE", self._session_path(zarr_id, session_id), expect=(204,))
