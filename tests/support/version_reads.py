"""What a reader of an archive or version sees, checked against the files it should hold:
every read route that lists, hashes or serves them (docs/versions.md)."""

from __future__ import annotations

import posixpath

from tests.support.api import expected_checksum, md5
from tests.support.model_api import Answer, Api, quoted


def ok(answer: Answer, *expected: int) -> Answer:
    assert answer.status in expected, (answer.status, answer.body[:2000])
    return answer


def assert_reads_as(
    reader: Api,
    zarr_id: str,
    files: dict[str, bytes],
    every_path: list[str],
    directories: list[str],
    where: str,
) -> None:
    """The archive or version ``zarr_id`` holds exactly ``files``, through every read route:
    its checksum, the recursive and the DANDI listings, the tree digest of each of
    ``directories`` (404 for those it lacks), the ``/zarr/`` root index, the manifest's
    entries, and the bytes of each of ``every_path`` (404 for those it lacks)."""

    def get(path: str, **params: str) -> Answer:
        return reader.request("GET", path, params=params or None)

    expected = {p: md5(b) for p, b in files.items()}
    detail = ok(get(f"/api/zarr/{zarr_id}/"), 200).json()
    summary = (checksum_of(files), len(files), sum(map(len, files.values())))
    assert (detail["checksum"], detail["file_count"], detail["size"]) == summary, where
    assert detail["checksum_status"] == "complete", where
    listed = ok(get(f"/api/zarr/{zarr_id}/files/", recursive="true", limit="10000"), 200)
    assert {e["path"]: e["digest"] for e in listed.json()["results"]} == expected, where
    dandi = ok(get(f"/api/zarr/{zarr_id}/files/"), 200).json()
    assert {e["Key"]: e["ETag"] for e in dandi["results"]} == expected, where
    assert dandi["count"] == len(files), where
    for directory in ["", *directories]:
        below = _below(files, directory)
        tree = get(f"/api/zarr/{zarr_id}/tree/{quoted(directory)}")
        if directory and not below:
            assert tree.status == 404, (where, directory, tree.status)
            continue
        assert tree.status == 200, (where, directory, tree.body[:500])
        assert tree.json()["digest"] == checksum_of(below), (where, directory)
    index = ok(
        reader.request("GET", f"/zarr/{zarr_id}/", headers={"Accept": "application/json"}), 200
    ).json()
    assert index["digest"] == summary[0], where
    assert {e["name"] for e in index["entries"]} == _children(files), where
    manifest = ok(get(f"/api/zarr/{zarr_id}/manifest.json"), 200).json()
    assert set(manifest["refs"]) == set(files), where
    assert manifest["dandizarr"]["checksum"] == summary[0], where
    for path in every_path:
        read = get(f"/zarr/{zarr_id}/{quoted(path)}")
        if path in files:
            assert (read.status, read.body) == (200, files[path]), (where, path, read.status)
        else:
            assert read.status == 404, (where, path, read.status)


def ancestors_of(paths: list[str]) -> list[str]:
    """Every directory holding one of ``paths``, the root aside."""
    return sorted({d for p in paths for d in _ancestors(p)})


def checksum_of(files: dict[str, bytes]) -> str:
    return expected_checksum(dict(sorted(files.items())))


def _ancestors(path: str) -> list[str]:
    found = []
    directory = posixpath.dirname(path)
    while directory:
        found.append(directory)
        directory = posixpath.dirname(directory)
    return found


def _below(files: dict[str, bytes], directory: str) -> dict[str, bytes]:
    if not directory:
        return files
    prefix = directory + "/"
    return {p[len(prefix) :]: b for p, b in files.items() if p.startswith(prefix)}


def _children(files: dict[str, bytes]) -> set[str]:
    return {p.split("/", 1)[0] for p in files}
