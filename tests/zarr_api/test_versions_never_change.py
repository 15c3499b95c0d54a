"""Issue #36, as a user found it: a published version's listings, digests and bytes stay what
they were after resets back and forth, overwrites within a generation and deletes (each read
in this process between the changes, as a reader would: a process's cache of a version must
not follow the draft); writes through a version's id answer 409 on every route; publishes are
named as DANDI names them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from dandizarr_server.zarr_api.models import Batch, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support.api import (
    Actor,
    create_archive,
    let_upload_urls_expire,
    md5,
    storage_listing,
    upload,
)
from tests.support.fixture_params import fixture_params
from tests.support.model_api import DjangoApi
from tests.support.processes import Processes
from tests.support.production import ROOT
from tests.support.version_reads import ancestors_of, assert_reads_as
from tests.support.versions import add_asset, publish, versions

# The DANDI Archive's published version names (its Version.VERSION_REGEX, the draft aside).
DANDI_PUBLISHED_NAME = re.compile(r"0\.\d{6}\.\d{4}")


VERSIONED_BACKENDS = {"local": "local_storage", "seaweedfs": "seaweedfs_storage"}


@pytest.fixture(params=fixture_params(VERSIONED_BACKENDS))
def versioned_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store keeping object versions from the start, as ``ensure_bucket`` sets one up (the
    local one served by the live server: the test's rows committed, for its thread to see)."""
    request.getfixturevalue(VERSIONED_BACKENDS[request.param])
    ensure_storage_versioning()
    yield request.param


class Archive:
    """One archive of a dandiset, changed and read through the API as its owner."""

    def __init__(self, owner: Actor, dandiset: str) -> None:
        self.owner = owner
        self.dandiset = dandiset
        self.zarr_id = create_archive(owner, dandiset, "v.zarr", layout="loose")
        add_asset(owner, dandiset, self.zarr_id, "v.zarr")
        self.reader = DjangoApi(owner.client)
        self.states: dict[str, dict[str, bytes]] = {}  # version zarr_id -> files

    def upload(self, files: dict[str, bytes]) -> None:
        assert upload(self.owner.client, self.zarr_id, files).status_code == 200

    def delete(self, *paths: str) -> None:
        response = self.owner.client.delete(
            f"/api/zarr/{self.zarr_id}/files/", [{"path": p} for p in paths], format="json"
        )
        assert response.status_code == 204, response.content

    def publish(self, files: dict[str, bytes]) -> str:
        publish(self.owner, self.dandiset)
        version_id = str(versions(self.owner, self.zarr_id)[-1]["zarr_id"])
        self.states[version_id] = dict(files)
        return version_id

    def reset(self, number: int) -> None:
        response = self.owner.client.post(f"/api/zarr/{self.zarr_id}/versions/{number}/reset/")
        assert response.status_code == 202, response.content

    def assert_versions_exact(self) -> None:
        """Every version reads as published, through every read route."""
        paths = sorted({p for files in self.states.values() for p in files})
        for version_id, files in self.states.items():
            assert_reads_as(
                self.reader, version_id, files, paths, ancestors_of(paths), f"version {version_id}"
            )


def test_resets_back_and_forth_leave_every_version_as_published(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    """Case 1: publish, change, publish, reset to 1, reset to 2: version 1 listed version 2's
    tree (d.txt, which then 404s, and no b.txt) while its checksum and bytes were still 1's."""
    archive = Archive(owner, dandiset)
    first = {"a.txt": b"A1", "b.txt": b"B1", "c.txt": b"C1"}
    archive.upload(first)
    archive.publish(first)
    archive.upload({"a.txt": b"A2", "d.txt": b"D2"})
    archive.delete("b.txt")
    archive.publish({"a.txt": b"A2", "c.txt": b"C1", "d.txt": b"D2"})
    archive.reset(1)
    archive.assert_versions_exact()
    archive.reset(2)
    archive.assert_versions_exact()


def test_a_delete_in_the_draft_never_leaves_a_version(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    """Case 2: a path overwritten and put back within a generation, then deleted in the draft:
    versions 1 and 2 lost e/f/g from their listings."""
    archive = Archive(owner, dandiset)
    files = {"e/f/g": b"G", "top": b"T"}
    archive.upload(files)
    archive.publish(files)
    archive.publish(files)
    archive.upload({"e/f/g": b"G2"})
    archive.upload({"e/f/g": b"G"})
    archive.assert_versions_exact()
    archive.delete("e/f/g")
    archive.assert_versions_exact()


def test_an_overwrite_after_a_reset_never_shows_in_a_version(
    owner: Actor, dandiset: str, versioned_backend: str
) -> None:
    """Case 2: overwrites and a reset to version 1, a new file (version 1 read after it), then
    an overwrite: version 1's listing showed the later md5 of b/c.bin."""
    archive = Archive(owner, dandiset)
    archive.upload({"b/c.bin": b"C1", "b/keep": b"K"})
    archive.publish({"b/c.bin": b"C1", "b/keep": b"K"})
    archive.upload({"b/c.bin": b"C2"})
    archive.publish({"b/c.bin": b"C2", "b/keep": b"K"})
    archive.upload({"b/c.bin": b"C3"})
    archive.reset(1)
    archive.upload({"z": b"Z"})
    archive.assert_versions_exact()
    archive.upload({"b/c.bin": b"C4"})
    archive.assert_versions_exact()


def test_every_write_through_a_version_id_answers_409_and_changes_nothing(
    owner: Actor, stranger: Actor, dandiset: str, local_storage: str
) -> None:
    """The read-only rule in one place (``archive_for_write``), for every route that writes
    through an archive's id; the draft's open upload is left as it was."""
    ensure_storage_versioning()
    archive = Archive(owner, dandiset)
    archive.upload({"keep": b"K"})
    version_id = archive.publish({"keep": b"K"})
    assert upload(owner.client, archive.zarr_id, {"open": b"O"}, complete=False)
    version = f"/api/zarr/{version_id}"
    files = [{"path": "new", "etag": md5(b"n")}]
    shard = {"name": "s", "etag": md5(b"s"), "size": 1, "members": []}
    answers = []
    for method, url, body in [
        ("post", f"{version}/upload/", files),
        ("post", f"{version}/upload/", {"shards": [shard]}),
        ("post", f"{version}/upload/add/", files),
        ("post", f"{version}/upload/complete/", None),
        ("delete", f"{version}/upload/", None),
        ("post", f"{version}/pack/", None),
        ("delete", f"{version}/files/", [{"path": "keep"}]),
        ("delete", f"{version}/files", [{"path": "keep"}]),
        ("post", f"{version}/files/", [{"path": "new", "base64md5": "x"}]),
        ("post", f"{version}/finalize/", None),
        ("post", f"{version}/ingest/", None),
        ("post", f"{version}/versions/1/reset/", None),
    ]:
        response = getattr(owner.client, method)(url, body, format="json")
        shown = response.json() if response.status_code != 204 else {}
        refused = "read-only" in shown.get("detail", "")
        answers.append((method, url, response.status_code, shown.get("code"), refused))
    assert answers == [(m, u, 409, "version_read_only", True) for m, u, *_ in answers]
    archive.assert_versions_exact()
    draft = ZarrArchive.objects.get(zarr_id=archive.zarr_id)
    assert list(Batch.objects.filter(archive=draft).values_list("state", flat=True)) == [
        Batch.State.APPLIED,
        Batch.State.OPEN,
    ]
    # A stranger learns nothing: a private version's id answers as a missing one.
    private = owner.client.post("/api/dandisets/?embargo=true", {"name": "p"}, format="json")
    hidden = Archive(owner, private.json()["identifier"])
    hidden.upload({"s": b"S"})
    hidden_id = hidden.publish({"s": b"S"})
    for client in (APIClient(), stranger.client):
        response = client.post(f"/api/zarr/{hidden_id}/versions/1/reset/")
        assert response.status_code in (401, 404), response.content


def test_publishes_are_named_as_dandi_names_them_the_next_free_minute_on(
    owner: Actor, dandiset: str, local_storage: str, settings: Any
) -> None:
    """0.YYMMDD.HHMM (what every DANDI client parses), a collision taking the next free minute:
    three publishes within a second were 0.YYMMDD.HHMMSS, then .1 and .2 added."""
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "publishes": "1000/hour"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    ensure_storage_versioning()
    archive = Archive(owner, dandiset)
    archive.upload({"f": b"1"})
    names = [publish(owner, dandiset) for _ in range(3)]
    for name in names:
        assert DANDI_PUBLISHED_NAME.fullmatch(name), names
    minutes = [datetime.strptime(name, "0.%y%m%d.%H%M") for name in names]
    assert minutes[1] - minutes[0] == minutes[2] - minutes[1] == timedelta(minutes=1), names
    listed = owner.client.get(f"/api/dandisets/{dandiset}/versions/").json()["results"]
    assert {v["version"] for v in listed} >= set(names)


def test_an_audit_killed_once_it_wrote_listings_leaves_every_version_as_published(
    owner: Actor, dandiset: str, local_storage: str, settings: Any, processes: Processes
) -> None:
    """A repair's listings show in storage as they are written, its transaction's rows only
    at its commit: the rows of what it replaces are committed first. Killed after writing (a
    crash point), the audit left version 1 reading the drifted file from the draft's storage
    (a fresh process's audit found version 1's tree no longer hashing to its checksum)."""
    ensure_storage_versioning()
    archive = Archive(owner, dandiset)
    files = {"a/x": b"X", "keep": b"K"}
    archive.upload(files)
    archive.publish(files)
    get_store().put(f"zarr/{archive.zarr_id}/keep", b"changed behind the service")
    database = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://{database['USER'] or 'postgres'}@{database['HOST']}:"
        f"{database['PORT'] or 5432}/{database['NAME']}",
        "DANDIZARR_STORAGE": "local",
        "DANDIZARR_LOCAL_STORAGE_DIR": str(settings.DANDIZARR_LOCAL_STORAGE_DIR),
        "DANDIZARR_SECRET_KEY": settings.SECRET_KEY,
    }

    def audit(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return processes.run(
            [sys.executable, "manage.py", "audit_zarr", *args, archive.zarr_id],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )

    killed = audit(DANDIZARR_CRASH_AT="audit:listings-written")
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)
    # A process of its own: nothing of the draft's listings cached from before.
    report = audit("--report-only")
    assert report.returncode == 0, report.stderr
    assert "versions whose tree differs from their checksum: []" in report.stdout, report.stdout
    archive.assert_versions_exact()


def test_a_reset_leaves_no_file_in_storage_that_the_draft_lacks(
    owner: Actor, dandiset: str, seaweedfs_storage: str
) -> None:
    """A reset removed from the draft's tree the files the version lacks but left their
    objects: once the upload URLs expired, reconciliation took storage for the truth and put
    them back into the draft (the long model walk found it)."""
    ensure_storage_versioning()
    archive = Archive(owner, dandiset)
    archive.upload({"keep": b"K"})
    archive.publish({"keep": b"K"})
    archive.upload({"extra": b"E", "keep": b"K2"})
    archive.reset(1)
    let_upload_urls_expire()
    draft = {"keep": b"K"}
    assert_reads_as(archive.reader, archive.zarr_id, draft, ["extra", "keep"], [], "draft")
    assert storage_listing(archive.zarr_id) == {"keep": (1, md5(b"K"))}
    archive.assert_versions_exact()
