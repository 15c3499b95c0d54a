"""Sharded archives through the API: pack batches, member verification, reads, deletes,
overwrites, compaction, conversion of a loose archive, cancel and audit (docs/sharded.md).

Everything runs for real: presigned PUTs to moto's server, PostgreSQL, tasks inline.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dandizarr_server.zarr_api.models import Batch, Shard, ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.selectors.shard_members import member_locations, packed_paths
from dandizarr_server.zarr_api.services.audit import archive_audit
from tests.support.api import (
    Actor,
    create_archive,
    let_upload_urls_expire,
    md5,
    storage_listing,
    upload,
)
from tests.support.sharded import (
    ZARRAY,
    array_files,
    build_shards,
    listing,
    pack_upload,
    read_file,
    upload_sharded,
)
from tests.support.tree_check import assert_tree_matches_storage
from tests.support.versions import add_asset, publish, state_of, versions


def test_sharded_and_loose_archives_of_the_same_files_are_indistinguishable(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    files = array_files()
    loose_id = create_archive(owner, dandiset, "loose.zarr", layout="loose")
    assert upload(owner.client, loose_id, files).status_code == 200
    sharded_id = upload_sharded(owner, dandiset, files)

    loose = owner.client.get(f"/api/zarr/{loose_id}/").json()
    sharded = owner.client.get(f"/api/zarr/{sharded_id}/").json()
    assert sharded["checksum"] == loose["checksum"]
    assert (sharded["file_count"], sharded["size"]) == (loose["file_count"], loose["size"])
    assert sharded["checksum_status"] == "complete"
    assert sharded["shard_count"] == 4 and loose["shard_count"] == 0
    assert listing(owner, sharded_id) == listing(owner, loose_id)
    # Storage: 3 loose objects and 4 shards instead of 103 objects.
    assert sorted(storage_listing(sharded_id)) == [".zgroup", "arr/.zarray", "arr/.zattrs"]
    assert len(list(get_store().list(f"zarr_shards/{sharded_id}/"))) == 4
    assert_tree_matches_storage(sharded_id)

    entry = owner.client.get(f"/api/zarr/{sharded_id}/files/arr/3.7").json()
    assert entry["shard"]["length"] == 16 and entry["s3_key"] == entry["shard"]["key"]
    assert entry["digest"] == md5(files["arr/3.7"])
    assert read_file(owner, sharded_id, "arr/3.7") == files["arr/3.7"]
    streamed = owner.client.get(f"/api/zarr/{sharded_id}/files/arr/9.9", {"download": "true"})
    assert b"".join(streamed.streaming_content) == files["arr/9.9"]  # type: ignore[attr-defined]
    assert read_file(owner, sharded_id, "arr/.zarray") == ZARRAY


def test_a_member_that_does_not_match_its_md5_fails_the_batch_naming_it(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    files = array_files()
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    declarations, bodies, _ = build_shards(files)
    # Flip one byte of member arr/6.7 after building: the shard's own ETag is still right.
    target = next(d for d in declarations if any(m["path"] == "arr/6.7" for m in d["members"]))
    member = next(m for m in target["members"] if m["path"] == "arr/6.7")
    body = bytearray(bodies[target["name"]])
    body[member["offset"] + 3] ^= 0xFF
    bodies[target["name"]] = bytes(body)
    target["etag"] = md5(bodies[target["name"]])
    complete = pack_upload(owner, zarr_id, declarations, bodies)
    assert complete.status_code == 200, complete.content
    batch = owner.client.get(f"/api/zarr/{zarr_id}/batches/{complete.json()['batch']}/").json()
    assert batch["state"] == "failed"
    assert "'arr/6.7'" in batch["error"] and "arr/6.6" not in batch["error"]
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (archive["file_count"], archive["checksum_status"]) == (0, "complete")
    assert list(get_store().list(f"zarr_shards/{zarr_id}/")) == []  # discarded
    assert not ShardMember.objects.exists()


def test_complete_names_missing_and_mismatched_shards(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    declarations, bodies, _ = build_shards(array_files())
    started = pack_upload(owner, zarr_id, declarations, bodies, complete=False)
    names = [s["name"] for s in started["shards"]]
    get_store().delete(Shard.objects.get(name=names[0]).key)
    other = Shard.objects.get(name=names[1])
    get_store().put(other.key, b"something else")
    response = owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 400
    body = response.json()
    assert body["missing"] == [names[0]]
    assert [m["path"] for m in body["mismatched"]] == [names[1]]
    # Cancel drops every shard object of the batch.
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert list(get_store().list(f"zarr_shards/{zarr_id}/")) == []
    assert Batch.objects.get(pk=started["batch"]).state == "cancelled"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d[0]["members"][1].update(offset=d[0]["members"][0]["offset"]), "overlap"),
        (lambda d: d[0]["members"][0].update(offset=d[0]["size"]), "past"),
        (lambda d: d[1]["members"][0].update(path=d[0]["members"][0]["path"]), "more than once"),
        (lambda d: d[0]["members"][0].update(path="../x"), "'..'"),
        (lambda d: d[0]["members"][0].update(md5="nope"), "md5"),
        (lambda d: d[0].update(etag="XYZ"), "etag"),
        (lambda d: d[0].update(members=[]), "members"),
        (lambda d: d[1].update(name=d[0]["name"]), "more than once"),
    ],
)
def test_bad_pack_batches_are_refused_naming_the_problem(
    owner: Actor, dandiset: str, s3_storage: str, mutate: Any, expected: str
) -> None:
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    declarations, _, _ = build_shards(array_files())
    mutate(declarations)
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", {"shards": declarations}, format="json"
    )
    assert response.status_code == 400, response.content
    assert expected in response.json()["detail"], response.json()
    assert not Batch.objects.exists() and not Shard.objects.exists()


def test_pack_batch_limits_and_layout(
    owner: Actor, dandiset: str, s3_storage: str, settings: Any
) -> None:
    declarations, _, _ = build_shards(array_files())
    loose_id = create_archive(owner, dandiset, "l.zarr", layout="loose")
    response = owner.client.post(
        f"/api/zarr/{loose_id}/upload/", {"shards": declarations}, format="json"
    )
    assert response.status_code == 409 and "loose" in response.json()["detail"]
    zarr_id = create_archive(owner, dandiset, "s.zarr")
    settings.DANDIZARR_PACK_MEMBER_LIMIT = 99
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", {"shards": declarations}, format="json"
    )
    assert response.status_code == 400 and "100 member files" in response.json()["detail"]
    settings.DANDIZARR_BATCH_LIMIT = 3
    response = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", {"shards": declarations}, format="json"
    )
    assert response.status_code == 400 and "4 shards" in response.json()["detail"]
    bad = owner.client.post(
        "/api/zarr/", {"name": "x", "dandiset": dandiset, "layout": "weird"}, format="json"
    )
    assert bad.status_code == 400 and "weird" in bad.json()["detail"]


def test_deletes_and_overwrites_in_a_packed_shard_then_compaction(
    owner: Actor, dandiset: str, s3_storage: str, settings: Any
) -> None:
    settings.DANDIZARR_SHARD_COMPACT_PERCENT = 20
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    shard = ShardMember.objects.get(path="arr/0.0").shard
    old_key = shard.key

    # Delete two members: their index entries go, the shard object stays as it is.
    response = owner.client.delete(
        f"/api/zarr/{zarr_id}/files/", [{"path": "arr/0.0"}, {"path": "arr/0.1"}], format="json"
    )
    assert response.status_code == 204, response.content
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/arr/0.0").status_code == 404
    shard.refresh_from_db()
    assert shard.dead_bytes == 32 and shard.key == old_key and shard.state == "live"
    assert_tree_matches_storage(zarr_id)

    # Overwrite a member with a loose upload: reads now come from the loose object.
    assert upload(owner.client, zarr_id, {"arr/1.1": b"new bytes"}).status_code == 200
    assert read_file(owner, zarr_id, "arr/1.1") == b"new bytes"
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/arr/1.1").json()["shard"] is None
    assert_tree_matches_storage(zarr_id)

    # Overwrite members with a new pack batch, deleting more: the old shard passes 20% dead
    # and is compacted into a new object; every remaining member still reads right.
    changed = {f"arr/{i}.{j}": bytes([i, j]) * 8 for i in range(2, 4) for j in range(5)}
    declarations, bodies, _ = build_shards(changed)
    complete = pack_upload(owner, zarr_id, declarations, bodies)
    assert complete.status_code == 200, complete.content
    files.update(changed)
    files["arr/1.1"] = b"new bytes"
    del files["arr/0.0"], files["arr/0.1"]
    assert not Shard.objects.filter(key=old_key, state="live").exists()
    assert get_store().head(old_key) is None
    compacted = ShardMember.objects.get(path="arr/4.4").shard
    assert compacted.key != old_key and compacted.dead_bytes == 0
    assert compacted.size < shard.size
    for path in ["arr/4.4", "arr/0.2", "arr/2.3", "arr/1.1", "arr/.zarray"]:
        assert read_file(owner, zarr_id, path) == files[path], path
    assert_tree_matches_storage(zarr_id)
    loose_twin = create_archive(owner, dandiset, "twin.zarr", layout="loose")
    upload(owner.client, loose_twin, files)
    assert (
        owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"]
        == owner.client.get(f"/api/zarr/{loose_twin}/").json()["checksum"]
    )


def test_a_pack_batch_over_a_loose_file_deletes_its_loose_copy(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """Only a path that was loose before has a loose object to delete once packed; members
    repacked and new paths have none (no delete is asked for them)."""
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    assert upload(owner.client, zarr_id, {"arr/1.1": b"loose for now"}).status_code == 200
    assert "arr/1.1" in storage_listing(zarr_id)
    changed = {"arr/1.1": b"packed again", "arr/2.2": b"repacked member"}
    declarations, bodies, _ = build_shards(changed)
    complete = pack_upload(owner, zarr_id, declarations, bodies)
    assert complete.status_code == 200, complete.content
    assert sorted(storage_listing(zarr_id)) == [".zgroup", "arr/.zarray", "arr/.zattrs"]
    for path, data in changed.items():
        assert read_file(owner, zarr_id, path) == data
        assert owner.client.get(f"/api/zarr/{zarr_id}/files/{path}").json()["shard"] is not None
    assert_tree_matches_storage(zarr_id)


def test_cancel_of_a_loose_overwrite_keeps_the_packed_file(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    checksum = owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"]
    upload(owner.client, zarr_id, {"arr/5.5": b"never mind", "arr/5.6": b"x"}, complete=False)
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == checksum
    assert read_file(owner, zarr_id, "arr/5.5") == files["arr/5.5"]
    assert "arr/5.5" not in storage_listing(zarr_id)
    assert_tree_matches_storage(zarr_id)


def test_cancel_of_a_loose_copy_with_a_packed_files_own_bytes_deletes_the_copy(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """Same bytes as the packed file, so the same md5: still the batch's own upload (a packed
    file has no loose object), so the cancel deletes it."""
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    checksum = owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"]
    upload(owner.client, zarr_id, {"arr/5.5": files["arr/5.5"]}, complete=False)
    assert "arr/5.5" in storage_listing(zarr_id)
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert "arr/5.5" not in storage_listing(zarr_id)
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == checksum
    assert read_file(owner, zarr_id, "arr/5.5") == files["arr/5.5"]
    assert_tree_matches_storage(zarr_id)


def test_converting_a_loose_archive_keeps_its_checksum(
    owner: Actor, stranger: Actor, dandiset: str, s3_storage: str, settings: Any
) -> None:
    settings.DANDIZARR_SHARD_TARGET_BYTES = 25 * 16  # 25 chunks per shard
    files = array_files()
    zarr_id = create_archive(owner, dandiset, "l.zarr", layout="loose")
    assert upload(owner.client, zarr_id, files).status_code == 200
    before = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert stranger.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 403
    response = owner.client.post(f"/api/zarr/{zarr_id}/pack/")
    assert response.status_code == 202, response.content
    after = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert after["layout"] == "sharded" and after["packing"] is False
    assert (after["checksum"], after["file_count"]) == (before["checksum"], before["file_count"])
    shard_count = after["shard_count"]
    assert shard_count == Shard.objects.filter(state="live").count() > 1
    assert sorted(storage_listing(zarr_id)) == [".zgroup", "arr/.zarray", "arr/.zattrs"]
    for path in ["arr/0.0", "arr/9.9", "arr/4.5"]:
        assert read_file(owner, zarr_id, path) == files[path]
    assert_tree_matches_storage(zarr_id)
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert not report.drift, report
    # A rerun finds nothing left to pack.
    assert owner.client.post(f"/api/zarr/{zarr_id}/pack/").status_code == 202
    assert owner.client.get(f"/api/zarr/{zarr_id}/").json()["shard_count"] == shard_count


def test_audit_catches_a_corrupted_member_and_stray_objects(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    store = get_store()
    member = ShardMember.objects.select_related("shard").get(path="arr/7.2")
    body = bytearray(store.get(member.shard.key))
    body[member.offset] ^= 0x01
    store.put(member.shard.key, bytes(body))
    store.put(f"zarr/{zarr_id}/arr/7.3", files["arr/7.3"])  # a stale loose copy
    store.put(f"zarr_shards/{zarr_id}/arr/stray.shard.abc", b"orphan")
    report = archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    assert report.drift
    assert [c["path"] for c in report.corrupted_members] == ["arr/7.2"]
    assert report.corrupted_members[0]["expected"] == md5(files["arr/7.2"])
    assert report.stale_loose_copies_deleted == ["arr/7.3"]
    assert report.orphan_shards_deleted == [f"zarr_shards/{zarr_id}/arr/stray.shard.abc"]
    # The tree now says what storage holds, and a second audit finds nothing.
    assert_tree_matches_storage(zarr_id)
    assert not archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id)).drift


def test_a_sharded_archive_version_survives_every_draft_change(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    add_asset(owner, dandiset, zarr_id, "s.zarr")
    let_upload_urls_expire()
    publish(owner, dandiset)
    (version,) = versions(owner, zarr_id)
    packed = sorted(p for p in files if p.startswith("arr/") and not p.endswith(".zarray"))
    # Overwrite a packed chunk with a loose file, delete another, then pack the draft again.
    changed, removed = packed[0], packed[1]
    assert upload(owner.client, zarr_id, {changed: b"loose now"}).status_code == 200
    response = owner.client.delete(
        f"/api/zarr/{zarr_id}/files/", [{"path": removed}], format="json"
    )
    assert response.status_code == 204, response.content
    response = owner.client.post(f"/api/zarr/{zarr_id}/pack/")
    assert response.status_code in (200, 202), response.content
    draft = {p: b for p, b in files.items() if p != removed} | {changed: b"loose now"}
    assert state_of(owner, zarr_id) == draft
    assert state_of(owner, version["zarr_id"]) == files
    assert (
        owner.client.get(f"/api/zarr/{version['zarr_id']}/").json()["checksum"]
        == (version["checksum"])
    )


def test_member_look_ups_ask_for_no_order_the_archive_index_would_give(
    owner: Actor, dandiset: str, s3_storage: str
) -> None:
    """``ORDER BY id`` on a look-up of some members' paths made SQLite (``make serve``) walk
    every member of the archive through its archive index, in id order, instead of probing
    (archive, path) for each: every pack batch's apply, and every read of packed files, cost
    more as the archive grew (a 2,000,000-file packed upload took 2.2x the time of 1,000,000)."""
    files = array_files()
    zarr_id = upload_sharded(owner, dandiset, files)
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    chunks = sorted(p for p in files if p.startswith("arr/") and not p.startswith("arr/.z"))
    with CaptureQueriesContext(connection) as queries:
        assert set(member_locations(archive, chunks)) == set(chunks)
        assert packed_paths(archive, chunks) == set(chunks)
    # A second pack batch of some of the same paths: its apply looks the old members up.
    member_reads = [q["sql"] for q in queries.captured_queries if "shardmember" in q["sql"]]
    assert member_reads and not [sql for sql in member_reads if "ORDER BY" in sql]
    declarations, bodies, _ = build_shards({p: files[p] for p in chunks[:10]})
    with CaptureQueriesContext(connection) as queries:
        assert pack_upload(owner, zarr_id, declarations, bodies).status_code == 200
    applied = [
        q["sql"] for q in queries.captured_queries if 'FROM "zarr_api_shardmember"' in q["sql"]
    ]
    assert applied and not [sql for sql in applied if "ORDER BY" in sql]
