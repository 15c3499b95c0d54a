"""The retry policy against a real HTTP server that fails on purpose."""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from dandizarr.client import AuthenticationError, DandizarrClient, NotFound, TransientError
from dandizarr.client.retry import (
    RetryCounter,
    RetryPolicy,
    is_transient_status,
    parse_retry_after,
    request_with_retry,
)
from tests.support.scripted_http import Reply, ScriptedServer, scripted_server

server = pytest.fixture(scripted_server)


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def policy(sleep: RecordingSleep) -> RetryPolicy:
    return RetryPolicy(attempts=5, backoff=0.01, jitter=0.0, sleep=sleep)


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def test_5xx_and_429_are_retried_until_success(
    server: ScriptedServer, session: requests.Session, policy: RetryPolicy, sleep: RecordingSleep
) -> None:
    server.replies = [Reply(503), Reply(502), Reply(429, headers={"Retry-After": "3"})]
    counter = RetryCounter()
    response = request_with_retry(session, "GET", server.url + "/x", policy, counter=counter)
    assert response.status_code == 200
    assert len(server.seen) == 4
    assert counter.count == 3
    # Exponential backoff, then the server's Retry-After instead of it.
    assert sleep.delays == [0.01, 0.02, 3.0]


def test_retries_run_out_with_a_clear_error(
    server: ScriptedServer, session: requests.Session, policy: RetryPolicy
) -> None:
    server.default = Reply(500, b"boom")
    with pytest.raises(TransientError, match=r"kept failing after 5 tries: HTTP 500"):
        request_with_retry(session, "PUT", server.url + "/x", policy, data=b"abc")
    assert len(server.seen) == 5


def test_client_errors_are_not_retried(
    server: ScriptedServer, session: requests.Session, policy: RetryPolicy
) -> None:
    server.replies = [Reply(400, b"bad")]
    response = request_with_retry(session, "POST", server.url + "/x", policy)
    assert response.status_code == 400
    assert len(server.seen) == 1


def test_every_try_gets_a_fresh_body(
    server: ScriptedServer, session: requests.Session, policy: RetryPolicy
) -> None:
    server.replies = [Reply(503), Reply(503)]
    made: list[int] = []

    def body() -> bytes:
        made.append(1)
        return b"payload-%d" % len(made)

    response = request_with_retry(session, "PUT", server.url + "/x", policy, body_factory=body)
    assert response.status_code == 200
    assert [s.body for s in server.seen] == [b"payload-1", b"payload-2", b"payload-3"]


def test_connection_errors_are_retried_then_reported(
    session: requests.Session, policy: RetryPolicy, sleep: RecordingSleep
) -> None:
    # A port nobody listens on: every try is refused.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransientError, match="kept failing after 5 tries"):
        request_with_retry(session, "GET", f"http://127.0.0.1:{port}/", policy)
    assert len(sleep.delays) == 4


def test_backoff_is_capped_and_jittered_within_bounds() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=5.0, jitter=0.25)
    for retry in range(1, 12):
        base = min(5.0, 2 ** (retry - 1))
        assert base * 0.75 <= policy.delay(retry) <= base * 1.25
    assert RetryPolicy(max_retry_after=10).delay(1, retry_after=999) == 10


def test_retry_after_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= (parse_retry_after(date, now=now) or 0) <= 31
    assert is_transient_status(503) and is_transient_status(429)
    assert not is_transient_status(403) and not is_transient_status(404)


def test_client_maps_statuses_to_errors_with_readable_messages(
    server: ScriptedServer, sleep: RecordingSleep
) -> None:
    policy = RetryPolicy(attempts=3, backoff=0.0, jitter=0.0, sleep=sleep)
    client = DandizarrClient(server.url, "wrong-token", jobs=2, retry=policy)
    server.replies = [
        Reply(503),
        Reply(401, {"detail": "Invalid token."}),
        Reply(404, {"detail": "No such archive."}),
    ]
    with pytest.raises(AuthenticationError) as auth:
        client.get_json("/api/info/")
    assert "rejected the credentials (Invalid token.)" in str(auth.value)
    assert "check the token" in str(auth.value) and auth.value.token_given
    assert server.seen[0].headers["Authorization"] == "Token wrong-token"
    with pytest.raises(NotFound, match="zarr archive abc does not exist"):
        client.get_archive("abc")
    client.close()


def test_storage_requests_never_carry_the_token(server: ScriptedServer) -> None:
    client = DandizarrClient(server.url, "secret", jobs=2)
    client.storage_session.put(server.url + "/bucket/key", data=b"x")
    client.api_session.get(server.url + "/api/info/")
    assert "Authorization" not in server.seen[0].headers
    assert server.seen[1].headers["Authorization"] == "Token secret"
    client.close()
