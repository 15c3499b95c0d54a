"""Write sessions (docs/writing.md) through the API: real PUTs to moto's S3 or the local
backend, PostgreSQL, tasks inline. Staged files are visible on no route before the commit,
every one after it; an abort, a conflict or bad input changes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from dandizarr_server.zarr_api.domain.keys import session_prefix
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed
from dandizarr_server.zarr_api.models import Batch, FileHistory, SessionFile, WriteSession
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.lookups import archive_get
from dandizarr_server.zarr_api.services.audit import archive_audit
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from dandizarr_server.zarr_api.services.session_commits import staged_files_verify
from tests.support.api import (
    Actor,
    create_archive,
    db_snapshot,
    expected_checksum,
    md5,
    put,
    storage_listing,
    upload,
)
from tests.support.tree_check import assert_tree_matches_storage

BASE = {"keep": b"kept", "gone": b"to be deleted", "over": b"old bytes", "d/x": b"x"}


def begin(actor: Actor, zarr_id: str) -> str:
    response = actor.client.post(f"/api/zarr/{zarr_id}/sessions/")
    assert response.status_code == 201, response.content
    assert response.json()["state"] == "open"
    return str(response.json()["session_id"])


def stage(actor: Actor, zarr_id: str, session: str, files: dict[str, bytes]) -> None:
    response = actor.client.post(
        f"/api/zarr/{zarr_id}/sessions/{session}/files/",
        [{"path": p, "etag": md5(b), "size": len(b)} for p, b in files.items()],
        format="json",
    )
    assert response.status_code == 200, response.content
    for target in response.json():
        assert put(target["upload_url"], files[target["path"]]).status_code == 200


def delete(actor: Actor, zarr_id: str, session: str, paths: list[str]) -> None:
    response = actor.client.post(
        f"/api/zarr/{zarr_id}/sessions/{session}/deletions/",
        [{"path": p} for p in paths],
        format="json",
    )
    assert response.status_code == 204, response.content


def commit(actor: Actor, zarr_id: str, session: str) -> Any:
    return actor.client.post(f"/api/zarr/{zarr_id}/sessions/{session}/commit/")


def visible(zarr_id: str) -> dict[str, bytes]:
    """Every file the draft shows, read through ``/zarr/`` (anonymous, as any reader)."""
    client = Client()
    listing = client.get(f"/api/zarr/{zarr_id}/files/?recursive=true&limit=10000").json()
    files = {}
    for entry in listing["results"]:
        read: Any = client.get(f"/zarr/{zarr_id}/{entry['path']}")
        assert read.status_code == 200, entry
        files[entry["path"]] = b"".join(read.streaming_content)
    return files


def checksum(actor: Actor, zarr_id: str) -> str:
    return str(actor.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"])


def test_nothing_is_visible_before_the_commit_and_everything_after(
    owner: Actor, archive: str
) -> None:
    assert upload(owner.client, archive, BASE).status_code == 200
    session = begin(owner, archive)
    stage(owner, archive, session, {"new/a": b"A" * 100, "over": b"new bytes"})
    delete(owner, archive, session, ["gone", "never-was"])
    # Staged and deleted, not committed: every route shows the draft as it was.
    assert visible(archive) == BASE
    assert checksum(owner, archive) == expected_checksum(BASE)
    assert Client().get(f"/zarr/{archive}/new/a").status_code == 404
    # The writer's own changes, for its reads.
    changes = owner.client.get(f"/api/zarr/{archive}/sessions/{session}/changes/?urls=true").json()[
        "results"
    ]
    assert [(c["path"], c["deleted"]) for c in changes] == [
        ("gone", True),
        ("never-was", True),
        ("new/a", False),
        ("over", False),
    ]
    response = commit(owner, archive, session)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "committed"
    after = {"keep": b"kept", "over": b"new bytes", "d/x": b"x", "new/a": b"A" * 100}
    assert visible(archive) == after
    assert checksum(owner, archive) == expected_checksum(after)
    batch = Batch.objects.get(pk=response.json()["batch"])
    assert (batch.kind, batch.state) == ("session", "applied")
    # The deleted file's and the overwritten file's loose objects are gone: storage holds
    # what the tree says (the sweep's settle ran with the tree update's task).
    assert set(storage_listing(archive)) == {"keep", "d/x"}
    assert_tree_matches_storage(archive)
    assert not SessionFile.objects.exists()
    assert WriteSession.objects.get(session_id=session).cleaned


def test_abort_leaves_the_draft_as_it_was_and_deletes_what_was_staged(
    owner: Actor, archive: str
) -> None:
    assert upload(owner.client, archive, BASE).status_code == 200
    before = db_snapshot()
    session = begin(owner, archive)
    stage(owner, archive, session, {"over": b"new", "n": b"n"})
    delete(owner, archive, session, ["keep"])
    assert list(get_store().list(session_prefix(archive, session)))
    response = owner.client.delete(f"/api/zarr/{archive}/sessions/{session}/")
    assert response.status_code == 204, response.content
    assert visible(archive) == BASE
    assert db_snapshot() == before
    assert list(get_store().list(session_prefix(archive, session))) == []
    again = commit(owner, archive, session)
    assert (again.status_code, again.json()["code"]) == (409, "session_ended")
    assert visible(archive) == BASE


def test_a_conflicting_change_refuses_the_commit_and_changes_nothing(
    owner: Actor, zarr_id: str
) -> None:
    assert upload(owner.client, zarr_id, BASE).status_code == 200
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"over": b"session's", "other": b"o"})
    # The draft changes at a path the session wrote, by an ordinary upload meanwhile.
    assert upload(owner.client, zarr_id, {"over": b"uploaded"}).status_code == 200
    before = db_snapshot()
    files = visible(zarr_id)
    response = commit(owner, zarr_id, session)
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "session_conflict"
    assert response.json()["paths"] == ["over"]
    assert (db_snapshot(), visible(zarr_id)) == (before, files)
    # The session stays open: abort it (or begin again).
    assert WriteSession.objects.get(session_id=session).state == "open"


def test_a_file_made_where_the_session_wrote_a_directory_conflicts(
    owner: Actor, zarr_id: str
) -> None:
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"a/b": b"b"})
    assert upload(owner.client, zarr_id, {"a": b"file"}).status_code == 200
    response = commit(owner, zarr_id, session)
    assert (response.status_code, response.json()["code"]) == (409, "session_conflict")


def test_disjoint_sessions_and_an_upload_all_commit(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, BASE).status_code == 200
    first, second = begin(owner, zarr_id), begin(owner, zarr_id)
    stage(owner, zarr_id, first, {"one/a": b"1"})
    stage(owner, zarr_id, second, {"two/a": b"2"})
    # An ordinary upload batch is open while both sessions commit: sessions take no slot.
    assert upload(owner.client, zarr_id, {"three": b"3"}, complete=False).status_code == 200
    assert commit(owner, zarr_id, second).status_code == 200
    assert commit(owner, zarr_id, first).status_code == 200
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    expected = BASE | {"one/a": b"1", "two/a": b"2", "three": b"3"}
    assert visible(zarr_id) == expected
    assert checksum(owner, zarr_id) == expected_checksum(expected)
    assert_tree_matches_storage(zarr_id)


def test_a_session_overwrites_its_own_writes_and_a_packed_file(owner: Actor, zarr_id: str) -> None:
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"f": b"first", "g": b"g"})
    stage(owner, zarr_id, session, {"f": b"second"})
    delete(owner, zarr_id, session, ["g"])
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(zarr_id) == {"f": b"second"}
    # A second session overwrites the first's file (a one-member shard) and deletes nothing.
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"f": b"third"})
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(zarr_id) == {"f": b"third"}
    assert checksum(owner, zarr_id) == expected_checksum({"f": b"third"})
    assert_tree_matches_storage(zarr_id)


def test_bad_input_is_refused_and_changes_nothing(
    owner: Actor, stranger: Actor, zarr_id: str, settings: Any
) -> None:
    session = begin(owner, zarr_id)
    url = f"/api/zarr/{zarr_id}/sessions/{session}"
    for body in (
        [{"path": "../x", "etag": md5(b"x"), "size": 1}],
        [{"path": "a//b", "etag": md5(b"x"), "size": 1}],
        [{"path": "x", "etag": "nope", "size": 1}],
        [{"path": "x", "etag": md5(b"x")}],  # no size
        [{"path": "x", "etag": md5(b"x"), "size": -1}],
        {"path": "x"},
        [],
    ):
        response = owner.client.post(f"{url}/files/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["code"], (body, response.content)
    settings.DANDIZARR_WRITE_SESSION_FILE_LIMIT = 2
    response = owner.client.post(
        f"{url}/files/",
        [{"path": p, "etag": md5(b"x"), "size": 1} for p in ("a", "b", "c")],
        format="json",
    )
    assert (response.status_code, response.json()["code"]) == (400, "session_too_large")
    # A file staged and not PUT: the commit names it and changes nothing.
    owner.client.post(f"{url}/files/", [{"path": "a", "etag": md5(b"x"), "size": 1}], format="json")
    response = commit(owner, zarr_id, session)
    assert (response.status_code, response.json()["code"]) == (400, "session_incomplete")
    assert response.json()["missing"] == ["a"]
    # Strangers: the archive is theirs to read, not to write.
    assert stranger.client.post(f"/api/zarr/{zarr_id}/sessions/").status_code == 403
    assert stranger.client.post(f"{url}/commit/").status_code == 403
    assert Client().post(f"/api/zarr/{zarr_id}/sessions/").status_code == 401
    # No such session, or not one: 404.
    assert owner.client.get(f"/api/zarr/{zarr_id}/sessions/nope/").status_code == 404
    other = "00000000-0000-4000-8000-000000000000"
    assert owner.client.post(f"/api/zarr/{zarr_id}/sessions/{other}/commit/").status_code == 404
    assert Batch.objects.count() == 0


def test_the_commit_verifies_under_its_lock_what_was_staged_after_its_first_pass(
    owner: Actor, zarr_id: str
) -> None:
    """The commit proves every staged file outside its lock, then under it only the files
    staged meanwhile (their ids not among those proven): one staged and never PUT is named,
    one PUT is proven, and the first pass's files are not asked for again."""
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"a": b"first", "b": b"second"})
    row = WriteSession.objects.get(session_id=session)
    proven = staged_files_verify(row)
    assert proven == set(SessionFile.objects.filter(session=row).values_list("pk", flat=True))
    url = f"/api/zarr/{zarr_id}/sessions/{session}/files/"
    late = owner.client.post(url, [{"path": "c", "etag": md5(b"c"), "size": 1}], format="json")
    assert late.status_code == 200, late.content
    with pytest.raises(ValidationFailed) as refused:
        staged_files_verify(row, proven)
    assert (refused.value.code, refused.value.extra["missing"]) == ("session_incomplete", ["c"])
    assert put(late.json()[0]["upload_url"], b"c").status_code == 200
    c = SessionFile.objects.get(session=row, path="c").pk
    assert staged_files_verify(row, proven) == {c}
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(zarr_id) == {"a": b"first", "b": b"second", "c": b"c"}


def test_a_path_staged_twice_takes_its_first_put_late_on_the_local_backend_until_the_end(
    owner: Actor, dandiset: str, local_storage: str
) -> None:
    """A path written twice in a session (xarray rewrites its metadata) has a second key while
    the first PUT may still be in flight: the local backend takes that PUT while the session
    is open, as S3 does (the object no row names, collected later), and the commit makes the
    second write visible; once the session ended, the first URL is refused."""
    zarr_id = create_archive(owner, dandiset, "twice.zarr", layout="loose")
    session = begin(owner, zarr_id)
    url = f"/api/zarr/{zarr_id}/sessions/{session}/files/"
    first, second = (
        owner.client.post(url, [{"path": "f", "etag": md5(b), "size": len(b)}], format="json")
        for b in (b"first", b"second")
    )
    assert put(second.json()[0]["upload_url"], b"second").status_code == 200
    assert put(first.json()[0]["upload_url"], b"first").status_code == 200  # late
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(zarr_id) == {"f": b"second"}
    assert put(first.json()[0]["upload_url"], b"first").status_code == 403


def test_a_session_past_its_byte_limit_or_ended_is_refused_and_changes_nothing(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    """What a session may stage is bounded in bytes as in paths (a path written again counts
    once, at its new size); past it, or once the session ended, a write is a 4xx with its code
    and nothing is recorded."""
    settings.DANDIZARR_WRITE_SESSION_BYTE_LIMIT = 10
    session = begin(owner, zarr_id)
    url = f"/api/zarr/{zarr_id}/sessions/{session}"

    def declare(files: dict[str, int]) -> Any:
        body = [{"path": p, "etag": md5(b"x" * n), "size": n} for p, n in files.items()]
        return owner.client.post(f"{url}/files/", body, format="json")

    assert declare({"x": 6}).status_code == 200
    refused = declare({"y": 5})
    assert (refused.status_code, refused.json()["code"]) == (400, "session_too_large")
    assert "10" in refused.json()["detail"]
    assert declare({"x": 4, "y": 5}).status_code == 200  # x counts once, at its new size
    assert sorted(SessionFile.objects.values_list("path", "size")) == [("x", 4), ("y", 5)]
    assert declare({"z": 11}).json()["code"] == "session_too_large"
    assert owner.client.delete(url + "/").status_code == 204
    for late in (
        declare({"w": 1}),
        owner.client.post(f"{url}/deletions/", [{"path": "x"}], format="json"),
        commit(owner, zarr_id, session),
    ):
        assert (late.status_code, late.json()["code"]) == (409, "session_ended")
    assert not SessionFile.objects.exists() and Batch.objects.count() == 0


def test_a_commit_twice_or_on_a_deleted_archive_is_refused_and_changes_nothing(
    owner: Actor, zarr_id: str
) -> None:
    """A session committed is ended (a second commit or write is 409 ``session_ended``, the
    draft as the first left it); under an archive id that names none, 404 with its code."""
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"a": b"first"})
    assert commit(owner, zarr_id, session).status_code == 200
    after = checksum(owner, zarr_id)
    batches = Batch.objects.count()
    again = commit(owner, zarr_id, session)
    assert (again.status_code, again.json()["code"]) == (409, "session_ended")
    url = f"/api/zarr/{zarr_id}/sessions/{session}"
    late = owner.client.post(
        f"{url}/files/", [{"path": "b", "etag": md5(b"b"), "size": 1}], format="json"
    )
    assert (late.status_code, late.json()["code"]) == (409, "session_ended")
    assert (Batch.objects.count(), checksum(owner, zarr_id)) == (batches, after)
    assert visible(zarr_id) == {"a": b"first"}

    # Archives are never deleted (their versions protect the row): an archive id that names
    # none, its session's commit with it, is 404 with its code, as any unknown archive is.
    missing = "00000000-0000-4000-8000-000000000000"
    for refused in (
        commit(owner, missing, session),
        owner.client.post(f"/api/zarr/{missing}/sessions/{session}/files/", [], format="json"),
    ):
        assert refused.status_code == 404, refused.content
        assert refused.json()["code"], refused.content
    assert Batch.objects.count() == batches


def test_a_version_is_read_only_and_a_session_conflicts_with_a_reset(
    owner: Actor, dandiset: str, local_storage: str
) -> None:
    ensure_storage_versioning()
    zarr_id = create_archive(owner, dandiset, "v.zarr", layout="loose")
    assert upload(owner.client, zarr_id, BASE).status_code == 200
    owner.client.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        {"path": "a.zarr", "zarr_id": zarr_id, "metadata": {}},
        format="json",
    )
    assert (
        owner.client.post(f"/api/dandisets/{dandiset}/versions/draft/publish/").status_code == 201
    )
    version_id = owner.client.get(f"/api/zarr/{zarr_id}/versions/").json()["results"][0]["zarr_id"]
    response = owner.client.post(f"/api/zarr/{version_id}/sessions/")
    assert (response.status_code, response.json()["code"]) == (409, "version_read_only")
    # The draft changes after the session began, then goes back to the version: a change
    # of the session's paths all the same.
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"over": b"s"})
    assert upload(owner.client, zarr_id, {"over": b"changed"}).status_code == 200
    assert owner.client.post(f"/api/zarr/{zarr_id}/versions/1/reset/").status_code == 202
    assert commit(owner, zarr_id, session).status_code == 409
    # A version keeps its bytes whatever a session does to the draft.
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"over": b"s"})
    delete(owner, zarr_id, session, ["keep"])
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(version_id) == BASE
    assert visible(zarr_id) == {"gone": BASE["gone"], "over": b"s", "d/x": b"x"}


def test_an_expired_session_is_ended_and_its_objects_collected(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    assert upload(owner.client, zarr_id, BASE).status_code == 200
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"over": b"never committed"})
    prefix = session_prefix(zarr_id, session)
    # Garbage collection with no window keeps what an open session staged...
    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    archive_garbage_collect(archive_get(zarr_id, None), dry_run=False, now=timezone.now())
    assert len(list(get_store().list(prefix))) == 1
    WriteSession.objects.update(expires=timezone.now() - timedelta(seconds=1))
    assert write_sessions_sweep() == 1
    assert WriteSession.objects.get(session_id=session).state == "expired"
    assert list(get_store().list(prefix)) == []
    response = commit(owner, zarr_id, session)
    assert (response.status_code, response.json()["code"]) == (409, "session_ended")
    # The next session commits.
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"over": b"next"})
    assert commit(owner, zarr_id, session).status_code == 200
    # ... and keeps, once committed, the shard its file became.
    archive_garbage_collect(archive_get(zarr_id, None), dry_run=False, now=timezone.now())
    assert visible(zarr_id) == BASE | {"over": b"next"}


def test_a_session_reads_the_draft_as_it_began_and_its_history_goes_with_it(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    """Snapshot isolation: what commits after a session began (an upload replacing and
    adding, a deletion) is not what the session reads by its ``read_id``, on every read route;
    the snapshot is no version of the archive, read-only, and when the session ends it goes, its
    history rows are pruned and garbage collection takes the objects only it kept."""
    assert upload(owner.client, zarr_id, BASE).status_code == 200
    session = begin(owner, zarr_id)
    read_id = owner.client.get(f"/api/zarr/{zarr_id}/sessions/{session}/").json()["read_id"]
    assert read_id and read_id != zarr_id
    stage(owner, zarr_id, session, {"new": b"staged"})
    assert upload(owner.client, zarr_id, {"over": b"changed", "added": b"a"}).status_code == 200
    gone = owner.client.delete(f"/api/zarr/{zarr_id}/files/", [{"path": "gone"}], format="json")
    assert gone.status_code == 204, gone.content
    now = {"keep": b"kept", "over": b"changed", "d/x": b"x", "added": b"a"}
    assert visible(zarr_id) == now
    assert visible(read_id) == BASE  # the listing, each file's bytes through /zarr/
    assert checksum(owner, read_id) == expected_checksum(BASE)
    detail = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert detail["version_count"] == 0
    assert owner.client.get(f"/api/zarr/{zarr_id}/versions/").json()["results"] == []
    refused = owner.client.post(f"/api/zarr/{read_id}/sessions/")
    assert (refused.status_code, refused.json()["code"]) == (409, "version_read_only")
    assert FileHistory.objects.count() == 3  # over, gone, added: what the snapshot reads
    assert owner.client.delete(f"/api/zarr/{zarr_id}/sessions/{session}/").status_code == 204
    assert owner.client.get(f"/api/zarr/{read_id}/").status_code == 404
    assert owner.client.get(f"/api/zarr/{zarr_id}/sessions/{session}/").json()["read_id"] is None
    assert FileHistory.objects.count() == 0  # no version reads them any more
    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    report = archive_garbage_collect(archive_get(zarr_id, None), dry_run=False, now=timezone.now())
    assert report.reclaimed_objects >= 2  # the old "over" and "gone"
    assert visible(zarr_id) == now
    assert_tree_matches_storage(zarr_id)


@pytest.mark.parametrize("layout", ["sharded"])
def test_a_sharded_archive_takes_a_session(
    owner: Actor, dandiset: str, s3_storage: str, layout: str
) -> None:
    from tests.support.api import create_archive

    zarr_id = create_archive(owner, dandiset, "s.zarr", layout=layout)
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"zarr.json": b"{}", "c/0": b"\x00" * 64})
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(zarr_id) == {"zarr.json": b"{}", "c/0": b"\x00" * 64}
    assert_tree_matches_storage(zarr_id)


def test_an_audit_keeps_what_an_open_session_staged(owner: Actor, zarr_id: str) -> None:
    assert upload(owner.client, zarr_id, BASE).status_code == 200
    # A committed session: the archive has shards, so the audit looks for orphan shards.
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"new": b"first"})
    assert commit(owner, zarr_id, session).status_code == 200
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, {"over": b"staged"})
    report = archive_audit(archive_get(zarr_id, None))
    assert report.orphan_shards_deleted == []
    assert commit(owner, zarr_id, session).status_code == 200
    assert visible(zarr_id) == BASE | {"new": b"first", "over": b"staged"}
    assert not archive_audit(archive_get(zarr_id, None)).drift
