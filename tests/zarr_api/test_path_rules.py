"""Every path rule of every backend is enforced by the API itself: 400, and nothing created.

A path the API accepts must be one every backend can sign, store, list and hash: paths at the
very limits are uploaded for real on each backend, and one byte past any limit is refused
before a batch exists (before this rule had one home, such a path got a batch committed, then
a 500 when signing failed, and an open batch nothing could end).
"""

from __future__ import annotations

import pytest

from dandizarr.objectstore.keys import MAX_SEGMENT_BYTES, RESERVED_PREFIX
from tests.support.api import Actor, create_archive, md5, storage_listing, upload
from tests.support.fixture_params import fixture_params
from tests.support.tree_check import assert_tree_matches_storage

# The key of a file is zarr/<36-char id>/<path> (42 bytes of prefix), the key of its
# directory's listing zarr_checksums/<id>/<dir>/.checksum (62 bytes around the directory).
_DEEP_DIR = "/".join(c * 200 for c in "defg")  # 803 bytes
LONGEST_PATH = _DEEP_DIR + "/" + "n" * (1024 - 42 - 804)  # a file key of exactly 1024 bytes
_LONG_DIR = "/".join(["a" * MAX_SEGMENT_BYTES] * 4) + "/bbb"  # 963 bytes: listing key 1025

# (path, a fragment of the problem named): one per rule, each just past its limit.
BAD_PATHS = [
    ("", "empty"),
    ("/abs", "must not start with '/'"),
    ("a//b", "segments"),
    ("a/./b", "segments"),
    ("a/../b", "segments"),
    ("a\\b", "backslash"),
    ("a\x00b", "control"),
    ("a\x7fb", "control"),
    ("a\ud800", "UTF-8"),
    ("d/" + "x" * (MAX_SEGMENT_BYTES + 1), f"at most {MAX_SEGMENT_BYTES}"),
    ("d/" + "é" * (MAX_SEGMENT_BYTES // 2 + 1), f"at most {MAX_SEGMENT_BYTES}"),
    (RESERVED_PREFIX + "meta.x", "reserved"),
    ("d/" + RESERVED_PREFIX + "tmp-x/y", "reserved"),
    (LONGEST_PATH + "n", "1025 bytes"),
    (_LONG_DIR + "/x", "1025 bytes"),
]


# A refusal comes from the API before any backend is asked (the rules' one home is
# dandizarr.objectstore.keys), so refusals are checked on one backend; what is accepted is
# stored on each (test_paths_at_every_limit_upload_and_hash).
REFUSED_BY_THE_API = pytest.mark.parametrize(
    "backend", fixture_params({"s3": "s3_storage"}), indirect=True
)


def _assert_nothing_open(owner: Actor, zarr_id: str) -> None:
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    detail = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert detail["file_count"] == 0
    assert storage_listing(zarr_id) == {}


@REFUSED_BY_THE_API
@pytest.mark.parametrize(("path", "fragment"), BAD_PATHS)
def test_upload_refuses_each_rule(owner: Actor, archive: str, path: str, fragment: str) -> None:
    response = owner.client.post(
        f"/api/zarr/{archive}/upload/",
        [{"path": "good", "etag": md5(b"")}, {"path": path, "etag": md5(b"")}],
        format="json",
    )
    assert response.status_code == 400, response.content
    assert fragment in response.json()["detail"]
    assert [p["path"] for p in response.json()["paths"]] == [path]
    _assert_nothing_open(owner, archive)


def _assert_pack_batch_refused(
    owner: Actor, dandiset: str, shard_name: str, member_path: str, fragment: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    member = {"path": member_path, "md5": md5(b"x"), "offset": 0, "size": 1}
    shard = {"name": shard_name, "etag": md5(b"x"), "size": 1, "members": [member]}
    response = owner.client.post(f"/api/zarr/{zarr_id}/upload/", {"shards": [shard]}, format="json")
    assert response.status_code == 400, response.content
    assert fragment in response.json()["detail"]
    _assert_nothing_open(owner, zarr_id)


@REFUSED_BY_THE_API
@pytest.mark.parametrize(("path", "fragment"), BAD_PATHS)
def test_pack_batch_refuses_each_rule(
    owner: Actor, dandiset: str, backend: str, path: str, fragment: str
) -> None:
    _assert_pack_batch_refused(owner, dandiset, "s0", path, fragment)


@REFUSED_BY_THE_API
@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("s/" + "x" * (MAX_SEGMENT_BYTES - 13 + 1), f"at most {MAX_SEGMENT_BYTES}"),
        ("/".join(["s" * 200] * 5)[: 1024 - 62 + 1], "bytes"),
        (RESERVED_PREFIX + "s", "reserved"),
        ("a\\s", "backslash"),
    ],
)
def test_pack_batch_refuses_shard_names_storage_cannot_hold(
    owner: Actor, dandiset: str, backend: str, name: str, fragment: str
) -> None:
    """A shard's key is zarr_shards/<id>/<name>.<12 hex>: the suffix counts against the limits."""
    _assert_pack_batch_refused(owner, dandiset, name, "0/0", fragment)


# A URL path cannot carry NUL or a lone surrogate, and "" is the root.
URL_PATHS = [p for p in BAD_PATHS if p[0] and "\x00" not in p[0] and "\ud800" not in p[0]]


@REFUSED_BY_THE_API
@pytest.mark.parametrize(("path", "fragment"), URL_PATHS)
def test_browse_and_delete_refuse_each_rule(
    owner: Actor, archive: str, path: str, fragment: str
) -> None:
    # Browsing reads "/abs" as the directory "abs" (slashes around a directory are optional).
    browse = owner.client.get(f"/api/zarr/{archive}/files/{path}")
    assert browse.status_code == (404 if path == "/abs" else 400), browse.content
    assert path == "/abs" or fragment in browse.json()["detail"]
    delete = owner.client.delete(f"/api/zarr/{archive}/files/", [{"path": path}], format="json")
    assert delete.status_code == 400, delete.content
    assert fragment in delete.json()["detail"]
    _assert_nothing_open(owner, archive)


def test_paths_at_every_limit_upload_and_hash(owner: Actor, archive: str) -> None:
    files = {
        LONGEST_PATH: b"longest key",
        "d/" + "x" * MAX_SEGMENT_BYTES: b"longest name",
        "d/" + "é" * (MAX_SEGMENT_BYTES // 2): b"longest name in two-byte characters",
        _LONG_DIR[:-1] + "/x": b"longest listing key",
        "dandizarr-not-reserved/.checksum": b"ordinary names",
    }
    response = upload(owner.client, archive, files)
    assert response.status_code == 200, response.content
    assert storage_listing(archive) == {p: (len(b), md5(b)) for p, b in files.items()}
    assert_tree_matches_storage(archive)
    detail = owner.client.get(f"/api/zarr/{archive}/").json()
    assert detail["file_count"] == len(files)
