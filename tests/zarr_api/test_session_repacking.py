"""A write session on a sharded archive ends with its chunk files packed into shards (docs/
writing.md, "Sessions on sharded archives"): after the commit, storage holds a shard per
planned shard, not an object per chunk; the checksum is what the same tree gives; every byte
reads back through /zarr/, the files API and the manifest; a worker killed mid-repack leaves
every file readable and a rerun finishes."""

from __future__ import annotations

import base64
import math
from typing import Any

import pytest
import requests
from django.test import Client

from dandizarr.sharding.archive_packing import ShardLayout, find_grids, plan_shards
from dandizarr_server.zarr_api.models import Batch, Shard, ShardMember
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from dandizarr_server.zarr_api.services.session_repacking import session_batch_repack
from tests.support.api import Actor, create_archive, expected_checksum
from tests.support.sharded import ZARRAY, array_files, read_file
from tests.support.tree_check import assert_tree_matches_storage
from tests.zarr_api.test_write_sessions import begin, commit, stage, visible

CPS = (5, 5)


@pytest.fixture
def sharded(owner: Actor, dandiset: str, s3_storage: str) -> str:
    return create_archive(owner, dandiset, "s.zarr", layout="sharded")


def planned_shards(files: dict[str, bytes]) -> int:
    grids = find_grids({"arr/.zarray": ZARRAY})
    plans, _ = plan_shards([ShardLayout(g, CPS) for g in grids], files)
    return len(plans)


def manifest_bytes(zarr_id: str) -> dict[str, bytes]:
    refs = Client().get(f"/api/zarr/{zarr_id}/manifest/").json()["refs"]
    found = {}
    for path, ref in refs.items():
        if isinstance(ref, str):
            found[path] = base64.b64decode(ref[7:]) if ref.startswith("base64:") else ref.encode()
            continue
        headers = {}
        if len(ref) == 3:
            headers["Range"] = f"bytes={ref[1]}-{ref[1] + ref[2] - 1}"
        found[path] = requests.get(ref[0], headers=headers, timeout=30).content
    return found


def shards_holding(prefix: str) -> set[int]:
    return set(
        ShardMember.objects.filter(path__startswith=prefix, shard__state=Shard.State.LIVE)
        .values_list("shard_id", flat=True)
        .distinct()
    )


def write_session(owner: Actor, zarr_id: str, files: dict[str, bytes]) -> int:
    session = begin(owner, zarr_id)
    stage(owner, zarr_id, session, files)
    response = commit(owner, zarr_id, session)
    assert response.status_code == 200, response.content
    return int(response.json()["batch"])


def check_reads(owner: Actor, zarr_id: str, files: dict[str, bytes]) -> None:
    assert visible(zarr_id) == files
    assert manifest_bytes(zarr_id) == files
    for path in ("arr/0.0", "arr/9.9", "arr/.zarray"):
        assert read_file(owner, zarr_id, path) == files[path]
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert archive["checksum"] == expected_checksum(files)
    assert_tree_matches_storage(zarr_id)


def test_a_committed_session_ends_packed_with_the_same_checksum(
    owner: Actor, sharded: str, settings: Any
) -> None:
    files = array_files()  # 100 chunks of a 10 x 10 grid
    # The array's layout: 5 x 5 chunks a shard, as a pack batch of the archive had it.
    write_session(owner, sharded, {".zgroup": files[".zgroup"], "arr/.zarray": ZARRAY})
    Shard.objects.filter(state=Shard.State.LIVE).update(chunks_per_shard=None)
    # A first session's chunks set the layout through the service's default ...
    settings.DANDIZARR_SHARD_TARGET_BYTES = 25 * 16
    write_session(owner, sharded, {p: b for p, b in files.items() if p.startswith("arr/")})
    chunks = [p for p in files if p.startswith("arr/") and "." in p.rpartition("/")[2][1:]]
    assert len(chunks) == 100
    check_reads(owner, sharded, files)
    # O(files / shard size) shard objects hold the chunks, not one each.
    holding = shards_holding("arr/")
    packed = Shard.objects.filter(pk__in=holding, chunks_per_shard__isnull=False)
    assert packed.count() == planned_shards(files) == math.ceil(100 / 25)
    assert all(list(s.chunks_per_shard) == list(CPS) for s in packed)
    # The one-member shards are gone from storage: the archive's shard objects are the
    # packed ones and the metadata's.
    objects = [k for k, *_ in get_store().list(f"zarr_shards/{sharded}/")]
    assert len(objects) == len(shards_holding("")) <= 4 + 3
    # A later session keeps the archive's layout (5 x 5), rewriting a few chunks.
    settings.DANDIZARR_SHARD_TARGET_BYTES = 1 << 30
    again = {"arr/0.0": b"A" * 16, "arr/9.9": b"B" * 16}
    write_session(owner, sharded, again)
    files |= again
    check_reads(owner, sharded, files)
    newest = Shard.objects.filter(pk__in=shards_holding("arr/0.0") | shards_holding("arr/9.9"))
    assert {tuple(s.chunks_per_shard or ()) for s in newest} == {CPS}


def test_a_repack_killed_midway_leaves_every_file_readable_and_a_rerun_finishes(
    owner: Actor, sharded: str, settings: Any
) -> None:
    files = array_files()
    settings.DANDIZARR_SHARD_TARGET_BYTES = 25 * 16
    # The worker's repack fails once its first shard is written (before any row moved).
    settings.DANDIZARR_CRASH_AT = "raise:repack:shard-written"
    write_session(owner, sharded, files)
    settings.DANDIZARR_CRASH_AT = ""
    [batch] = Batch.objects.filter(kind=Batch.Kind.SESSION)
    assert batch.state == Batch.State.APPLIED
    check_reads(owner, sharded, files)  # nothing moved: every file in its one-member shard
    assert len(shards_holding("arr/")) == 100
    write_sessions_sweep()  # the sweep retries the session's settle
    check_reads(owner, sharded, files)
    assert len(shards_holding("arr/")) == 4
    assert session_batch_repack(batch.pk) == 0  # done: nothing left to pack
