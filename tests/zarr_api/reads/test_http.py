"""``/zarr/{zarr_id}/{key}`` as plain HTTP, against a loose and a packed file on both storage
backends: every form of Range, 416, 404, HEAD, ETag and 304, CORS, directory listings (HTML
as fsspec parses it, and JSON), and the storage requests one packed read costs."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import fsspec
import pytest
import requests

from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr_server.zarr_api.runtime.storage import get_store
from tests.support.readers import Live
from tests.support.storage_requests import record_s3_requests

LOOSE = "v2/.zarray"
PACKED = "v3/c/0/1"


def get(url: str, method: str = "GET", **headers: str) -> requests.Response:
    return requests.request(method, url, headers=headers, timeout=30)


@pytest.mark.parametrize("path", [LOOSE, PACKED])
def test_ranges_heads_etags_and_conditional_reads(
    live: Live, packed_archive: tuple[str, dict[str, bytes]], path: str
) -> None:
    zarr_id, files = packed_archive
    body = files[path]
    size = len(body)
    assert size > 20
    url = f"{live.url}/zarr/{zarr_id}/{path}"
    etag = f'"{hashlib.md5(body).hexdigest()}"'
    packed = live.api("GET", f"/api/zarr/{zarr_id}/files/{path}").json()["shard"]
    assert (packed is not None) == (path == PACKED)

    whole = get(url)
    assert whole.status_code == 200 and whole.content == body
    assert whole.headers["Content-Length"] == str(size)
    assert whole.headers["ETag"] == etag
    assert whole.headers["Accept-Ranges"] == "bytes"
    assert whole.headers["Last-Modified"].endswith(" GMT")
    assert whole.headers["Access-Control-Allow-Origin"] == "*"
    assert "Content-Range" in whole.headers["Access-Control-Expose-Headers"]

    head = get(url, "HEAD")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Length"] == str(size) and head.headers["ETag"] == etag

    ranges: list[tuple[str, int, int]] = [
        ("bytes=2-9", 2, 10),
        ("bytes=5-", 5, size),
        ("bytes=-7", size - 7, size),
        ("bytes=-100000", 0, size),
        ("bytes=3-100000", 3, size),
        (f"bytes={size - 1}-{size - 1}", size - 1, size),
    ]
    for header, begin, stop in ranges:
        part = get(url, Range=header)
        assert part.status_code == 206, header
        assert part.content == body[begin:stop], header
        assert part.headers["Content-Range"] == f"bytes {begin}-{stop - 1}/{size}", header
        assert part.headers["Content-Length"] == str(stop - begin), header
        assert part.headers["ETag"] == etag
        head = get(url, "HEAD", Range=header)
        assert (head.status_code, head.content) == (206, b""), header
        assert head.headers["Content-Range"] == part.headers["Content-Range"]

    # Several ranges, or a syntax RFC 9110 lets a server ignore: the whole file.
    for header in ("bytes=0-1,4-5", "bytes=9-2", "items=0-3"):
        ignored = get(url, Range=header)
        assert (ignored.status_code, ignored.content) == (200, body), header
    for header in (f"bytes={size}-", f"bytes={size + 5}-{size + 9}", "bytes=-0"):
        refused = get(url, Range=header)
        assert refused.status_code == 416, header
        assert refused.headers["Content-Range"] == f"bytes */{size}"
        assert "detail" in refused.json()

    assert get(url, **{"If-None-Match": etag}).status_code == 304
    assert get(url, "HEAD", **{"If-None-Match": f'"0000", {etag}'}).status_code == 304
    assert get(url, **{"If-None-Match": "*"}).status_code == 304
    assert get(url, **{"If-None-Match": '"00000000000000000000000000000000"'}).content == body
    assert get(url, **{"If-Match": '"00000000000000000000000000000000"'}).status_code == 412
    assert get(url, **{"If-Match": etag, "Range": "bytes=0-3"}).content == body[:4]
    stale = get(url, **{"If-Range": '"00000000000000000000000000000000"', "Range": "bytes=0-3"})
    assert (stale.status_code, stale.content) == (200, body)
    fresh = get(url, **{"If-Range": etag, "Range": "bytes=0-3"})
    assert (fresh.status_code, fresh.content) == (206, body[:4])


def test_absent_keys_and_archives_are_404_and_writes_405(
    live: Live, packed_archive: tuple[str, dict[str, bytes]]
) -> None:
    zarr_id, _files = packed_archive
    base = f"{live.url}/zarr/{zarr_id}/"
    for url in (
        base + "v3/c/9/9",  # a chunk never written: readers fill it
        base + "v3",  # a directory is not a file
        base + "v3/zarr.json/",  # a file is not a directory
        base + "nothing/",
        base + "v3//c",
        f"{live.url}/zarr/{'0' * 8}-0000-0000-0000-{'0' * 12}/v3/zarr.json",
        f"{live.url}/zarr/not-a-uuid/v3/zarr.json",
    ):
        for method in ("GET", "HEAD"):
            response = get(url, method)
            assert response.status_code == 404, (method, url)
            assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert get(url).json()["detail"], url
    refused = get(base + LOOSE, "POST")
    assert refused.status_code == 405 and refused.headers["Allow"] == "GET, HEAD, OPTIONS"
    assert get(base + LOOSE, "DELETE").status_code == 405
    assert get(base + LOOSE).status_code == 200


def test_cors_preflight(live: Live, packed_archive: tuple[str, dict[str, bytes]]) -> None:
    zarr_id, _files = packed_archive
    response = get(
        f"{live.url}/zarr/{zarr_id}/{PACKED}",
        "OPTIONS",
        Origin="https://neuroglancer-demo.appspot.com",
        **{"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range"},
    )
    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Range" in response.headers["Access-Control-Allow-Headers"].split(", ")
    assert "GET" in response.headers["Access-Control-Allow-Methods"]
    # Only the read-only routes are CORS-open.
    api = get(f"{live.url}/api/zarr/{zarr_id}/", Origin="https://example.org")
    assert "Access-Control-Allow-Origin" not in api.headers


def test_directories_list_as_html_that_fsspec_parses_and_as_json(
    live: Live, packed_archive: tuple[str, dict[str, bytes]]
) -> None:
    zarr_id, files = packed_archive
    base = f"{live.url}/zarr/{zarr_id}/"
    page = get(base)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert '<a href="v3s/">v3s/</a>' in page.text
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    top = {p.split("/")[0] + ("/" if "/" in p else "") for p in files}
    assert sorted(fs.ls(base, detail=False)) == sorted(base + n for n in top)
    assert {"v2/", "v3/", "v3s/"} <= top
    assert sorted(fs.ls(base + "v3/", detail=False)) == [base + "v3/c/", base + "v3/zarr.json"]
    assert fs.cat(base + "v3/zarr.json") == files["v3/zarr.json"]

    listing = get(base + "v3/c/", Accept="application/json").json()
    assert listing["path"] == "v3/c"
    below = {p: b for p, b in files.items() if p.startswith("v3/c/")}
    assert listing["file_count"] == len(below)
    assert listing["size"] == sum(map(len, below.values()))
    names = [e["name"] for e in listing["entries"]]
    assert names == sorted({p.split("/")[2] for p in below})
    assert all(e["type"] == "directory" for e in listing["entries"])
    files_json = get(base + "v3/c/0/", Accept="application/json").json()["entries"]
    for entry in files_json:
        assert entry["digest"] == hashlib.md5(files[entry["path"]]).hexdigest()
        assert entry["size"] == len(files[entry["path"]])
        assert f'<a href="{entry["name"]}">' in get(base + "v3/c/0/").text


@pytest.fixture
def storage_requests(live: Live, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every storage request of this process from now on: HTTP requests the store sends (S3),
    outermost calls of the local store's reading methods (local)."""
    seen: list[str] = []
    store = get_store()
    if isinstance(store, S3ObjectStore):
        yield record_s3_requests(store, monkeypatch)
        return
    depth = threading.local()
    for name in ("get", "get_range", "read_range", "iter_chunks", "head", "list", "open_object"):
        original: Callable[..., Any] = getattr(store, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            # One request is one outermost call (get_range calls read_range calls open_object).
            if not getattr(depth, "value", 0):
                seen.append(f"{_name} {args}")
            depth.value = getattr(depth, "value", 0) + 1
            try:
                return _original(*args, **kwargs)
            finally:
                depth.value -= 1

        monkeypatch.setattr(store, name, spy)
    yield seen


def test_a_packed_read_is_one_ranged_storage_request(
    live: Live, packed_archive: tuple[str, dict[str, bytes]], storage_requests: list[str]
) -> None:
    zarr_id, files = packed_archive
    url = f"{live.url}/zarr/{zarr_id}/{PACKED}"
    body = files[PACKED]
    for headers, expected in [({}, body), ({"Range": "bytes=-5"}, body[-5:])]:
        storage_requests.clear()
        assert get(url, **headers).content == expected
        assert len(storage_requests) == 1, storage_requests
        assert f"zarr_shards/{zarr_id}/" in storage_requests[0]
    # HEAD, 304 and 416 read nothing from storage.
    storage_requests.clear()
    get(url, "HEAD")
    get(url, **{"If-None-Match": f'"{hashlib.md5(body).hexdigest()}"'})
    get(url, Range=f"bytes={len(body)}-")
    assert storage_requests == []
