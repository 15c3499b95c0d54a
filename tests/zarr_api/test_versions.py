"""Archive versions (docs/versions.md): publish makes an immutable version of each archive, the
draft stays editable, every version stays readable, and nothing is copied in storage.

On the local store (hard links) and SeaweedFS (a real S3 with bucket versioning)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from django.db import connection
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.audit import archive_audit
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import Actor, create_archive, expected_checksum, md5, upload
from tests.support.fixture_params import fixture_params
from tests.support.versions import add_asset, publish, read, state_of, versions

VERSIONED_BACKENDS = {"local": "local_storage", "seaweedfs": "seaweedfs_storage"}


@pytest.fixture(params=fixture_params(VERSIONED_BACKENDS))
def versioned_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store keeping object versions from the start, as ``ensure_bucket`` sets one up."""
    request.getfixturevalue(VERSIONED_BACKENDS[request.param])
    ensure_storage_versioning()
    yield request.param


def delete(actor: Actor, zarr_id: str, *paths: str) -> None:
    response = actor.client.delete(
        f"/api/zarr/{zarr_id}/files/", [{"path": p} for p in paths], format="json"
    )
    assert response.status_code == 204, response.content


def checksum_of(files: dict[str, bytes]) -> str:
    return expected_checksum(dict(sorted(files.items())))


STATE_1 = {"a/x": b"x one", "a/y": b"y one", "keep": b"kept", "a/b/deep": b"deep"}
STATE_2 = {"a/x": b"x two", "keep": b"kept", "a/z": b"z two", "a/b/deep": b"deep"}
STATE_3 = {"a/x": b"x three", "a/z": b"z two", "a/b/deep": b"deep", "new/file": b"n"}


def test_publish_change_publish_reads_every_state_exactly(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "v.zarr", layout="loose")
    assets = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    response = owner.client.post(assets, {"path": "v.zarr", "zarr_id": zarr_id}, format="json")
    assert response.status_code == 201, response.content

    assert upload(owner.client, zarr_id, STATE_1).status_code == 200
    published_1 = publish(owner, dandiset)
    # The draft stays editable: overwrite, delete, add.
    assert upload(owner.client, zarr_id, {"a/x": b"x two", "a/z": b"z two"}).status_code == 200
    delete(owner, zarr_id, "a/y")
    published_2 = publish(owner, dandiset)
    assert upload(owner.client, zarr_id, {"a/x": b"x three", "new/file": b"n"}).status_code == 200
    delete(owner, zarr_id, "keep")

    versions = owner.client.get(f"/api/zarr/{zarr_id}/versions/").json()
    assert [v["number"] for v in versions["results"]] == [1, 2]
    v1, v2 = versions["results"]
    assert v1["checksum"] == checksum_of(STATE_1)
    assert v2["checksum"] == checksum_of(STATE_2)
    assert (v1["file_count"], v1["size"]) == (4, sum(map(len, STATE_1.values())))
    assert v1["dandiset_versions"] == [published_1]
    assert v2["dandiset_versions"] == [published_2]

    # Each state, read exactly, by its own id: versions and the draft.
    assert state_of(owner, v1["zarr_id"]) == STATE_1
    assert state_of(owner, v2["zarr_id"]) == STATE_2
    assert state_of(owner, zarr_id) == STATE_3
    draft = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert draft["checksum"] == checksum_of(STATE_3)
    shown = owner.client.get(f"/api/zarr/{v1['zarr_id']}/").json()
    assert shown["checksum"] == v1["checksum"] and shown["version"]["number"] == 1
    assert shown["status"] == "Complete"

    # Never-written and removed files are 404 in the version that lacks them.
    assert read(owner, v1["zarr_id"], "a/z").status_code == 404
    assert read(owner, v2["zarr_id"], "a/y").status_code == 404
    # Ranges and ETags as for the draft.
    ranged = read(owner, v1["zarr_id"], "a/x", HTTP_RANGE="bytes=2-4")
    assert (ranged.status_code, ranged.body) == (206, b"one")
    assert ranged["ETag"] == f'"{md5(b"x one")}"'
    # The .checksum of a directory, per version: what the directory held then.
    directory = owner.client.get(f"/api/zarr/{v1['zarr_id']}/files/a/").json()
    assert {e["name"] for e in directory["results"]} == {"x", "y", "b"}
    a_of_1 = {p[2:]: b for p, b in STATE_1.items() if p.startswith("a/")}
    assert directory["digest"] == checksum_of(a_of_1)

    # What changed between versions, and since.
    changes = owner.client.get(f"/api/zarr/{zarr_id}/versions/1/changes/?against=2").json()
    assert (changes["added"], changes["removed"], changes["changed"]) == (1, 1, 1)
    assert {(c["path"], c["change"]) for c in changes["results"]} == {
        ("a/z", "added"),
        ("a/y", "removed"),
        ("a/x", "changed"),
    }
    since = owner.client.get(f"/api/zarr/{zarr_id}/versions/2/changes/").json()
    assert {(c["path"], c["change"]) for c in since["results"]} == {
        ("a/x", "changed"),
        ("keep", "removed"),
        ("new/file", "added"),
    }

    # The published dandiset versions name their archive versions; the draft names the draft.
    for published, version in ((published_1, v1), (published_2, v2)):
        asset = owner.client.get(f"/api/dandisets/{dandiset}/versions/{published}/assets/")
        (entry,) = asset.json()["results"]
        assert entry["zarr"] == version["zarr_id"]
        assert entry["metadata"]["digest"]["dandi:dandi-zarr-checksum"] == version["checksum"]
    (draft_asset,) = owner.client.get(assets).json()["results"]
    assert draft_asset["zarr"] == zarr_id

    # A version is read-only through every writing route.
    for method, url, body in [
        ("post", f"/api/zarr/{v1['zarr_id']}/upload/", [{"path": "q", "etag": md5(b"q")}]),
        ("delete", f"/api/zarr/{v1['zarr_id']}/files/", [{"path": "keep"}]),
        ("post", f"/api/zarr/{v1['zarr_id']}/pack/", None),
    ]:
        response = getattr(owner.client, method)(url, body, format="json")
        assert response.status_code == 409, (url, response.content)
        assert "read-only" in response.json()["detail"]
    assert state_of(owner, v1["zarr_id"]) == STATE_1


def test_publish_copies_nothing_and_costs_what_changed(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "c.zarr", layout="loose")
    owner.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "c.zarr", "zarr_id": zarr_id},
        format="json",
    )
    files = {f"c/{i}": str(i).encode() for i in range(50)}
    assert upload(owner.client, zarr_id, files).status_code == 200
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    keys_before = {(i.key, i.etag) for i in get_store().list(f"zarr/{zarr_id}/")}
    publish(owner, dandiset)
    # Publishing wrote no object and recorded no file.
    assert {(i.key, i.etag) for i in get_store().list(f"zarr/{zarr_id}/")} == keys_before
    assert archive.history.count() == 0
    assert upload(owner.client, zarr_id, {"c/1": b"changed", "c/new": b"n"}).status_code == 200
    # One row per changed path: the version costs what changed, not what exists.
    assert sorted(archive.history.values_list("path", flat=True)) == ["c/1", "c/new"]
    publish(owner, dandiset)
    assert archive.history.count() == 2


def versions_of(zarr_id: str) -> set[tuple[str, str, bool]]:
    """(path, md5, current) of every object version of the archive's loose files."""
    prefix = f"zarr/{zarr_id}/"
    return {
        (v.key[len(prefix) :], v.etag, v.latest)
        for v in get_store().list_versions(prefix)
        if not v.delete_marker
    }


def test_garbage_collection_deletes_exactly_what_nothing_references(
    owner: Actor, dandiset: str, versioned_backend: str, settings: Any
) -> None:
    zarr_id = create_archive(owner, dandiset, "g.zarr", layout="loose")
    owner.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "g.zarr", "zarr_id": zarr_id},
        format="json",
    )
    assert upload(owner.client, zarr_id, STATE_1).status_code == 200
    publish(owner, dandiset)
    (v1,) = owner.client.get(f"/api/zarr/{zarr_id}/versions/").json()["results"]
    # Draft changes: "x two" is replaced before any publish holds it; "y one" is deleted but
    # version 1 holds it; a cancelled upload and an object the database never knew.
    assert upload(owner.client, zarr_id, {"a/x": b"x two"}).status_code == 200
    assert upload(owner.client, zarr_id, {"a/x": b"x three"}).status_code == 200
    delete(owner, zarr_id, "a/y")
    assert upload(owner.client, zarr_id, {"gone": b"cancelled"}, complete=False)
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    get_store().put(f"zarr/{zarr_id}/stray", b"never known")
    before = versions_of(zarr_id)
    assert ("a/x", md5(b"x two"), False) in before and (
        "stray",
        md5(b"never known"),
        True,
    ) in before

    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    # Within the undelete window nothing goes, and the dry run says what waits.
    report = archive_garbage_collect(archive, dry_run=False)
    assert report.reclaimed_objects == 0 and report.waiting_objects >= 3
    assert versions_of(zarr_id) == before

    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    dry = archive_garbage_collect(archive, dry_run=True)
    assert dry.reclaimed_bytes >= len(b"x two") + len(b"cancelled") + len(b"never known")
    assert versions_of(zarr_id) == before
    report = archive_garbage_collect(archive, dry_run=False)
    assert report.reclaimed_objects == dry.reclaimed_objects
    # Held: what version 1 reads that the draft replaced.
    assert (report.held_objects, report.held_bytes) == (2, len(b"x one") + len(b"y one"))
    after = versions_of(zarr_id)
    assert before - after == {
        ("a/x", md5(b"x two"), False),
        ("gone", md5(b"cancelled"), False),
        ("stray", md5(b"never known"), True),
    }
    # Every state still reads exactly; the API shows what was reclaimed and what is held.
    assert state_of(owner, v1["zarr_id"]) == STATE_1
    assert state_of(owner, zarr_id) == {
        "a/x": b"x three",
        "keep": b"kept",
        "a/b/deep": b"deep",
    }
    shown = owner.client.get(f"/api/zarr/{zarr_id}/").json()["garbage"]
    assert shown["held_bytes"] == report.held_bytes and shown["dry_run"] is False
    # A second run has nothing left to do (it is resumable: the same rule, run again).
    assert archive_garbage_collect(archive, dry_run=False).reclaimed_objects == 0


def test_an_audit_repair_changes_the_draft_only_and_checks_every_version(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "a.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "a.zarr")
    assert upload(owner.client, zarr_id, STATE_1).status_code == 200
    publish(owner, dandiset)
    (v1,) = versions(owner, zarr_id)
    # Writes behind the service: a file deleted, another changed, one added.
    store = get_store()
    store.delete(f"zarr/{zarr_id}/a/y")
    store.put(f"zarr/{zarr_id}/keep", b"changed behind")
    store.put(f"zarr/{zarr_id}/a/b/extra", b"extra")
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert report.drift and report.versions_mismatched == []
    draft = dict(STATE_1, keep=b"changed behind", **{"a/b/extra": b"extra"})
    del draft["a/y"]
    assert state_of(owner, zarr_id) == draft
    assert state_of(owner, v1["zarr_id"]) == STATE_1
    again = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert not again.drift


def test_a_private_archive_version_is_absent_to_strangers(
    owner: Actor, stranger: Actor, versioned_backend: str
) -> None:
    created = owner.client.post("/api/dandisets/?embargo=true", {"name": "p"}, format="json")
    identifier = created.json()["identifier"]
    zarr_id = create_archive(owner, identifier, "p.zarr", layout="loose")
    add_asset(owner, identifier, zarr_id, "p.zarr")
    assert upload(owner.client, zarr_id, {"secret": b"s"}).status_code == 200
    publish(owner, identifier)
    (version,) = versions(owner, zarr_id)
    for reader in (stranger.client, APIClient()):
        for url in (
            f"/zarr/{version['zarr_id']}/secret",
            f"/api/zarr/{version['zarr_id']}/",
            f"/api/zarr/{version['zarr_id']}/files/",
            f"/api/zarr/{version['zarr_id']}/manifest.json",
            f"/api/zarr/{zarr_id}/versions/",
        ):
            response = reader.get(url)
            assert response.status_code == 404, (url, response.status_code)
    assert read(owner, version["zarr_id"], "secret").body == b"s"


def _array_files(array: np.ndarray) -> dict[str, bytes]:
    """A tiny 8x8 Zarr v2 array of uint8, uncompressed."""
    zarray = {
        "zarr_format": 2,
        "shape": [8, 8],
        "chunks": [8, 8],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    return {"img/.zarray": json.dumps(zarray).encode(), "img/0.0": array.astype("uint8").tobytes()}


def test_the_archive_page_shows_each_version_with_its_own_picture(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "page.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "page.zarr")
    gradient = np.arange(64).reshape(8, 8)
    assert upload(owner.client, zarr_id, _array_files(gradient)).status_code == 200
    publish(owner, dandiset)
    (v1,) = versions(owner, zarr_id)
    picture_1 = owner.client.get(f"/archives/{zarr_id}/preview.png?array=img").content
    flipped = _array_files(gradient.T)["img/0.0"]
    assert upload(owner.client, zarr_id, {"img/0.0": flipped}).status_code == 200

    page = owner.client.get(f"/archives/{v1['zarr_id']}/").content.decode()
    assert f'<code class="checksum">{v1["checksum"]}</code>' in page and "version 1" in page
    assert f'href="/archives/{zarr_id}/"' in page  # the switcher: back to the draft
    draft_page = owner.client.get(f"/archives/{zarr_id}/").content.decode()
    assert f'href="/archives/{v1["zarr_id"]}/"' in draft_page
    assert f'<code class="checksum">{v1["checksum"]}</code>' not in draft_page
    version_picture = owner.client.get(f"/archives/{v1['zarr_id']}/preview.png?array=img")
    draft_picture = owner.client.get(f"/archives/{zarr_id}/preview.png?array=img")
    assert version_picture.status_code == draft_picture.status_code == 200
    assert version_picture.content == picture_1 != draft_picture.content


def test_reset_makes_the_draft_a_version_again_and_keeps_every_version(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "r.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "r.zarr")
    assert upload(owner.client, zarr_id, STATE_1).status_code == 200
    publish(owner, dandiset)
    assert upload(owner.client, zarr_id, {"a/x": b"x two", "a/z": b"z two"}).status_code == 200
    delete(owner, zarr_id, "a/y")
    publish(owner, dandiset)
    assert upload(owner.client, zarr_id, {"a/x": b"x three", "new/file": b"n"}).status_code == 200
    delete(owner, zarr_id, "keep")
    v1, v2 = versions(owner, zarr_id)

    response = owner.client.post(f"/api/zarr/{zarr_id}/versions/1/reset/")
    assert response.status_code == 202, response.content
    assert state_of(owner, zarr_id) == STATE_1
    draft = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (draft["checksum"], draft["checksum_status"]) == (v1["checksum"], "complete")
    assert state_of(owner, v1["zarr_id"]) == STATE_1
    assert state_of(owner, v2["zarr_id"]) == STATE_2
    # Nothing differs any more; the reset itself is a change a next version records.
    assert owner.client.get(f"/api/zarr/{zarr_id}/versions/1/changes/").json()["results"] == []
    assert owner.client.post(f"/api/zarr/{zarr_id}/versions/2/reset/").status_code == 202
    assert state_of(owner, zarr_id) == STATE_2
    # Strangers cannot, and a version that does not exist is a 404.
    assert owner.client.post(f"/api/zarr/{zarr_id}/versions/9/reset/").status_code == 404


def test_reset_is_refused_while_an_upload_is_open(
    owner: Actor, stranger: Actor, dandiset: str, versioned_backend: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "o.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "o.zarr")
    assert upload(owner.client, zarr_id, {"f": b"1"}).status_code == 200
    publish(owner, dandiset)
    assert stranger.client.post(f"/api/zarr/{zarr_id}/versions/1/reset/").status_code == 403
    assert upload(owner.client, zarr_id, {"f": b"2"}, complete=False)
    response = owner.client.post(f"/api/zarr/{zarr_id}/versions/1/reset/")
    assert response.status_code == 409 and "in progress" in response.json()["detail"]
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    assert state_of(owner, zarr_id) == {"f": b"2"}


# The collector runs in a thread of its own: the test's rows must be committed.
@pytest.mark.django_db(transaction=True)
def test_garbage_collection_racing_every_change_never_deletes_what_is_read(
    owner: Actor, dandiset: str, versioned_backend: str, settings: Any
) -> None:
    """The collector runs again and again, with no undelete window, while the draft is
    uploaded to, overwritten, deleted from, cancelled, published and reset; afterwards every
    version and the draft read exactly."""
    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    zarr_id = create_archive(owner, dandiset, "race.zarr", layout="loose")
    add_asset(owner, dandiset, zarr_id, "race.zarr")
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    stop = threading.Event()
    runs: list[int] = []
    failures: list[BaseException] = []

    def collect() -> None:
        try:
            while not stop.is_set():
                archive_garbage_collect(archive, dry_run=False)
                runs.append(1)
        except BaseException as error:  # reported by the test
            failures.append(error)
        finally:
            connection.close()

    collector = threading.Thread(target=collect)
    collector.start()
    expected: dict[str, dict[str, bytes]] = {}
    draft: dict[str, bytes] = {}
    try:
        for round_ in range(4):
            changes = {f"r/{i}": f"{round_}-{i}".encode() for i in range(round_, round_ + 6)}
            done = upload(owner.client, zarr_id, changes)
            assert done.status_code == 200, done.content
            draft.update(changes)
            gone = sorted(draft)[round_]
            delete(owner, zarr_id, gone)
            del draft[gone]
            assert upload(owner.client, zarr_id, {"r/cancelled": b"c"}, complete=False)
            assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
            publish(owner, dandiset)
            expected[versions(owner, zarr_id)[-1]["zarr_id"]] = dict(draft)
            if round_ == 2:
                response = owner.client.post(f"/api/zarr/{zarr_id}/versions/1/reset/")
                assert response.status_code == 202, response.content
                draft = dict(next(iter(expected.values())))
    finally:
        stop.set()
        collector.join()
    assert not failures, failures
    assert len(runs) >= 3
    archive_garbage_collect(archive, dry_run=False)
    for version_id, files in expected.items():
        assert state_of(owner, version_id) == files
    assert state_of(owner, zarr_id) == draft
