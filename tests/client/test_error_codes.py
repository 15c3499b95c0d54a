"""The client decides on the service's error ``code`` (docs/api.md), not on the words of its
``detail``; from a server older than codes, on the status alone. Its errors speak in the
library's terms; the command line's words name the flags."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dandizarr.client import (
    ApiClient,
    ArchiveNotSharded,
    AuthenticationError,
    BatchConflict,
    ClientError,
    Conflict,
    NotFound,
    OpenBatchLeft,
    RetryPolicy,
    TokenRequired,
)
from dandizarr.client.batch_session import BatchSession
from dandizarr.client.progress import NullProgress
from dandizarr.commands.client_messages import command_line_message
from tests.support.scripted_http import Reply, ScriptedServer, scripted_server

server = pytest.fixture(scripted_server)

ZID = "7a3c1a9e-1c5b-4e0a-9f3e-2d1b7c9a0e11"


@pytest.fixture
def client(server: ScriptedServer) -> ApiClient:
    return ApiClient(server.url, "token", jobs=2, retry=RetryPolicy(attempts=1))


@pytest.fixture
def session(client: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BatchSession:
    monkeypatch.setenv("DANDIZARR_STATE_DIR", str(tmp_path))
    return BatchSession(client, ZID, NullProgress(), wait_timeout=1.0)


def start(session: BatchSession, client: ApiClient) -> Callable[[], object]:
    return lambda: session.start(
        lambda: client.start_batch(ZID, [("x", "0" * 32)]), files=1, paths=["x"], kind="batch"
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"detail": "busy", "code": "open_batch_exists"}, BatchConflict),
        ({"detail": "an upload batch is read-only", "code": "version_read_only"}, Conflict),
        ({"detail": "upload batch in progress"}, BatchConflict),  # older server: the status
        (b"<html>409</html>", BatchConflict),
    ],
    ids=["open-batch", "other-code", "no-code", "not-json"],
)
def test_a_409_is_an_open_batch_by_its_code(
    server: ScriptedServer, client: ApiClient, body: object, expected: type[Conflict]
) -> None:
    server.replies = [Reply(409, body)]
    with pytest.raises(Conflict) as raised:
        client.request("POST", f"/api/zarr/{ZID}/upload/")
    assert type(raised.value) is expected


def test_a_conflict_that_is_no_open_batch_is_refused_whatever_its_words(
    server: ScriptedServer, client: ApiClient, session: BatchSession
) -> None:
    # The words name a batch; the code says the archive is loose. (Deciding on "batch" in the
    # detail, the client told this as another client's batch opened meanwhile.)
    server.replies = [
        Reply(409, {"detail": "shards go into a sharded batch only", "code": "archive_not_sharded"})
    ]
    with pytest.raises(ClientError) as raised:
        start(session, client)()
    assert not isinstance(raised.value, BatchConflict)
    assert "the server refused the batch: shards go into a sharded batch only" in str(raised.value)
    assert not session.journal.exists()


def test_an_open_batch_is_told_as_one_whatever_its_words(
    server: ScriptedServer, client: ApiClient, session: BatchSession
) -> None:
    server.replies = [Reply(409, {"detail": "occupé", "code": "open_batch_exists"})]
    with pytest.raises(BatchConflict, match="another client is uploading"):
        start(session, client)()


def test_a_404_completing_is_a_closed_batch_only_by_its_code(
    server: ScriptedServer, session: BatchSession
) -> None:
    server.replies = [Reply(404, {"detail": "none open", "code": "no_open_batch"})]
    assert session.complete(lambda missing: None, kind="batch") is None
    server.replies = [Reply(404, {"detail": "none open"})]  # an older server: the status
    assert session.complete(lambda missing: None, kind="batch") is None
    server.replies = [Reply(404, {"detail": "no zarr archive", "code": "not_found"})]
    with pytest.raises(NotFound, match="no zarr archive"):
        session.complete(lambda missing: None, kind="batch")


def test_a_batch_left_open_by_another_client_is_a_typed_error(
    server: ScriptedServer, session: BatchSession
) -> None:
    server.replies = [Reply(204)]  # GET upload/: a batch is open, and not in our journal
    with pytest.raises(OpenBatchLeft) as raised:
        session.settle_leftover(cancel_others=False)
    assert raised.value.zarr_id == ZID
    assert "cancel_open_batch" in str(raised.value)


def test_library_errors_name_no_flag_and_the_command_line_names_them(
    server: ScriptedServer,
) -> None:
    server.replies = [Reply(401, {"detail": "Invalid token.", "code": "authentication_failed"})]
    with (
        ApiClient(server.url, None, jobs=1, retry=RetryPolicy(attempts=1)) as anonymous,
        pytest.raises(AuthenticationError) as refused,
    ):
        anonymous.request("GET", "/api/info/")
    cases = {
        OpenBatchLeft(ZID, url=server.url): "--cancel-open-batch",
        refused.value: "give a token with --token or DANDIZARR_TOKEN",
        TokenRequired("uploading needs an API token"): "give --token or set DANDIZARR_TOKEN",
        ArchiveNotSharded(ZID, "loose"): "--pack needs a sharded archive",
    }
    for error, told in cases.items():
        assert "--" not in str(error), error
        assert told in command_line_message(error), command_line_message(error)
    assert "rejected the credentials (Invalid token.)" in command_line_message(refused.value)
    assert command_line_message(ClientError("as is")) == "as is"
