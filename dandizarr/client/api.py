"""``ApiClient``: one method per call of the service's REST API (docs/api.md), nothing more.

Upload and download build on it (``dandizarr.client.upload``, ``dandizarr.client.download``);
``DandizarrClient`` (``dandizarr.client.facade``) adds them as methods.

Two HTTP sessions: one for the service (with the token) and one for presigned storage URLs
(never with the token: it is not theirs to see, and S3 rejects a second authorization).
Both keep a connection pool as large as the number of parallel transfers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self, TypeVar
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter

from dandizarr import __version__
from dandizarr.client.errors import (
    ApiError,
    AuthenticationError,
    BatchConflict,
    ClientError,
    NotFound,
    PermissionDenied,
)
from dandizarr.client.models import Archive, DirectoryEntry, RemoteFile, ServiceInfo
from dandizarr.client.progress import Progress
from dandizarr.client.retry import RetryCounter, RetryPolicy, request_with_retry

DEFAULT_SERVER = "http://127.0.0.1:8000"
DEFAULT_JOBS = 32

_Polled = TypeVar("_Polled")


def make_session(pool_size: int, *, agent: str = "dandizarr-client") -> requests.Session:
    """A session with a pool of ``pool_size`` connections and no retries of its own."""
    session = requests.Session()
    # Retries are ours (RetryPolicy), not urllib3's, so they are counted and use fresh bodies.
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = f"{agent}/{__version__}"
    return session


def _body(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        text = response.text.strip()
        return text[:300] + ("..." if len(text) > 300 else "")


def _reworded(error: NotFound, message: str) -> NotFound:
    """The same 404, told as what was looked for."""
    return NotFound(
        message, status=error.status, method=error.method, url=error.url, body=error.body
    )


def _poll(
    fetch: Callable[[], _Polled],
    done: Callable[[_Polled], bool],
    *,
    timeout: float,
    still: Callable[[_Polled], str],
    waiting: str,
    progress: Progress | None,
) -> _Polled:
    """``fetch()`` until ``done``: every 50 ms for the first second (a tree update after an
    upload usually ends within it, and doubling waits would overshoot it by as much again),
    then backing off to 2 s; ClientError after ``timeout`` (``still`` says what the last
    answer was). ``waiting`` is told once the wait is long."""
    started = time.monotonic()
    deadline = started + timeout
    interval = 0.05
    told = False
    while True:
        answer = fetch()
        if done(answer):
            return answer
        if time.monotonic() >= deadline:
            raise ClientError(
                f"{still(answer)} after {timeout:.0f} s; the server's worker may be down or busy"
            )
        if not told and progress is not None and interval >= 1:
            progress.message(waiting)
            told = True
        time.sleep(interval)
        if time.monotonic() - started >= 1.0:
            interval = min(interval * 2, 2.0)


class ApiClient:
    """A client of one dandizarr service's REST API.

    ``server`` is the service's base URL; ``token`` is needed for writes. ``jobs`` is the
    number of parallel transfers (and the size of the connection pools).
    """

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        token: str | None = None,
        *,
        jobs: int = DEFAULT_JOBS,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
    ) -> None:
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.server = server.rstrip("/")
        self.token = token
        self.jobs = jobs
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.retries = RetryCounter()
        self.api_session = make_session(jobs + 4)
        if token:
            self.api_session.headers["Authorization"] = f"Token {token}"
        self.storage_session = make_session(jobs + 4)
        self._info: ServiceInfo | None = None

    @classmethod
    def from_env(
        cls,
        server: str | None = None,
        token: str | None = None,
        *,
        jobs: int = DEFAULT_JOBS,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
    ) -> Self:
        """Server and token from the arguments, else ``DANDIZARR_URL`` / ``DANDIZARR_TOKEN``."""
        return cls(
            server or os.environ.get("DANDIZARR_URL") or DEFAULT_SERVER,
            token or os.environ.get("DANDIZARR_TOKEN") or None,
            jobs=jobs,
            retry=retry,
            timeout=timeout,
        )

    def close(self) -> None:
        self.api_session.close()
        self.storage_session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.server}{path}"

    def request(
        self, method: str, path: str, *, expect: Sequence[int] = (200,), **kwargs: Any
    ) -> requests.Response:
        """Call the service; transient failures are retried, other errors raised as ApiError."""
        url = self.url(path)
        kwargs.setdefault("timeout", self.timeout)
        try:
            response = request_with_retry(
                self.api_session, method, url, self.retry, counter=self.retries, **kwargs
            )
        except requests.RequestException as error:  # not transient: bad URL, TLS, ...
            raise ClientError(f"cannot reach {self.server}: {error}") from error
        if response.status_code in expect:
            return response
        raise self._error(method, url, response)

    def _error(self, method: str, url: str, response: requests.Response) -> ApiError:
        status = response.status_code
        body = _body(response)
        detail = body.get("detail") if isinstance(body, dict) else body
        where = f"{method} {url.removeprefix(self.server)}"
        if status == 401:
            hint = (
                "check --token / DANDIZARR_TOKEN"
                if self.token
                else "give a token with --token or DANDIZARR_TOKEN"
            )
            return AuthenticationError(
                f"the server at {self.server} rejected the credentials ({detail}); {hint}",
                status=status,
                method=method,
                url=url,
                body=body,
            )
        classes: dict[int, type[ApiError]] = {
            403: PermissionDenied,
            404: NotFound,
            409: BatchConflict,
        }
        error_class = classes.get(status, ApiError)
        return error_class(
            f"{where}: HTTP {status}: {detail}", status=status, method=method, url=url, body=body
        )

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    # --- service and dandisets ---------------------------------------------------------------

    def info(self) -> ServiceInfo:
        if self._info is None:
            self._info = ServiceInfo.from_json(self.get_json("/api/info/"))
        return self._info

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
        self, zarr_id: str, *, timeout: float = 600.0, progress: Progress | None = None
    ) -> Archive:
        """Poll the archive until ``checksum_status`` is ``complete``; raise after ``timeout``."""
        return _poll(
            lambda: self.get_archive(zarr_id),
            lambda archive: archive.checksum_status == "complete",
            timeout=timeout,
            still=lambda archive: (
                f"the checksum of zarr archive {zarr_id} is still {archive.checksum_status}"
            ),
            waiting="waiting for the server to update the archive's checksum...",
            progress=progress,
        )

    # --- browsing ----------------------------------------------------------------------------

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

    # --- batches -----------------------------------------------------------------------------

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
        timeout: float = 600.0,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Poll a batch until it is no longer open or pending (applied, failed, cancelled)."""
        return _poll(
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

    def delete_files(self, zarr_id: str, paths: Sequence[str]) -> None:
        """Delete files from the archive, at most ``batch_limit`` per request."""
        limit = self.info().batch_limit
        for start in range(0, len(paths), limit):
            chunk = paths[start : start + limit]
            self.request(
                "DELETE",
                f"/api/zarr/{quote(zarr_id)}/files/",
                json=[{"path": p} for p in chunk],
                expect=(204,),
            )
