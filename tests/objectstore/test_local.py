"""What only the local backend has: its own presigned-URL server, files on disk, sidecars."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import requests

from dandizarr.objectstore import ObjectInfo, ObjectStoreError, signing
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.keys import RESERVED_PREFIX, SIDECAR_PREFIX
from dandizarr.objectstore.local import (
    TEMP_PREFIX,
    BadDigest,
    InvalidKey,
    LocalObjectStore,
)
from tests.support.api import expected_upload


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def put_via_url(url: str, body: bytes, *, content_md5: str | None) -> requests.Response:
    headers = {} if content_md5 is None else {"Content-MD5": content_md5}
    return requests.put(url, data=body, headers=headers, timeout=30)


def with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


def files_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


# --- the presigned PUT endpoint -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_body_with_another_md5_is_bad_digest_and_old_object_survives(
    local_store: LocalObjectStore,
) -> None:
    announced = b"the announced body"
    key = expected_upload("k", md5(announced))
    local_store.put(key, b"old content")
    url = local_store.presigned_put_url(key, md5(announced), expires_in=60)
    response = put_via_url(
        url, b"a different body!", content_md5=content_md5_header(md5(announced))
    )
    assert response.status_code == 400
    assert "<Code>BadDigest</Code>" in response.text
    assert local_store.get(key) == b"old content"
    assert local_store.head(key) == ObjectInfo(key, 11, md5(b"old content"))
    # No temp file of the rejected upload is left behind.
    folder = key[: -len("k")]
    assert files_under(local_store.root) == sorted([key, folder + SIDECAR_PREFIX + "k"])


def test_expired_put_url_is_403(local_store: LocalObjectStore) -> None:
    body = b"late"
    url = signing.presigned_url(
        local_store.storage_url,
        local_store.secret_key,
        "PUT",
        "late/key",
        expires_in=60,
        md5_hex=md5(body),
        now=time.time() - 3600,
    )
    response = put_via_url(url, body, content_md5=content_md5_header(md5(body)))
    assert response.status_code == 403
    assert "expired" in response.text
    assert local_store.head("late/key") is None


def test_expired_get_url_is_403(local_store: LocalObjectStore) -> None:
    local_store.put("k", b"x")
    url = signing.presigned_url(
        local_store.storage_url,
        local_store.secret_key,
        "GET",
        "k",
        expires_in=1,
        now=time.time() - 3600,
    )
    response = requests.get(url, timeout=30)
    assert response.status_code == 403
    assert "expired" in response.text


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda url: with_query(url, signature="0" * 64), id="signature"),
        pytest.param(
            lambda url: with_query(url, expires=str(int(time.time()) + 10**6)), id="expiry"
        ),
        pytest.param(lambda url: with_query(url, md5=md5(b"other")), id="md5"),
        pytest.param(lambda url: url.replace("/signed/key", "/signed/kez"), id="key"),
        pytest.param(lambda url: with_query(url, signature="", expires=""), id="unsigned"),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_tampered_put_url_is_403(local_store: LocalObjectStore, tamper: object) -> None:
    body = b"payload"
    key = expected_upload("signed/key", md5(body))
    url = local_store.presigned_put_url(key, md5(body), expires_in=60)
    assert callable(tamper)
    response = put_via_url(tamper(url), body, content_md5=content_md5_header(md5(body)))
    assert response.status_code == 403, response.text
    assert local_store.head(key) is None
    assert local_store.head(key.replace("/signed/key", "/signed/kez")) is None
    # The untampered URL works, so the 403 was the tampering's doing.
    assert put_via_url(url, body, content_md5=content_md5_header(md5(body))).status_code == 200


def test_a_get_url_cannot_upload_and_a_put_url_cannot_download(
    local_store: LocalObjectStore,
) -> None:
    local_store.put("k", b"secret")
    get_url = local_store.presigned_get_url("k", expires_in=60)
    assert put_via_url(get_url, b"x", content_md5=content_md5_header(md5(b"x"))).status_code == 403
    put_url = local_store.presigned_put_url("k", md5(b"x"), expires_in=60)
    assert requests.get(put_url, timeout=30).status_code == 403
    assert local_store.get("k") == b"secret"


@pytest.mark.django_db(transaction=True)
def test_content_md5_header_must_match_the_signed_md5(local_store: LocalObjectStore) -> None:
    body = b"body"
    key = expected_upload("k", md5(body))
    url = local_store.presigned_put_url(key, md5(body), expires_in=60)
    missing = put_via_url(url, body, content_md5=None)
    assert missing.status_code == 403
    other = put_via_url(url, body, content_md5=content_md5_header(md5(b"other")))
    assert other.status_code == 403
    malformed = put_via_url(url, body, content_md5="not base64!")
    assert malformed.status_code == 400
    assert "<Code>InvalidDigest</Code>" in malformed.text
    assert local_store.head(key) is None
    ok = put_via_url(url, body, content_md5=content_md5_header(md5(body)))
    assert ok.status_code == 200
    assert ok.headers["ETag"] == f'"{md5(body)}"'


def test_other_methods_are_refused(local_store: LocalObjectStore) -> None:
    local_store.put("k", b"x")
    url = local_store.presigned_get_url("k", expires_in=60)
    assert requests.delete(url, timeout=30).status_code == 405
    assert local_store.get("k") == b"x"


@pytest.mark.parametrize("uploaded_type", ["text/html", "image/svg+xml", None])
def test_get_never_serves_the_uploaders_content_type(
    local_store: LocalObjectStore, uploaded_type: str | None
) -> None:
    """A storage URL is what a download link opens: whatever type the uploader sent, the bytes
    come back as an inert attachment (the S3 URLs say the same, test_user_bytes.py)."""
    local_store.put("evil.html", b"<script>alert(1)</script>", content_type=uploaded_type)
    response = requests.get(local_store.presigned_get_url("evil.html", expires_in=60), timeout=30)
    assert response.content == b"<script>alert(1)</script>"
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.headers["Content-Disposition"] == "attachment"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Security-Policy"] == "sandbox; default-src 'none'"
    assert response.headers["Accept-Ranges"] == "bytes"


# --- files on disk --------------------------------------------------------------------------


def test_objects_are_plain_files_under_root(local_store: LocalObjectStore) -> None:
    local_store.put("a/b/c", b"body")
    assert (local_store.root / "a" / "b" / "c").read_bytes() == b"body"


def test_failed_write_leaves_old_object_and_no_temp_file(local_store: LocalObjectStore) -> None:
    local_store.put("dir/k", b"old")

    def crashing_body() -> Iterator[bytes]:
        yield b"half of the new "
        raise RuntimeError("connection lost")

    with pytest.raises(RuntimeError):
        local_store.put_stream("dir/k", crashing_body())
    assert local_store.get("dir/k") == b"old"
    assert local_store.head("dir/k") == ObjectInfo("dir/k", 3, md5(b"old"))
    assert files_under(local_store.root) == ["dir/" + SIDECAR_PREFIX + "k", "dir/k"]


def test_put_stream_with_wrong_md5_stores_nothing(local_store: LocalObjectStore) -> None:
    with pytest.raises(BadDigest):
        local_store.put_stream("new", [b"abc"], expected_md5=md5(b"abd"))
    assert local_store.head("new") is None
    assert files_under(local_store.root) == []


def test_temp_and_sidecar_files_are_never_listed(local_store: LocalObjectStore) -> None:
    local_store.put("d/k", b"x")
    # What a writer killed mid-upload leaves behind.
    (local_store.root / "d" / (TEMP_PREFIX + "abc123")).write_bytes(b"partial")
    (local_store.root / (TEMP_PREFIX + "top")).write_bytes(b"partial")
    # A file no key can name (put would refuse it) is not an object either.
    (local_store.root / "d" / ("n" * 250)).write_bytes(b"foreign")
    assert [info.key for info in local_store.list()] == ["d/k"]
    with pytest.raises(InvalidKey):
        local_store.head("d/" + TEMP_PREFIX + "abc123")


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/abs",
        "../escape",
        "a/../../escape",
        "a//b",
        "a/./b",
        "a/",
        "nul\x00",
        "x/" + SIDECAR_PREFIX + "k",
        RESERVED_PREFIX + "x",
        "a/" + "n" * 250,
    ],
)
def test_invalid_keys_are_refused(local_store: LocalObjectStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        local_store.put(key, b"x")
    with pytest.raises(InvalidKey):
        local_store.presigned_put_url(key, md5(b"x"), expires_in=60)
    assert files_under(local_store.root.parent) == []


def test_listing_with_a_hostile_prefix_stays_inside_root(local_store: LocalObjectStore) -> None:
    (local_store.root.parent / "outside").write_bytes(b"not an object")
    local_store.put("inside", b"x")
    assert list(local_store.list("../")) == []
    assert list(local_store.list("../outside")) == []
    assert [info.key for info in local_store.list("")] == ["inside"]


def test_a_key_cannot_be_both_object_and_prefix(local_store: LocalObjectStore) -> None:
    local_store.put("x", b"object")
    with pytest.raises(ObjectStoreError):
        local_store.put("x/y", b"below an object")
    local_store.put("d/e/f", b"deep")
    with pytest.raises(ObjectStoreError):
        local_store.put("d/e", b"over a prefix")
    # Deleting the last key below a prefix removes its directories, so the prefix can
    # become an object, as in S3.
    local_store.delete("d/e/f")
    assert not (local_store.root / "d").exists()
    local_store.put("d", b"now an object")
    assert local_store.get("d") == b"now an object"


# --- ETags: recorded at write time, never wrong ---------------------------------------------


def test_head_uses_the_recorded_md5_without_reading_the_body(
    local_store: LocalObjectStore,
) -> None:
    local_store.put("k", b"body")
    sidecar = local_store.root / (SIDECAR_PREFIX + "k")
    meta = json.loads(sidecar.read_text())
    assert meta["md5"] == md5(b"body")
    # A recorded value that is not the body's md5 is returned as-is: proof that head trusts
    # the record (O(1)) instead of hashing the file.
    meta["md5"] = "0" * 32
    sidecar.write_text(json.dumps(meta))
    assert local_store.head("k") == ObjectInfo("k", 4, "0" * 32)


def test_a_sidecar_for_another_file_is_not_trusted(local_store: LocalObjectStore) -> None:
    local_store.put("k", b"first")
    path = local_store.root / "k"
    # The object replaced behind the sidecar's back: a writer that crashed between its two
    # renames, a concurrent writer, or a restored backup.
    replacement = local_store.root / "replacement"
    replacement.write_bytes(b"second")
    os.replace(replacement, path)
    assert local_store.head("k") == ObjectInfo("k", 6, md5(b"second"))
    assert local_store.read_range("k", 0) == (b"second", md5(b"second"))
    # ... and the sidecar was repaired on the way.
    assert json.loads((local_store.root / (SIDECAR_PREFIX + "k")).read_text())["md5"] == md5(
        b"second"
    )


def test_a_missing_or_corrupt_sidecar_is_recomputed(local_store: LocalObjectStore) -> None:
    local_store.put("a", b"alpha")
    local_store.put("b", b"beta")
    (local_store.root / (SIDECAR_PREFIX + "a")).unlink()
    (local_store.root / (SIDECAR_PREFIX + "b")).write_text("{not json")
    assert list(local_store.list()) == [
        ObjectInfo("a", 5, md5(b"alpha")),
        ObjectInfo("b", 4, md5(b"beta")),
    ]


def test_a_store_on_a_copied_tree_recomputes_etags(
    local_store: LocalObjectStore, tmp_path: Path
) -> None:
    local_store.put("p/k", b"content")
    copy_root = tmp_path / "copy"
    (copy_root / "p").mkdir(parents=True)
    # Copy the object but give the copy the sidecar of a different body.
    (copy_root / "p" / "k").write_bytes(b"changed")
    (copy_root / "p" / (SIDECAR_PREFIX + "k")).write_bytes(
        (local_store.root / "p" / (SIDECAR_PREFIX + "k")).read_bytes()
    )
    copy = LocalObjectStore(copy_root, public_url="http://unused", secret_key="s")
    assert copy.head("p/k") == ObjectInfo("p/k", 7, md5(b"changed"))
