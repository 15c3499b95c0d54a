"""Big files of write sessions (docs/writing.md, "Big files") through the API, on moto and on
SeaweedFS (a real S3: Content-MD5 enforced), with 5 MiB parts: each part's URL bound to its
md5, completed at the finish, the md5 proven from the bytes before the commit applies; a wrong
md5 fails the commit's batch and changes nothing; an abort, an expiry and the sweep leave no
upload and no part behind."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone

from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import part_ranges
from dandizarr_server.zarr_api.domain.keys import SHARDS_ROOT, session_prefix
from dandizarr_server.zarr_api.models import Batch, MultipartUpload, WriteSession
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.multipart_uploads import abandoned_uploads_abort
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from tests.support.api import Actor, create_archive, expected_checksum, upload
from tests.support.fixture_params import fixture_params
from tests.support.multipart import PART, THRESHOLD, md5
from tests.support.tree_check import assert_tree_matches_storage
from tests.zarr_api.test_write_sessions import begin, commit, stage, visible

BIG = os.urandom(2 * PART + 4321)  # three parts


@pytest.fixture(autouse=True)
def _small_parts(settings: Any) -> None:
    settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES = THRESHOLD
    settings.DANDIZARR_MULTIPART_PART_BYTES = PART


@pytest.fixture(params=fixture_params({"moto": "s3_storage", "seaweedfs": "seaweedfs_storage"}))
def archive(request: Any, owner: Actor, dandiset: str) -> str:
    request.getfixturevalue({"moto": "s3_storage", "seaweedfs": "seaweedfs_storage"}[request.param])
    return create_archive(owner, dandiset, "big.zarr", layout="loose")


def routes(zarr_id: str, session: str) -> str:
    return f"/api/zarr/{zarr_id}/sessions/{session}/uploads/"


def begin_big(owner: Actor, zarr_id: str, session: str, path: str, size: int) -> dict[str, Any]:
    response = owner.client.post(
        routes(zarr_id, session), {"path": path, "size": size}, format="json"
    )
    assert response.status_code == 201, response.content
    return dict(response.json())


def send_part(
    owner: Actor, zarr_id: str, session: str, upload: int, number: int, data: bytes
) -> requests.Response:
    answer = owner.client.post(
        f"{routes(zarr_id, session)}{upload}/parts/",
        {"first_part": number, "md5s": [md5(data)]},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    [url] = answer.json()["part_urls"]
    return requests.put(
        url, data=data, headers={"Content-MD5": content_md5_header(md5(data))}, timeout=60
    )


def finish(owner: Actor, zarr_id: str, session: str, upload: int, whole: str) -> Any:
    return owner.client.post(
        f"{routes(zarr_id, session)}{upload}/finish/", {"etag": whole}, format="json"
    )


def send_big(
    owner: Actor, zarr_id: str, session: str, path: str, data: bytes, *, whole: str | None = None
) -> int:
    big = begin_big(owner, zarr_id, session, path, len(data))
    ranges = part_ranges(len(data), big["part_size"])
    assert (big["part_size"], big["part_count"]) == (PART, len(ranges))
    for number, (start, end) in enumerate(ranges, 1):
        put = send_part(owner, zarr_id, session, big["upload"], number, data[start:end])
        assert put.status_code == 200, put.text
    response = finish(owner, zarr_id, session, big["upload"], whole or md5(data))
    assert response.status_code == 200, response.content
    return int(big["upload"])


def unfinished_uploads() -> list[Any]:
    return list(get_store().list_multipart_uploads(SHARDS_ROOT))


def test_a_big_file_goes_in_parts_and_commits_with_its_proven_md5(
    owner: Actor, archive: str
) -> None:
    assert upload(owner.client, archive, {"old": b"old"}).status_code == 200
    session = begin(owner, archive)
    send_big(owner, archive, session, "big/0", BIG)
    stage(owner, archive, session, {"small": b"tiny"})
    # Staged, not committed: the session reads it, nobody else does.
    change = owner.client.get(
        f"/api/zarr/{archive}/sessions/{session}/changes/?path=big/0&urls=true"
    ).json()["results"][0]
    assert (change["md5"], change["size"]) == (md5(BIG), len(BIG))
    assert requests.get(change["download_url"], timeout=60).content == BIG
    assert visible(archive) == {"old": b"old"}
    response = commit(owner, archive, session)
    assert response.status_code == 200, response.content
    after = {"old": b"old", "big/0": BIG, "small": b"tiny"}
    assert Batch.objects.get(pk=response.json()["batch"]).state == Batch.State.APPLIED
    assert visible(archive) == after
    archive_json = owner.client.get(f"/api/zarr/{archive}/").json()
    assert archive_json["checksum"] == expected_checksum(after)
    [row] = MultipartUpload.objects.all()
    assert (row.state, row.md5, row.batch_id) == ("proven", md5(BIG), response.json()["batch"])
    head = get_store().head(row.key)
    assert head is not None and head.etag.endswith("-3")  # no md5: proven from the bytes
    assert unfinished_uploads() == []
    assert_tree_matches_storage(archive)


def test_a_wrong_md5_fails_the_commit_and_changes_nothing(owner: Actor, archive: str) -> None:
    assert upload(owner.client, archive, {"old": b"old"}).status_code == 200
    session = begin(owner, archive)
    send_big(owner, archive, session, "big", BIG, whole=md5(b"other bytes"))
    response = commit(owner, archive, session)
    assert response.status_code == 200, response.content
    batch = Batch.objects.get(pk=response.json()["batch"])
    assert batch.state == Batch.State.FAILED
    assert "md5 proof failed" in batch.error and md5(BIG) in batch.error
    assert visible(archive) == {"old": b"old"}
    assert owner.client.get(f"/api/zarr/{archive}/").json()["checksum"] == expected_checksum(
        {"old": b"old"}
    )
    # What the session staged goes (its shard at once, its rows with the sweep).
    assert write_sessions_sweep() == 1
    assert list(get_store().list(session_prefix(archive, session))) == []
    assert_tree_matches_storage(archive)


def test_a_missing_or_other_part_is_named_and_the_file_finishes_once_sent(
    owner: Actor, archive: str
) -> None:
    session = begin(owner, archive)
    big = begin_big(owner, archive, session, "big", len(BIG))
    ranges = part_ranges(len(BIG), PART)
    for number, (start, end) in enumerate(ranges[:2], 1):
        assert send_part(owner, archive, session, big["upload"], number, BIG[start:end]).ok
    # Part 3 never declared: nothing to complete.
    response = finish(owner, archive, session, big["upload"], md5(BIG))
    assert (response.status_code, response.json()["code"]) == (400, "session_incomplete")
    assert response.json()["missing"] == ["big (part 3)"]
    # Declared but never sent: storage does not hold it.
    start, end = ranges[2]
    owner.client.post(
        f"{routes(archive, session)}{big['upload']}/parts/",
        {"first_part": 3, "md5s": [md5(BIG[start:end])]},
        format="json",
    )
    response = finish(owner, archive, session, big["upload"], md5(BIG))
    assert (response.status_code, response.json()["code"]) == (400, "session_incomplete")
    # Other bytes sent, then the part declared again: storage holds what was not declared.
    assert send_part(owner, archive, session, big["upload"], 3, b"x" * (end - start)).ok
    owner.client.post(
        f"{routes(archive, session)}{big['upload']}/parts/",
        {"first_part": 3, "md5s": [md5(BIG[start:end])]},
        format="json",
    )
    response = finish(owner, archive, session, big["upload"], md5(BIG))
    assert (response.status_code, response.json()["code"]) == (400, "session_incomplete")
    assert response.json()["mismatched"][0]["path"] == "big"
    # The file begun again at its path finishes; the upload left open is the sweep's once the
    # session ended.
    send_big(owner, archive, session, "big", BIG)
    assert commit(owner, archive, session).status_code == 200
    assert visible(archive) == {"big": BIG}
    assert len(unfinished_uploads()) == 1
    abandoned_uploads_abort(timedelta(0))
    assert unfinished_uploads() == []


def test_small_files_and_storage_without_parts_are_refused_in_parts(
    owner: Actor, archive: str
) -> None:
    session = begin(owner, archive)
    small = owner.client.post(
        routes(archive, session), {"path": "s", "size": THRESHOLD}, format="json"
    )
    assert (small.status_code, small.json()["code"]) == (400, "not_a_big_file")
    bodies: list[Any] = [{"path": "s"}, {"path": "s", "size": -1}, [], {"path": "", "size": 9}]
    bodies.append({"path": "s", "size": 1 << 50})  # past S3's largest object
    for body in bodies:
        assert owner.client.post(routes(archive, session), body, format="json").status_code == 400
    huge = owner.client.post(
        f"{routes(archive, session)}{1 << 70}/finish/", {"etag": md5(b"")}, format="json"
    )
    assert huge.status_code == 404
    big = begin_big(owner, archive, session, "b", len(BIG))
    past = owner.client.post(
        f"{routes(archive, session)}{big['upload']}/parts/",
        {"first_part": 3, "md5s": [md5(b"a"), md5(b"b")]},
        format="json",
    )
    assert (past.status_code, past.json()["code"]) == (400, "multipart_parts_invalid")
    # A big file in one PUT is refused where parts are taken.
    one_put = owner.client.post(
        f"/api/zarr/{archive}/sessions/{session}/files/",
        [{"path": "b", "etag": md5(BIG), "size": len(BIG)}],
        format="json",
    )
    assert one_put.status_code == 400


@pytest.mark.parametrize("end", ["abort", "expiry"])
def test_an_abort_or_an_expiry_aborts_uploads_and_deletes_parts(
    owner: Actor, archive: str, end: str
) -> None:
    session = begin(owner, archive)
    send_big(owner, archive, session, "done", BIG)  # completed, never committed
    open_one = begin_big(owner, archive, session, "half", len(BIG))
    assert send_part(owner, archive, session, open_one["upload"], 1, BIG[:PART]).ok
    assert len(unfinished_uploads()) == 1
    # The sweep leaves an open session's upload alone, however old.
    abandoned_uploads_abort(timedelta(0))
    assert len(unfinished_uploads()) == 1
    assert MultipartUpload.objects.get(pk=open_one["upload"]).state == "open"
    assert list(get_store().list(session_prefix(archive, session)))
    if end == "abort":
        response = owner.client.delete(f"/api/zarr/{archive}/sessions/{session}/")
        assert response.status_code == 204, response.content
    else:
        WriteSession.objects.update(expires=timezone.now() - timedelta(seconds=1))
        assert write_sessions_sweep() == 1
    assert unfinished_uploads() == []
    assert list(get_store().list(session_prefix(archive, session))) == []
    assert set(MultipartUpload.objects.values_list("state", flat=True)) == {"aborted"}
    assert visible(archive) == {}


def test_the_sweep_aborts_a_session_upload_nothing_recorded(owner: Actor, archive: str) -> None:
    session = begin(owner, archive)
    # As a begin killed between storage and its row leaves it.
    key = session_prefix(archive, session) + "0" * 32
    get_store().create_multipart_upload(key)
    assert abandoned_uploads_abort(timedelta(0)) == 1
    assert unfinished_uploads() == []
