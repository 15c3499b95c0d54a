"""Big files in parts through the batch flow, on moto and on SeaweedFS, with 5 MiB parts
(docs/api.md, "Big files"): completed by the service, their md5 proven from storage before the
batch is applied, a wrong md5 refused, cancels and the sweep aborting uploads."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pytest
import requests

from dandizarr.objectstore.digests import content_md5_header
from dandizarr_server.zarr_api.models import Batch, MultipartUpload, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.archive_audit import archive_audit_report
from dandizarr_server.zarr_api.services import upload_batches
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
from dandizarr_server.zarr_api.services.multipart_uploads import abandoned_uploads_abort
from dandizarr_server.zarr_api.services.tree_updates import tree_update_apply
from tests.support.api import Actor, create_archive, expected_checksum, let_upload_urls_expire
from tests.support.celery_worker import Worker, needs_redis, tasks_to_worker
from tests.support.multipart import (
    PART,
    THRESHOLD,
    declared,
    md5,
    put_parts,
    start,
    upload_in_parts,
)
from tests.support.processes import Processes
from tests.support.sharded import array_files, build_shards
from tests.support.tree_check import assert_tree_matches_storage


@pytest.fixture(autouse=True)
def _small_parts(settings: Any) -> None:
    settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES = THRESHOLD
    settings.DANDIZARR_MULTIPART_PART_BYTES = PART


@pytest.fixture
def moto_archive(owner: Actor, dandiset: str, s3_storage: str) -> str:
    return create_archive(owner, dandiset, "moto.zarr", layout="loose")


@pytest.fixture
def seaweedfs_archive(owner: Actor, dandiset: str, seaweedfs_storage: str) -> str:
    return create_archive(owner, dandiset, "sw.zarr", layout="loose")


BIG = os.urandom(2 * PART + 4321)  # three parts


def check_big_file_is_applied_with_its_md5(owner: Actor, zarr_id: str) -> None:
    files = {"big/0": BIG, "small": b"tiny"}
    info = owner.client.get("/api/info/").json()
    assert (info["multipart_threshold_bytes"], info["multipart_part_bytes"]) == (THRESHOLD, PART)
    response = upload_in_parts(owner.client, zarr_id, files)
    assert response.status_code == 200, response.content
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (archive["checksum"], archive["checksum_status"]) == (
        expected_checksum(files),
        "complete",
    )
    [upload] = MultipartUpload.objects.all()
    assert (upload.state, upload.md5) == (MultipartUpload.State.PROVEN, md5(BIG))
    head = get_store().head(f"zarr/{zarr_id}/big/0")
    assert head is not None and head.etag.endswith("-3")  # no md5: proven by the worker
    entry = owner.client.get(f"/api/zarr/{zarr_id}/files/big/0").json()
    assert (entry["digest"], entry["size"]) == (md5(BIG), len(BIG))
    assert requests.get(entry["download_url"], timeout=60).content == BIG
    assert_tree_matches_storage(zarr_id)
    # Storage and the tree agree once the URLs expired: no drift, no repair.
    let_upload_urls_expire()
    archive_row = ZarrArchive.objects.get(zarr_id=zarr_id)
    assert archive_row.drift_count == 0, archive_row.last_drift
    # The audit recomputes the tree from storage with the proven md5: no drift.
    assert not archive_audit_report(archive_row).report.drift
    # Garbage collection keeps the current multipart object.
    report = archive_garbage_collect(archive_row, dry_run=True, now=None)
    assert report.waiting_objects == 0 and report.reclaimed_objects == 0
    # A later batch naming the path but cancelled keeps the archive's file (its ETag is no md5).
    started = start(owner.client, zarr_id, [declared("big/0", b"other")])
    assert started.status_code == 200, started.content
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert get_store().head(f"zarr/{zarr_id}/big/0") == head
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == archive["checksum"]


def test_big_file_is_applied_with_its_md5_on_moto(owner: Actor, moto_archive: str) -> None:
    check_big_file_is_applied_with_its_md5(owner, moto_archive)


def test_big_file_is_applied_with_its_md5_on_seaweedfs(
    owner: Actor, seaweedfs_archive: str
) -> None:
    check_big_file_is_applied_with_its_md5(owner, seaweedfs_archive)


def test_parts_must_follow_the_rule(owner: Actor, moto_archive: str) -> None:
    entry = declared("big", BIG)
    too_few = start(owner.client, moto_archive, [{**entry, "parts": entry["parts"][:2]}])
    assert too_few.status_code == 400
    body = too_few.json()
    assert body["code"] == "multipart_parts_invalid"
    assert (body["paths"][0]["part_size"], body["paths"][0]["parts"]) == (PART, 3)
    small = start(owner.client, moto_archive, [{**declared("s", b"x"), "parts": [md5(b"x")]}])
    assert small.status_code == 400 and small.json()["code"] == "multipart_parts_invalid"
    no_parts = start(owner.client, moto_archive, [{"path": "b", "etag": md5(BIG), "parts": []}])
    assert no_parts.status_code == 400
    assert not MultipartUpload.objects.exists()
    assert list(get_store().list_multipart_uploads("zarr/")) == []


def check_missing_and_other_parts_keep_the_batch_open(owner: Actor, zarr_id: str) -> None:
    response = start(owner.client, zarr_id, [declared("big", BIG)])
    [entry] = response.json()
    put_parts(entry, BIG, only={1, 3})
    complete = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert complete.status_code == 400, complete.content
    assert complete.json()["code"] == "batch_incomplete"
    assert complete.json()["missing"] == ["big (part 2)"]
    put_parts(entry, BIG, only={2})
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["file_count"] == 1


def test_missing_parts_keep_the_batch_open_on_moto(owner: Actor, moto_archive: str) -> None:
    check_missing_and_other_parts_keep_the_batch_open(owner, moto_archive)


def test_missing_parts_keep_the_batch_open_on_seaweedfs(
    owner: Actor, seaweedfs_archive: str
) -> None:
    check_missing_and_other_parts_keep_the_batch_open(owner, seaweedfs_archive)


def test_a_part_of_other_bytes_is_refused_on_moto(owner: Actor, moto_archive: str) -> None:
    """moto takes a part whatever its Content-MD5 (SeaweedFS and S3 refuse it): the service
    checks what storage lists against the declared md5s."""
    [entry] = start(owner.client, moto_archive, [declared("big", BIG)]).json()
    put_parts(entry, BIG, only={1, 3})
    requests.put(
        entry["part_urls"][1],
        data=b"x" * PART,
        headers={"Content-MD5": content_md5_header(md5(BIG[PART : 2 * PART]))},
        timeout=60,
    )
    complete = owner.client.post(f"/api/zarr/{moto_archive}/upload/complete/")
    assert complete.status_code == 400, complete.content
    assert complete.json()["mismatched"][0]["path"] == "big"


def check_wrong_declared_md5_fails_the_batch(owner: Actor, zarr_id: str) -> None:
    """Parts as declared, but the file's md5 wrong: the worker's proof fails the batch, deletes
    the object and names the md5s; nothing enters the checksum."""
    wrong = md5(b"not the file")
    [entry] = start(owner.client, zarr_id, [declared("big", BIG, whole_md5=wrong)]).json()
    put_parts(entry, BIG)
    complete = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert complete.status_code == 200, complete.content
    batch = owner.client.get(f"/api/zarr/{zarr_id}/batches/{complete.json()['batch']}/").json()
    assert batch["state"] == "failed"
    assert batch["error"].startswith("md5 proof failed: ")
    assert wrong in batch["error"] and md5(BIG) in batch["error"]
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (archive["file_count"], archive["checksum"]) == (0, expected_checksum({}))
    assert get_store().head(f"zarr/{zarr_id}/big") is None
    assert MultipartUpload.objects.get().state == MultipartUpload.State.FAILED


def test_wrong_declared_md5_fails_the_batch_on_moto(owner: Actor, moto_archive: str) -> None:
    check_wrong_declared_md5_fails_the_batch(owner, moto_archive)


def test_wrong_declared_md5_fails_the_batch_on_seaweedfs(
    owner: Actor, seaweedfs_archive: str
) -> None:
    check_wrong_declared_md5_fails_the_batch(owner, seaweedfs_archive)


def check_cancel_and_sweep_abort_uploads(owner: Actor, zarr_id: str) -> None:
    [entry] = start(owner.client, zarr_id, [declared("big", BIG)]).json()
    put_parts(entry, BIG, only={1})
    assert len(list(get_store().list_multipart_uploads("zarr/"))) == 1
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert list(get_store().list_multipart_uploads("zarr/")) == []
    assert MultipartUpload.objects.get().state == MultipartUpload.State.ABORTED
    # An upload storage holds that no open batch sends (a crash between storage and the
    # database, say) is aborted by the sweep; an open batch's is left alone.
    get_store().create_multipart_upload(f"zarr/{zarr_id}/orphan")
    [kept] = start(owner.client, zarr_id, [declared("big", BIG)]).json()
    assert abandoned_uploads_abort(timedelta(0)) == 1
    [left] = list(get_store().list_multipart_uploads("zarr/"))
    assert left.key == f"zarr/{zarr_id}/big"
    put_parts(kept, BIG)
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200


def test_cancel_and_sweep_abort_uploads_on_moto(owner: Actor, moto_archive: str) -> None:
    check_cancel_and_sweep_abort_uploads(owner, moto_archive)


def test_cancel_and_sweep_abort_uploads_on_seaweedfs(owner: Actor, seaweedfs_archive: str) -> None:
    check_cancel_and_sweep_abort_uploads(owner, seaweedfs_archive)


def check_a_resumed_file_keeps_its_parts(owner: Actor, zarr_id: str) -> None:
    """Declared again with the same md5 and parts (a client resuming after a kill), a file keeps
    its upload and the parts it sent; declared with other parts, its upload is replaced."""
    [first] = start(owner.client, zarr_id, [declared("big", BIG)]).json()
    put_parts(first, BIG, only={1, 2})
    add = f"/api/zarr/{zarr_id}/upload/add/"
    again = owner.client.post(add, [declared("big", BIG)], format="json")
    assert again.status_code == 200, again.content
    [resumed] = again.json()
    assert MultipartUpload.objects.get().state == MultipartUpload.State.OPEN
    put_parts(resumed, BIG, only={3})  # parts 1 and 2 are not sent again
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    other = os.urandom(len(BIG))
    [entry] = start(owner.client, zarr_id, [declared("big", BIG)]).json()
    put_parts(entry, BIG, only={1})
    replaced = owner.client.post(add, [declared("big", other)], format="json").json()
    assert len(list(get_store().list_multipart_uploads("zarr/"))) == 1  # the old one aborted
    put_parts(replaced[0], other)
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    entry = owner.client.get(f"/api/zarr/{zarr_id}/files/big").json()
    assert entry["digest"] == md5(other)


def test_a_resumed_file_keeps_its_parts_on_moto(owner: Actor, moto_archive: str) -> None:
    check_a_resumed_file_keeps_its_parts(owner, moto_archive)


def test_a_resumed_file_keeps_its_parts_on_seaweedfs(owner: Actor, seaweedfs_archive: str) -> None:
    check_a_resumed_file_keeps_its_parts(owner, seaweedfs_archive)


def test_local_backend_takes_any_file_in_one_put(
    owner: Actor, dandiset: str, local_storage: str
) -> None:
    """make serve's local backend streams a PUT of any size to disk: it asks for no parts
    (multipart_threshold_bytes null), takes a big file declared with its size in one PUT, and
    refuses one declared in parts with a clear 400."""
    zarr_id = create_archive(owner, dandiset, "local.zarr", layout="loose")
    assert owner.client.get("/api/info/").json()["multipart_threshold_bytes"] is None
    refused = start(owner.client, zarr_id, [declared("big", BIG)])
    assert refused.status_code == 400 and refused.json()["code"] == "multipart_parts_invalid"
    started = start(owner.client, zarr_id, [{"path": "big", "etag": md5(BIG), "size": len(BIG)}])
    assert started.status_code == 200, started.content
    [entry] = started.json()
    assert "part_urls" not in entry
    put = requests.put(
        entry["upload_url"],
        data=BIG,
        headers={"Content-MD5": content_md5_header(md5(BIG))},
        timeout=60,
    )
    assert put.status_code == 200, put.text
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 200
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/big").json()["digest"] == md5(BIG)


def check_completing_again_after_storage_completed(owner: Actor, zarr_id: str) -> None:
    """A complete that died after storage completed the upload and before the database said
    so: the next complete finds the object its declared parts make, and goes on."""
    [entry] = start(owner.client, zarr_id, [declared("big", BIG)]).json()
    put_parts(entry, BIG)
    upload = MultipartUpload.objects.get()
    parts = list(enumerate(upload.part_md5s, 1))
    get_store().complete_multipart_upload(upload.key, upload.upload_id, parts)
    complete = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert complete.status_code == 200, complete.content
    assert MultipartUpload.objects.get().state == MultipartUpload.State.PROVEN
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/big").json()["digest"] == md5(BIG)


def test_completing_again_after_storage_completed_on_moto(owner: Actor, moto_archive: str) -> None:
    check_completing_again_after_storage_completed(owner, moto_archive)


def test_completing_again_after_storage_completed_on_seaweedfs(
    owner: Actor, seaweedfs_archive: str
) -> None:
    check_completing_again_after_storage_completed(owner, seaweedfs_archive)


@needs_redis
def test_a_celery_worker_proves_the_md5(
    transactional_db: None, owner: Actor, zarr_id: str, processes: Processes, settings: Any
) -> None:
    """The proof runs in a real worker process (Redis): until it has read the object the batch
    is pending, its file unproven and nothing applied. (transactional_db: the worker reads the
    test's rows.)"""
    with tasks_to_worker(settings) as env:
        response = upload_in_parts(owner.client, zarr_id, {"big": BIG, "small": b"s"})
        assert response.status_code == 200, response.content
        assert MultipartUpload.objects.get().state == MultipartUpload.State.COMPLETED
        archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
        assert (archive["checksum_status"], archive["file_count"]) == ("pending", 0)
        with Worker(env):
            deadline = time.monotonic() + 120
            while Batch.objects.filter(archive__zarr_id=zarr_id, state="pending").exists():
                assert time.monotonic() < deadline, "the worker never applied the batch"
                time.sleep(0.05)
    assert MultipartUpload.objects.get().state == MultipartUpload.State.PROVEN
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["checksum"] == expected_checksum({"big": BIG, "small": b"s"})


def test_a_file_replaced_before_its_proof_leaves_the_later_batch_alone(
    owner: Actor, moto_archive: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose big file a later batch overwrote before the worker proved it fails (its
    md5 can no longer be proven), and its cancel leaves the later batch's object alone, even
    while that batch is still open."""
    zarr_id = moto_archive
    schedule = upload_batches.tree_update_schedule
    monkeypatch.setattr(upload_batches, "tree_update_schedule", lambda archive: None)
    assert upload_in_parts(owner.client, zarr_id, {"big": BIG}).status_code == 200
    monkeypatch.setattr(upload_batches, "tree_update_schedule", schedule)
    # The later batch: the same path, a small file, PUT and not yet completed...
    [entry] = start(owner.client, zarr_id, [declared("big", b"replaced")]).json()
    headers = {"Content-MD5": content_md5_header(md5(b"replaced"))}
    assert requests.put(entry["upload_url"], data=b"replaced", headers=headers, timeout=60).ok
    # ... when the worker comes to prove the first.
    tree_update_apply(ZarrArchive.objects.get(zarr_id=zarr_id).pk)
    first = Batch.objects.filter(archive__zarr_id=zarr_id).order_by("pk").first()
    assert first is not None and first.state == Batch.State.FAILED
    assert "was replaced or deleted in storage before its md5" in first.error
    assert get_store().get(f"zarr/{zarr_id}/big") == b"replaced"
    complete = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert complete.status_code == 200, complete.content
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["checksum"] == expected_checksum({"big": b"replaced"})
    assert_tree_matches_storage(zarr_id)


def test_a_shard_over_the_threshold_is_refused(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """A shard goes in one PUT: one bigger than the threshold is a 400 naming it, before any
    batch opens (the client sends members that big loose, in parts)."""
    zarr_id = create_archive(owner, dandiset, "packed.zarr", layout="sharded")
    declarations, _, _ = build_shards(array_files())
    declarations[1]["size"] = THRESHOLD + 1
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", {"shards": declarations}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "shard_too_large"
    assert response.json()["paths"] == [
        {"path": declarations[1]["name"], "problem": f"is {THRESHOLD + 1} bytes"}
    ]
    assert owner.client.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404  # none opened
