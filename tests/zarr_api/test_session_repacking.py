"""A write session on a sharded archive ends with its chunk files packed into shards (docs/
writing.md, "Sessions on sharded archives"): after the commit, storage holds a shard per
planned shard, not an object per chunk; the checksum is what the same tree gives; every byte
reads back through /zarr/, the files API and the manifest; a worker killed mid-repack leaves
every file readable and a rerun finishes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import requests
from django.test import Client

from dandizarr.sharding.archive_packing import (
    ShardLayout,
    default_chunks_per_shard,
    find_grids,
    plan_shards,
)
from dandizarr_server.zarr_api.models import Batch, Shard, ShardMember
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from dandizarr_server.zarr_api.services.session_repacking import session_batch_repack
from tests.support.api import Actor, create_archive, expected_checksum
from tests.support.sharded import ZARRAY, array_files, read_file
from tests.support.tree_check import assert_tree_matches_storage
from tests.zarr_api.test_write_sessions import begin, commit, stage, visible


@pytest.fixture
def sharded(owner: Actor, dandiset: str, s3_storage: str) -> str:
    return create_archive(owner, dandiset, "s.zarr", layout="sharded")


def planned_shards(files: dict[str, bytes], target: int) -> tuple[int, tuple[int, ...]]:
    """How many shards the archive's layout cuts the array's chunks into, and their shape."""
    [grid] = find_grids({"arr/.zarray": ZARRAY})
    cps = default_chunks_per_shard(grid, target)
    plans, _ = plan_shards([ShardLayout(grid, cps)], files)
    return len(plans), cps


def chunk_shards() -> set[int]:
    """The live shards holding the array's chunk files."""
    return set(
        ShardMember.objects.filter(path__regex=r"^arr/[0-9]+\.[0-9]+$", shard__state="live")
        .values_list("shard_id", flat=True)
        .distinct()
    )


def manifest_bytes(zarr_id: str) -> dict[str, bytes]:
    response: Any = Client().get(f"/api/zarr/{zarr_id}/manifest/")
    assert response.status_code == 200
    refs = json.loads(b"".join(response.streaming_content))["refs"]
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
    files = array_files()  # 100 chunks of a 10 x 10 grid, 16 bytes each
    settings.DANDIZARR_SHARD_TARGET_BYTES = target = 25 * 16
    expected, cps = planned_shards(files, target)
    assert 1 < expected < 100
    write_session(owner, sharded, files)
    check_reads(owner, sharded, files)
    # O(files / shard size) shard objects hold the chunks, not one each.
    packed = Shard.objects.filter(pk__in=chunk_shards())
    assert packed.count() == expected
    assert {tuple(s.chunks_per_shard or ()) for s in packed} == {cps}
    # The one-member shards of the chunks are gone from storage: its shard objects are the
    # packed ones and the metadata's (3 files, one-member shards).
    objects = list(get_store().list(f"zarr_shards/{sharded}/"))
    assert len(objects) == expected + 3
    # A later session keeps the archive's layout (what its live shards have), whatever the
    # default is now, rewriting a few chunks.
    settings.DANDIZARR_SHARD_TARGET_BYTES = 1 << 30
    again = {"arr/0.0": b"A" * 16, "arr/9.9": b"B" * 16}
    write_session(owner, sharded, again)
    files |= again
    check_reads(owner, sharded, files)
    newest = Shard.objects.filter(pk__in=shards_holding("arr/0.0") | shards_holding("arr/9.9"))
    assert {tuple(s.chunks_per_shard or ()) for s in newest} == {cps}


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
    assert len(chunk_shards()) == 100
    write_sessions_sweep()  # the sweep retries the session's settle
    check_reads(owner, sharded, files)
    assert len(chunk_shards()) == planned_shards(files, 25 * 16)[0]
    assert session_batch_repack(batch.pk) == 0  # done: nothing left to pack
