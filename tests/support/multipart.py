"""Big files sent in parts through the REST batch flow (docs/api.md, "Big files")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import requests
from rest_framework.test import APIClient

from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import MAX_OBJECT, MIB, part_count, part_ranges, part_size

# Tests' threshold and part size: S3's (and moto's, and SeaweedFS's) smallest part is 5 MiB.
PART = 5 * MIB
THRESHOLD = 6 * MIB


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def declared(path: str, data: bytes, *, whole_md5: str | None = None) -> dict[str, Any]:
    """A file's entry of a batch start: its size and each part's md5 when it goes in parts."""
    entry: dict[str, Any] = {"path": path, "etag": whole_md5 or md5(data), "size": len(data)}
    if len(data) > THRESHOLD:
        entry["parts"] = [md5(data[a:b]) for a, b in part_ranges(len(data), PART)]
    return entry


def part_urls(client: APIClient, zarr_id: str, entry: dict[str, Any]) -> list[str]:
    """Every part URL of a file sent in parts: its entry's first page, then each next page
    (``POST batches/{id}/parts/``)."""
    urls = list(entry["part_urls"])
    following = entry["next_part"]
    while following is not None:
        page = client.post(
            f"/api/zarr/{zarr_id}/batches/{entry['batch']}/parts/",
            {"path": entry["path"], "first_part": following},
            format="json",
        )
        assert page.status_code == 200, page.content
        assert page.json()["first_part"] == following
        urls += page.json()["part_urls"]
        following = page.json()["next_part"]
    return urls


def put_parts(
    entry: dict[str, Any],
    data: bytes,
    *,
    only: set[int] | None = None,
    urls: list[str] | None = None,
) -> None:
    """PUT each part (numbers 1, 2, ...; ``only`` some) to its URL with its Content-MD5:
    ``urls``, or the entry's when they are all there."""
    if urls is None:
        assert entry["next_part"] is None, "more parts than one page: give every page's urls"
        urls = entry["part_urls"]
    for number, ((a, b), url) in enumerate(
        zip(part_ranges(len(data), entry["part_size"]), urls, strict=True), 1
    ):
        if only is not None and number not in only:
            continue
        body = data[a:b]
        response = requests.put(
            url, data=body, headers={"Content-MD5": content_md5_header(md5(body))}, timeout=60
        )
        assert response.status_code == 200, response.text


def start(client: APIClient, zarr_id: str, entries: list[dict[str, Any]]) -> Any:
    return client.post(f"/api/zarr/{zarr_id}/upload/", entries, format="json")


def upload_in_parts(client: APIClient, zarr_id: str, files: dict[str, bytes]) -> Any:
    """Start, PUT every file (in parts where it is big), complete; the complete response."""
    response = start(client, zarr_id, [declared(p, b) for p, b in files.items()])
    assert response.status_code == 200, response.content
    for entry, data in zip(response.json(), files.values(), strict=True):
        if entry["upload_url"] is None:
            put_parts(entry, data, urls=part_urls(client, zarr_id, entry))
        else:
            put = requests.put(
                entry["upload_url"],
                data=data,
                headers={"Content-MD5": content_md5_header(md5(data))},
                timeout=60,
            )
            assert put.status_code == 200, put.text
    return client.post(f"/api/zarr/{zarr_id}/upload/complete/", format="json")


def huge_declaration(files: int, size: int = MAX_OBJECT) -> bytes:
    """A start's body: ``files`` files of ``size`` bytes declared in parts at the default part
    rule (5 TiB: 9,987 parts of 525 MiB), each part's md5 made up (85 such files: 30 MB)."""
    count = part_count(size, part_size(size, 64 << 20))
    parts = [f"{n:032x}" for n in range(count)]
    return json.dumps(
        [{"path": f"big/{i}", "etag": "0" * 32, "size": size, "parts": parts} for i in range(files)]
    ).encode()
