"""Every HTTP path of the client follows the one retry policy (``dandizarr.client.retry``),
against a real HTTP server that fails on purpose: the API client, a transfer PUT (the libcurl
engine of uploads), a transfer GET (downloads, on their event loop) and an ``ArchiveStore``
read. Each path is put through the same scenarios: what is retried (503 with Retry-After,
429, 425, 500, a reset connection), what is final (400, 403, 404, 507: one try, a clear
error) and the total time budget. The server counts the tries of each URL."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from zarr.core.buffer import default_buffer_prototype

from dandizarr.client import ApiClient, ApiError, ClientError, DandizarrClient, RetryPolicy
from dandizarr.client.digests import tree_checksum
from dandizarr.client.results import UploadResult
from dandizarr.client.retry import Attempts, is_transient_error, is_transient_status
from dandizarr.client.storage_puts import PutStatus, StoragePuts
from dandizarr.client.store import ArchiveStore
from dandizarr.client.upload_types import LocalFile
from tests.support.scripted_http import RESET, Reply, ScriptedServer, Seen, scripted_server

server = pytest.fixture(scripted_server)

DATA = b"zarr chunk bytes" * 64
MD5 = hashlib.md5(DATA).hexdigest()
ZARR_ID = "0d5b9be5-e626-4f6e-b6c4-21a6e1d0c6f3"


def fast(**changes: Any) -> RetryPolicy:
    """The policy with short waits (the tests sleep for real, as the transports do)."""
    return RetryPolicy(**{"attempts": 6, "backoff": 0.01, "jitter": 0.0, **changes})


@dataclass
class Outcome:
    ok: bool
    error: str = ""


# A path: given the server and a policy, one request through it, from the file's first URL
# (``/storage/f?v=1``; a fresh URL the service hands out is ``?v=2``, ...).
Path_ = Callable[[ScriptedServer, RetryPolicy, Path], Outcome]


def serve_the_api(server: ScriptedServer) -> None:
    """The service's side (never failing) for the paths that ask it where the bytes are."""
    urls = iter(range(1, 1000))
    entry = {"path": "f", "size": len(DATA), "digest": MD5}

    def route(seen: Seen) -> Reply | None:
        path = seen.path.split("?", 1)[0]
        if path == f"/api/zarr/{ZARR_ID}/":
            checksum = tree_checksum([("f", len(DATA), MD5)])
            archive = {"zarr_id": ZARR_ID, "name": "a", "dandiset": "000001"}
            return Reply(200, {**archive, "checksum": checksum, "file_count": 1, "size": 1024})
        if path == f"/api/zarr/{ZARR_ID}/tree/" and "recursive=true" in seen.path:
            url = f"{server.url}/storage/f?v={next(urls)}"
            return Reply(200, {"results": [{**entry, "download_url": url}], "next": None})
        if path == f"/api/zarr/{ZARR_ID}/tree/f":
            url = f"{server.url}/storage/f?v={next(urls)}"
            return Reply(200, {**entry, "type": "file", "download_url": url})
        return None

    server.route = route
    server.default = Reply(200, DATA)


def through_the_api(server: ScriptedServer, policy: RetryPolicy, tmp: Path) -> Outcome:
    server.default = Reply(200, {"version": "1", "batch_limit": 500, "storage": "s3"})
    with ApiClient(server.url, jobs=1, retry=policy) as client:
        try:
            client.get_json(server.url + "/storage/f?v=1")
        except ClientError as error:
            return Outcome(False, str(error))
    return Outcome(True)


def through_a_put(server: ScriptedServer, policy: RetryPolicy, tmp: Path) -> Outcome:
    (tmp / "f").write_bytes(DATA)
    with ApiClient(server.url, jobs=1, retry=policy) as client:
        puts = StoragePuts(client, UploadResult(server=server.url), 1)
        try:
            [outcome] = puts.put_files(
                tmp, [LocalFile("f", len(DATA), MD5)], [server.url + "/storage/f?v=1"]
            )
        finally:
            puts.close()
    return Outcome(outcome.status is PutStatus.OK, f"{outcome.status.value}: {outcome.error}")


class Messages:
    """A Progress that keeps what the download tells the user."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def start(self, total_files: int, total_bytes: int | None) -> None: ...
    def advance(self, files: int, nbytes: int) -> None: ...
    def batch(self, number: int, paths: Any) -> None: ...
    def close(self) -> None: ...

    def message(self, text: str) -> None:
        self.lines.append(text)


def through_a_get(server: ScriptedServer, policy: RetryPolicy, tmp: Path) -> Outcome:
    serve_the_api(server)
    told = Messages()
    with DandizarrClient(server.url, jobs=1, retry=policy) as client:
        try:
            client.download(ZARR_ID, tmp / "copy", progress=told)
        except ClientError as error:
            return Outcome(False, " | ".join([str(error), *told.lines]))
    assert (tmp / "copy" / "f").read_bytes() == DATA
    return Outcome(True)


def through_the_store(server: ScriptedServer, policy: RetryPolicy, tmp: Path) -> Outcome:
    serve_the_api(server)
    store = ArchiveStore(server.url, ZARR_ID, retry=policy)
    try:
        data = asyncio.run(store.get("f", default_buffer_prototype()))
    except ClientError as error:
        return Outcome(False, str(error))
    finally:
        store.close()
    assert data is not None and data.to_bytes() == DATA
    return Outcome(True)


PATHS: dict[str, Path_] = {
    "api": through_the_api,
    "put": through_a_put,
    "get": through_a_get,
    "store": through_the_store,
}


def tries_of(server: ScriptedServer, version: int = 1) -> list[Seen]:
    return [s for s in server.seen if s.path == f"/storage/f?v={version}"]


@pytest.fixture(params=sorted(PATHS))
def path(request: pytest.FixtureRequest) -> Iterator[Path_]:
    yield PATHS[request.param]


@pytest.mark.parametrize(
    "failure",
    [
        Reply(503, b"busy", {"Retry-After": "1"}),
        Reply(429, b"slow down"),
        Reply(425, b"too early"),
        Reply(500, b"oops"),
        Reply(RESET),
    ],
    ids=["503-retry-after", "429", "425", "500", "reset"],
)
def test_a_transient_failure_is_tried_again(
    server: ScriptedServer, path: Path_, failure: Reply, tmp_path: Path
) -> None:
    server.replies = [failure]
    outcome = path(server, fast(), tmp_path)
    assert outcome.ok, outcome.error
    first, second = tries_of(server)
    if "Retry-After" in failure.headers:  # waited what the server asked, not the backoff
        assert second.at - first.at >= 1.0


@pytest.mark.parametrize(
    ("status", "said"),
    [(400, "HTTP 400"), (403, "HTTP 403"), (404, "HTTP 404"), (507, "storage is full")],
)
def test_a_final_answer_is_one_try_and_a_clear_error(
    server: ScriptedServer, path: Path_, status: int, said: str, tmp_path: Path
) -> None:
    server.replies = [Reply(status, b"<Error><Code>Nope</Code></Error>")]
    outcome = path(server, fast(), tmp_path)
    assert len(tries_of(server)) == 1
    if status in (403, 404) and path in (through_a_get, through_the_store):
        # A refused storage URL is final for that URL; the service is asked for a fresh
        # one, once (the listing's may have expired), which works here.
        assert outcome.ok, outcome.error
        assert len(tries_of(server, 2)) == 1
        return
    assert not outcome.ok
    assert said in outcome.error
    if status == 403 and path is through_a_put:
        assert outcome.error.startswith("expired")  # the batch is started again for new URLs


def test_the_time_budget_ends_the_retries(
    server: ScriptedServer, path: Path_, tmp_path: Path
) -> None:
    server.replies = [Reply(503, b"down")] * 50
    policy = fast(attempts=50, backoff=0.3, max_elapsed=1.0)  # waits 0.3, 0.6, then over 1 s
    outcome = path(server, policy, tmp_path)
    assert not outcome.ok
    assert "kept failing after 3 tries" in outcome.error
    assert len(tries_of(server)) == 3


def test_the_policy_in_one_place() -> None:
    assert all(is_transient_status(s) for s in (408, 425, 429, 500, 502, 503, 504, 599))
    assert not any(is_transient_status(s) for s in (400, 401, 403, 404, 409, 501, 505, 507))
    attempts = Attempts(RetryPolicy(attempts=3, jitter=0.0, backoff=1.0))
    assert attempts.next_wait(status=404) is None and not attempts.exhausted
    assert attempts.next_wait(status=503, retry_after="7") == 7.0
    assert attempts.next_wait(error=ConnectionResetError()) is None and attempts.exhausted
    # No answer is worth another try; a local file that cannot be read, or a bad URL, is not.
    assert is_transient_error(ConnectionResetError()) and is_transient_error(TimeoutError())
    assert is_transient_error(requests.ConnectionError()) and is_transient_error(
        asyncio.IncompleteReadError(b"", 10)
    )
    assert not is_transient_error(FileNotFoundError()) and not is_transient_error(
        requests.exceptions.InvalidURL()
    )


def test_a_store_asks_the_service_through_the_api_client(server: ScriptedServer) -> None:
    """The store's calls to the service are the API client's: retried by its policy, its
    errors (``ApiError`` with the status) and its token."""
    serve_the_api(server)
    route = server.route
    failures = [Reply(503, b"", {"Retry-After": "0"}), Reply(403, {"detail": "not yours"})]

    def flaky(seen: Seen) -> Reply | None:
        if seen.path.startswith(f"/api/zarr/{ZARR_ID}/tree/") and failures:
            return failures.pop(0)
        return route(seen)

    server.route = flaky
    store = ArchiveStore(server.url, ZARR_ID, token="secret", retry=fast())
    try:
        with pytest.raises(ApiError) as refused:
            asyncio.run(store.exists("f"))
    finally:
        store.close()
    assert refused.value.status == 403 and "not yours" in str(refused.value)
    asked = [s for s in server.seen if s.path.startswith("/api/")]
    assert len(asked) == 3  # the archive, the 503, the 403: tried once more, then final
    assert all(s.headers["Authorization"] == "Token secret" for s in asked)
    assert store.client.retries.count == 1
