"""``S3ObjectStore``'s reads of object bytes (``get_range``, ``read_range``,
``get_version_range``): presigned GETs over the client's connections (dandizarr.objectstore
.s3_gets), never a boto3 call, against moto and SeaweedFS, and against a scripted server for
the failures they do not make (retried as botocore retries them; a storage outage still
reads as one: 503 at the service's edge)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from dandizarr.objectstore import (
    InvalidRange,
    ObjectNotFound,
    ObjectStoreError,
    PreconditionFailed,
)
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr.objectstore.s3_puts import RETRIES
from dandizarr_server.zarr_api.edge.exceptions import unavailable_service
from tests.support.api import md5
from tests.support.scripted_http import Reply, ScriptedServer, error_body, scripted_store


def test_reads_are_exact_and_make_no_boto3_call(remote_store: S3ObjectStore) -> None:
    store = remote_store
    body = bytes(range(256)) * 40
    key = "g/sp ace/\u00fc+%20?#"
    store.put(key, body)
    store.put("g/empty", b"")
    calls: list[str] = []
    store.client.meta.events.register(
        "before-call.s3.*", lambda model, **_: calls.append(model.name)
    )
    assert store.get_range(key, 0) == body
    assert store.get_range(key, 7, 300) == body[7:300]
    assert store.get_range(key, len(body) - 5) == body[-5:]
    assert store.read_range(key, 3, 9, if_match=md5(body)) == (body[3:9], md5(body))
    assert calls == []
    # What storage refuses, as the interface says it.
    with pytest.raises(PreconditionFailed):
        store.read_range(key, 0, 4, if_match=md5(b"other"))
    with pytest.raises(ObjectNotFound):
        store.get_range("g/absent", 0, 4)
    # A start at the end is empty, past it refused (a HEAD tells them apart, as before).
    assert store.get_range(key, len(body)) == b""
    assert store.get_range("g/empty", 0) == b""
    with pytest.raises(InvalidRange):
        store.get_range(key, len(body) + 1)


def test_a_replaced_objects_version_reads_by_its_id(remote_store: S3ObjectStore) -> None:
    store = remote_store
    store.enable_versioning()
    store.put("v/k", b"first bytes")
    old = store.find_version("v/k", md5(b"first bytes"))
    assert old is not None
    store.put("v/k", b"second bytes")
    calls: list[str] = []
    store.client.meta.events.register(
        "before-call.s3.*", lambda model, **_: calls.append(model.name)
    )
    assert store.get_version_range("v/k", old.version_id, 0, 11) == b"first bytes"
    assert store.get_version_range("v/k", old.version_id, 6, 11) == b"bytes"
    assert store.get_version_range("v/k", old.version_id, 3, 3) == b""
    assert store.get_range("v/k", 0) == b"second bytes"
    assert calls == []


def test_transient_failures_are_retried_and_the_request_signed_for_each() -> None:
    with ScriptedServer() as server:
        server.replies = [
            Reply(503, error_body("SlowDown", "Please reduce your request rate.")),
            Reply(500, error_body("InternalError", "We encountered an internal error.")),
        ]
        server.default = Reply(206, b"abcd", {"ETag": '"e"'})
        store = scripted_store(server)
        assert store.read_range("d/k", 2, 6, if_match="e") == (b"abcd", "e")
    assert len(server.seen) == 3
    for seen in server.seen:
        assert seen.method == "GET"
        assert (seen.headers["Range"], seen.headers["If-Match"]) == ("bytes=2-5", '"e"')
        url = urlsplit(seen.path)
        assert url.path == "/bucket/d/k"
        assert parse_qs(url.query)["X-Amz-SignedHeaders"] == ["host"]


def test_storage_failing_for_good_is_unavailable_not_an_error_of_the_request() -> None:
    with ScriptedServer() as server:
        server.default = Reply(503, error_body("SlowDown", "Please reduce your request rate."))
        store = scripted_store(server)
        with pytest.raises(ObjectStoreError, match=r"get d/k: SlowDown \(HTTP 503\)") as caught:
            store.get_version_range("d/k", "v1", 0, 4)
    assert len(server.seen) == RETRIES + 1
    assert "versionId=v1" in server.seen[0].path
    assert unavailable_service(caught.value) == "storage"


def test_a_refusal_is_not_retried() -> None:
    with ScriptedServer() as server:
        server.default = Reply(403, error_body("AccessDenied", "Access Denied"))
        with pytest.raises(ObjectStoreError, match=r"get k: AccessDenied \(HTTP 403\)") as caught:
            scripted_store(server).get_range("k", 0, 4)
    assert len(server.seen) == 1
    assert unavailable_service(caught.value) is None
