"""A backing service that is down: storage, the database or the broker.

Found by tests/production/test_faults_live.py: requests failed with 500 while S3 or the
database was unreachable, a batch completed while the broker was down was answered 500 although
it had committed, and a database connection cut by the server failed the next request that
reused it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from django.contrib.auth.models import User
from django.db import OperationalError, close_old_connections, connection
from kombu.exceptions import OperationalError as BrokerOperationalError
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import NotAuthenticated

from dandizarr.objectstore import ObjectStoreError
from dandizarr_server.celery import app
from dandizarr_server.zarr_api.edge.exceptions import NotFound, exception_handler
from dandizarr_server.zarr_api.models import Batch
from dandizarr_server.zarr_api.tasks import resume_stalled_tree_updates
from tests.support.api import Actor, upload
from tests.support.celery_worker import _drop_celery_caches
from tests.support.database import another_connection
from tests.support.processes import free_port
from tests.support.tree_check import assert_tree_matches_storage


def answer(error: Exception) -> tuple[int, dict[str, Any], str | None]:
    response = exception_handler(error, {})
    assert response is not None
    return response.status_code, dict(response.data), response.headers.get("Retry-After")


def wrapped(error: Exception) -> ObjectStoreError:
    """``error`` as objectstore re-raises it."""
    try:
        raise ObjectStoreError(f"list 'zarr/': {error}") from error
    except ObjectStoreError as wrapper:
        return wrapper


def s3_error(status: int, code: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "ListObjectsV2"
    )


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
        wrapped(s3_error(503, "SlowDown")),
        wrapped(s3_error(500, "InternalError")),
        OperationalError("terminating connection due to administrator command"),
        BrokerOperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    ],
    ids=["s3-refused", "s3-timeout", "s3-503", "s3-500", "database", "broker"],
)
def test_an_unavailable_backing_service_is_503_with_retry_after(error: Exception) -> None:
    status, body, retry_after = answer(error)
    assert status == 503
    assert "unavailable" in body["detail"]
    assert retry_after is not None and retry_after.isdigit()


def test_other_errors_keep_their_answers() -> None:
    assert answer(NotFound("no such thing"))[:2] == (
        404,
        {"detail": "no such thing", "code": "not_found"},
    )
    assert answer(NotAuthenticated())[0] == 401
    # A request S3 refuses (4xx) is no outage.
    assert exception_handler(wrapped(s3_error(403, "AccessDenied")), {}) is None
    assert exception_handler(ValueError("a bug"), {}) is None


@contextmanager
def broker_down() -> Iterator[None]:
    """Tasks go to a broker nobody listens on."""
    keys = ("broker_url", "task_always_eager")
    previous = {k: app.conf[k] for k in keys}
    app.conf.update(broker_url=f"redis://127.0.0.1:{free_port()}/0", task_always_eager=False)
    _drop_celery_caches()
    try:
        yield
    finally:
        app.conf.update(previous)
        _drop_celery_caches()


def test_a_batch_completed_while_the_broker_is_down_is_applied_by_the_resume_task(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    files = {"a/b": b"one", "c": b"two"}
    with broker_down():
        # The batch commits; its tree update cannot be queued, and the client is told the
        # truth: completed (not a 500 for a change that happened).
        response = upload(owner.client, zarr_id, files)
        assert response.status_code == 200, response.content
        assert response.json()["checksum_status"] == "pending"
    assert Batch.objects.get(archive__zarr_id=zarr_id, kind="upload").state == "pending"
    # Not stalled yet by the default age: nothing is requeued.
    assert resume_stalled_tree_updates() == 0
    settings.DANDIZARR_STALLED_UPDATE_SECONDS = 0
    assert resume_stalled_tree_updates() == 1  # tasks run inline here
    detail = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (detail["checksum_status"], detail["file_count"]) == ("complete", 2)
    assert_tree_matches_storage(zarr_id)


def test_a_connection_the_database_cut_is_replaced_before_reuse(transactional_db: None) -> None:
    assert User.objects.count() == 0
    backend_pid = connection.connection.info.backend_pid
    with another_connection(autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))
    # What Django does when the next request (or Celery task) starts.
    close_old_connections()
    assert User.objects.count() == 0
    assert connection.connection.info.backend_pid != backend_pid


def test_the_database_failing_in_a_middleware_is_503_not_a_500_page(
    transactional_db: None, client: Any
) -> None:
    """Found by the faults run: the database cut while the token middleware looked a token up
    (before any view, so before DRF's exception handler) gave Django's 500 page."""
    user = User.objects.create(username="reader")
    token = Token.objects.create(user=user)
    client.raise_request_exception = False
    with another_connection() as other:
        # The token table is locked elsewhere; our look-up gives up after 200 ms.
        other.execute("LOCK TABLE authtoken_token IN ACCESS EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 200")
        response = client.get("/api/dandisets/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 503, response.content
    assert response.json() == {
        "detail": "the service's database is unavailable; try again shortly",
        "code": "service_unavailable",
    }
    assert response["Retry-After"] == "5"
    # Nothing was changed by the refused request: the same one succeeds once the lock is gone.
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 0")
    assert client.get("/api/dandisets/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200
