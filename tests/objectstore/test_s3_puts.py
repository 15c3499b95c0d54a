"""``S3ObjectStore.put_many``: presigned PUTs over the client's connections
(dandizarr.objectstore.s3_puts),
against moto and SeaweedFS, and against a scripted server for the failures they do not make."""

from __future__ import annotations

import socket
from urllib.parse import parse_qs, urlsplit

import pytest

from dandizarr.objectstore import ObjectInfo, ObjectStoreError
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.s3 import S3ObjectStore, _http_session
from dandizarr.objectstore.s3_puts import (
    EXPECT_CONTINUE_FROM,
    RETRIES,
    URL_EXPIRES_IN,
    Failure,
    put_object,
    retry_delay,
)
from tests.support import seaweedfs as seaweedfs_credentials
from tests.support.api import md5
from tests.support.scripted_http import Reply, ScriptedServer, error_body, scripted_store
from tests.support.seaweedfs import SeaweedS3


def test_put_many_stores_the_bytes_without_a_boto3_call(remote_store: S3ObjectStore) -> None:
    store = remote_store
    calls: list[str] = []
    store.client.meta.events.register(
        "before-call.s3.*", lambda model, **_: calls.append(model.name)
    )
    items = {
        "pm/a.json": b'{"files": {}}',
        "pm/empty": b"",
        "pm/sp ace/\u00fc+%20?#.checksum": b"escaped",
        # Large enough to ask for 100 Continue first.
        "pm/large": bytes(range(256)) * (EXPECT_CONTINUE_FROM // 256 + 10),
    }
    store.put_many(items)
    assert calls == []
    for key, body in items.items():
        assert store.get(key) == body
        assert store.head(key) == ObjectInfo(key, len(body), md5(body))
    # The content type storage gives them is the one a bare ``put`` gets.
    store.put("pm/by-put", b"x")
    content_types = [
        store.client.head_object(Bucket=store.bucket, Key=key)["ContentType"]
        for key in ["pm/by-put", "pm/a.json"]
    ]
    assert content_types[0] == content_types[1]


def test_put_many_sends_to_the_servers_endpoint_not_the_presign_one(
    moto_server: str, s3_bucket: str
) -> None:
    store = S3ObjectStore(
        s3_bucket,
        endpoint_url=moto_server,
        presign_endpoint_url="http://storage.invalid:9000",
        access_key_id="testing",
        secret_access_key="testing",
    )
    store.put_many({"a": b"1", "b": b"2"})
    assert store.get("a") == b"1" and store.get("b") == b"2"
    assert store.presigned_get_url("a", expires_in=60).startswith("http://storage.invalid:9000/")


def test_put_many_of_a_missing_bucket_names_the_key(moto_server: str) -> None:
    store = S3ObjectStore(
        "no-such-bucket-here",
        endpoint_url=moto_server,
        access_key_id="testing",
        secret_access_key="testing",
    )
    with pytest.raises(ObjectStoreError, match=r"put x/\.checksum: NoSuchBucket \(HTTP 404\)"):
        store.put_many({"x/.checksum": b"{}"})


@pytest.mark.parametrize("size", [10, EXPECT_CONTINUE_FROM + 1])
def test_put_many_with_wrong_credentials_names_the_key(
    seaweedfs: SeaweedS3, seaweedfs_bucket: str, size: int
) -> None:
    store = S3ObjectStore(
        seaweedfs_bucket,
        endpoint_url=seaweedfs.endpoint_url,
        access_key_id=seaweedfs_credentials.ACCESS_KEY,
        secret_access_key="not-the-secret",
    )
    # A large body asks for 100 Continue first: the refusal comes before the body.
    with pytest.raises(ObjectStoreError, match=r"put k: SignatureDoesNotMatch \(HTTP 403\)"):
        store.put_many({"k": b"x" * size})
    assert seaweedfs.client().list_objects_v2(Bucket=seaweedfs_bucket).get("KeyCount") == 0


def test_put_many_retries_transient_failures() -> None:
    body = b'{"files": {"a": "0"}}'
    with ScriptedServer() as server:
        server.replies = [
            Reply(503, error_body("ServiceUnavailable", "Please reduce your request rate.")),
            Reply(500, error_body("InternalError", "We encountered an internal error.")),
        ]
        server.default = Reply(200, b"", {"ETag": f'"{md5(body)}"'})
        scripted_store(server).put_many({"d/.checksum": body})
    assert len(server.seen) == 3
    for seen in server.seen:
        assert (seen.method, seen.body) == ("PUT", body)
        assert seen.headers["Content-MD5"] == content_md5_header(md5(body))
        assert "Expect" not in seen.headers
        url = urlsplit(seen.path)
        assert url.path == "/bucket/d/.checksum"
        query = parse_qs(url.query)
        assert query["X-Amz-SignedHeaders"] == ["content-md5;host"]
        assert query["X-Amz-Expires"] == [str(URL_EXPIRES_IN)]


def test_only_a_large_body_asks_for_100_continue() -> None:
    large = b"x" * EXPECT_CONTINUE_FROM
    with ScriptedServer() as server:
        scripted_store(server).put_many(
            {"small": b"x" * (EXPECT_CONTINUE_FROM - 1), "large": large}
        )
    expects = {seen.path.split("?")[0]: seen.headers.get("Expect") for seen in server.seen}
    assert expects == {"/bucket/small": None, "/bucket/large": "100-continue"}
    assert [seen.body for seen in server.seen if seen.path.startswith("/bucket/large")] == [large]


def test_put_many_does_not_retry_a_refusal() -> None:
    with ScriptedServer() as server:
        server.default = Reply(403, error_body("AccessDenied", "Access Denied"))
        with pytest.raises(ObjectStoreError, match=r"^put k: AccessDenied \(HTTP 403\): Access"):
            scripted_store(server).put_many({"k": b"x"})
    assert len(server.seen) == 1


def test_a_reply_that_is_not_an_s3_error_is_quoted() -> None:
    with ScriptedServer() as server:
        server.default = Reply(502, b"<html>Bad Gateway</html>")
        store = scripted_store(server)
        with pytest.raises(ObjectStoreError, match=r"^put k: HTTP 502: <html>Bad Gateway</html>"):
            put_object(
                _http_session(store.client),
                lambda: f"{server.url}/b/k",
                "k",
                b"",
                "",
                sleep=lambda _: None,
            )
    assert len(server.seen) == RETRIES + 1


def test_every_attempt_signs_its_own_url() -> None:
    """URLs may expire while earlier attempts and their backoff run: each attempt signs anew."""
    signed: list[str] = []
    delays: list[float] = []

    def sign() -> str:
        signed.append(f"{server.url}/b/k?attempt={len(signed) + 1}")
        return signed[-1]

    with ScriptedServer() as server:
        server.replies = [Reply(503, error_body("SlowDown", "Reduce your request rate."))] * 2
        store = scripted_store(server)
        put_object(_http_session(store.client), sign, "k", b"x", "", sleep=delays.append)
    assert [seen.path for seen in server.seen] == [f"/b/k?attempt={n}" for n in (1, 2, 3)]
    # A backoff between attempts (how long: retry_delay's test).
    assert len(delays) == 2


def test_a_connection_failure_is_retried_then_reported() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port now: every attempt fails to connect.
    store = S3ObjectStore(
        "bucket", endpoint_url=f"http://127.0.0.1:{port}", access_key_id="k", secret_access_key="s"
    )
    delays: list[float] = []
    with pytest.raises(ObjectStoreError, match=rf"^put k: no reply: .*\({RETRIES + 1} attempts\)"):
        put_object(
            _http_session(store.client),
            lambda: f"http://127.0.0.1:{port}/bucket/k",
            "k",
            b"x",
            "",
            sleep=delays.append,
        )
    assert len(delays) == RETRIES


def failure(status: int | None, code: str = "", retry_after_ms: int | None = None) -> Failure:
    return Failure(status, code, "", retry_after_ms)


@pytest.mark.parametrize(
    ("failed", "attempt", "delay"),
    [
        (failure(503), 1, 0.05),
        (failure(500, "InternalError"), 3, 0.2),
        (failure(None, "EndpointConnectionError"), 2, 0.1),
        (failure(400, "RequestTimeout"), 1, 0.05),
        (failure(503, "SlowDown"), 1, 1.0),
        (failure(503, "SlowDown"), RETRIES, 16.0),
        (failure(429), 2, 2.0),
        (failure(503, retry_after_ms=3000), 1, 3.0),
        (failure(503, retry_after_ms=60000), 1, 5.05),  # at most 5 s more than the backoff
        (failure(503), RETRIES + 1, None),  # the retries ran out
        (failure(403, "AccessDenied"), 1, None),
        (failure(404, "NoSuchBucket"), 1, None),
        (failure(400, "BadDigest"), 1, None),
    ],
)
def test_retry_delay_is_botocores_standard_mode(
    failed: Failure, attempt: int, delay: float | None
) -> None:
    highest = retry_delay(failed, attempt, uniform=lambda: 1.0)
    lowest = retry_delay(failed, attempt, uniform=lambda: 0.0)
    if delay is None:
        assert highest is None and lowest is None
    else:
        assert highest == pytest.approx(delay)
        assert lowest is not None and 0 <= lowest <= highest
