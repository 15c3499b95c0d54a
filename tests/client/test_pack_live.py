"""``upload --pack`` (sharded archives, docs/sharded.md) against the live service: S3 on moto,
PostgreSQL, Celery tasks inline. Arrays written by zarr-python, packed into shards by the
client, verified by the server, read back through ``ArchiveStore``."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from dandizarr.client import ClientError
from dandizarr.client.pack_batches import PackBatchSender
from dandizarr.client.shards import PreparedShard
from dandizarr.client.store import ArchiveStore
from tests.support.live_client import Service
from tests.support.sharded_client import V2_DATA, MakeUploader, local_files, write_v2

PROTO = default_buffer_prototype()
# A thousand chunks: 16 shards of 64 and three pack batches with a 1 KiB shard size (4,000 and
# 4 KiB took four times as long to write, hash, pack, list and read, and tested the same).
V3_CHUNKS = 1000
V3_DATA = np.arange(V3_CHUNKS * 4, dtype="int32") * -3


def write_v3(root: Path) -> dict[str, bytes]:
    """A v3 array of 1000 chunks of 16 bytes (c/0 .. c/999)."""
    array = zarr.create_array(
        LocalStore(root), shape=(V3_CHUNKS * 4,), chunks=(4,), dtype="int32", compressors=None
    )
    array[:] = V3_DATA
    return local_files(root)


def read(store: ArchiveStore, key: str, byte_range: ByteRequest | None = None) -> bytes:
    buffer = sync(store.get(key, PROTO, byte_range))
    assert buffer is not None
    return buffer.to_bytes()


def cli_checksum(service: Service, root: Path) -> str:
    done = service.cli("checksum", str(root))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_pack_v2_equals_loose_upload_and_reads_back(
    service: Service,
    uploader: MakeUploader,
    tmp_path: Path,
    stores: list[ArchiveStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "v2.zarr"
    files = write_v2(root)
    chunk_paths = [p for p in files if p.startswith("x/") and not p.startswith("x/.z")]
    assert len(chunk_paths) == 60

    # 100 bytes per shard: 5 chunks of 20 bytes each, 12 shards, 2 pack batches of <= 7;
    # built in temporary files (as shards above 1 MiB are), removed afterwards.
    monkeypatch.setattr("dandizarr.client.shards.SHARD_IN_MEMORY", 0)
    up = uploader(root, pack=True, shard_target_bytes=100)
    packed = up.run()
    assert packed.ok, packed.to_json()
    assert up.packer is not None and up.packer.scratch is not None
    assert not up.packer.scratch.exists()
    assert (packed.uploaded_files, packed.packed_files, packed.shards) == (len(files), 60, 12)
    assert packed.pack_batches == 2
    assert packed.put_requests == len(files) - 60 + 12
    with service.client() as client:
        loose = client.upload(root, dandiset=service.dandiset, name="v2-loose")
    assert loose.ok

    local = cli_checksum(service, root)
    assert packed.server_checksum == loose.server_checksum == local
    # Shards go only into sharded archives: said before anything is sent.
    with pytest.raises(ClientError, match="needs a sharded archive"):
        uploader(root, pack=True, zarr_id=loose.zarr_id).run()
    assert service.remote_files(packed.zarr_id) == service.remote_files(loose.zarr_id)
    archive = service.archive(packed.zarr_id)
    assert (archive["layout"], archive["shard_count"], archive["checksum"]) == (
        "sharded",
        12,
        local,
    )
    assert service.archive(loose.zarr_id)["layout"] == "loose"

    # Storage: 12 shard objects; no loose chunk objects.
    keys = service.bucket_keys()
    shard_keys = [k for k in keys if k.startswith(f"zarr_shards/{packed.zarr_id}/")]
    assert len(shard_keys) == 12
    loose_keys = [k for k in keys if k.startswith(f"zarr/{packed.zarr_id}/")]
    assert not [k for k in loose_keys if k.removeprefix(f"zarr/{packed.zarr_id}/") in chunk_paths]

    # A packed file's entry points into its shard; ?download=true streams its bytes.
    entry = service.api("GET", f"/api/zarr/{packed.zarr_id}/files/x/3").json()
    assert entry["shard"]["length"] == len(files["x/3"])
    assert service.api("GET", f"/api/zarr/{packed.zarr_id}/files/x/.zarray").json().get(
        "shard"
    ) in (None, {})
    streamed = service.api("GET", f"/api/zarr/{packed.zarr_id}/files/x/3?download=true")
    assert streamed.status_code == 200 and streamed.content == files["x/3"]

    store = ArchiveStore(service.url, packed.zarr_id)
    stores.append(store)
    group = zarr.open_group(store=store, mode="r")
    x = group["x"]
    assert isinstance(x, zarr.Array)
    np.testing.assert_array_equal(x[:], V2_DATA)
    assert group.attrs["title"] == "packed v2"

    # Whole and partial reads of one member: one storage request each once its entry is cached.
    chunk = files["x/7"]
    assert read(store, "x/7") == chunk
    before = store.storage_requests
    for request, expected in [
        (None, chunk),
        (RangeByteRequest(3, 11), chunk[3:11]),
        (OffsetByteRequest(15), chunk[15:]),
        (SuffixByteRequest(6), chunk[-6:]),
        (SuffixByteRequest(1000), chunk),
        (RangeByteRequest(18, 500), chunk[18:]),
    ]:
        assert read(store, "x/7", request) == expected, request
    assert store.storage_requests - before == 6
    assert sync(store.get("x/9999", PROTO)) is None

    # Concurrent first reads of a fresh store (it opens once; one GET per member).
    fresh = ArchiveStore(service.url, packed.zarr_id)
    stores.append(fresh)
    keys = [f"x/{i}" for i in range(0, 60, 6)]

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(fresh.get(key, PROTO) for key in keys)))

    assert [b.to_bytes() for b in asyncio.run(gather())] == [files[key] for key in keys]
    assert fresh.storage_requests == len(keys)


def test_pack_v3_many_chunks_with_the_cli(
    service: Service, tmp_path: Path, stores: list[ArchiveStore]
) -> None:
    root = tmp_path / "v3.zarr"
    files = write_v3(root)
    assert len(files) == V3_CHUNKS + 1
    # 16-byte chunks, 1 KiB shards: 64 chunks per shard, 16 shards, 3 pack batches of <= 7.
    status, result = service.cli_json(
        "upload", str(root), "--dandiset", service.dandiset, "--pack", "--shard-size", "1K"
    )
    assert status == 0 and result["ok"], result
    assert (result["packed_files"], result["shards"], result["pack_batches"]) == (V3_CHUNKS, 16, 3)
    assert result["server_checksum"] == cli_checksum(service, root)
    remote = service.remote_files(result["zarr_id"])
    assert remote == {p: (len(b), hashlib.md5(b).hexdigest()) for p, b in files.items()}

    store = ArchiveStore(service.url, result["zarr_id"])
    stores.append(store)
    array = zarr.open_array(store=store, mode="r")
    assert array.shape == V3_DATA.shape
    # Chunks from the first, a middle and the last shard (the v2 test reads a whole array).
    for part in (slice(0, 300), slice(1800, 2100), slice(3750, None)):
        np.testing.assert_array_equal(array[part], V3_DATA[part])
    # A random read of one chunk with its entry cached: one storage request.
    before = store.storage_requests
    np.testing.assert_array_equal(array[1000:1004], V3_DATA[1000:1004])
    assert store.storage_requests - before == 1

    # Again: nothing left to send.
    status, again = service.cli_json("upload", str(root), "--zarr-id", result["zarr_id"], "--pack")
    assert status == 0 and again["ok"]
    assert (again["uploaded_files"], again["skipped_files"]) == (0, len(files))


def test_corrupted_member_fails_the_pack_batch_naming_it(
    service: Service, uploader: MakeUploader, tmp_path: Path
) -> None:
    root = tmp_path / "bad.zarr"
    write_v2(root)
    up = uploader(root, pack=True, shard_target_bytes=100)
    victims: list[str] = []

    def corrupt(shard: PreparedShard) -> None:
        if victims:
            return
        member = shard.members[2]
        data = bytearray(shard.read())
        data[member.offset] ^= 0xFF  # the declared md5 stays the original's
        shard.write(bytes(data))
        victims.append(member.path)

    up.after_build = corrupt
    with pytest.raises(ClientError) as raised:
        up.run()
    assert victims and victims[0] in str(raised.value)
    zarr_id = up.zarr_id
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 404
    # Nothing of the failed batch became part of the archive.
    held = service.remote_files(zarr_id)
    assert victims[0] not in held
    assert not [p for p in held if p.startswith("x/") and not p.startswith("x/.z")]

    # The same tree, uncorrupted, packs fine into that archive afterwards.
    again = uploader(root, pack=True, shard_target_bytes=100, zarr_id=zarr_id).run()
    assert again.ok and again.packed_files == 60


def test_interrupted_pack_upload_resumes(
    service: Service, uploader: MakeUploader, tmp_path: Path
) -> None:
    root = tmp_path / "resume.zarr"
    files = write_v3(root)
    # 64-byte shards: 4 chunks each, pack batches of 7. One thread builds them, so the count
    # below is the shards' planned order: with two, the 22nd shard built could be the 21st
    # planned (the two built at once), and the third batch was never sent (57 files held).
    first = uploader(root, jobs=1, pack=True, shard_target_bytes=64)
    built = 0

    def interrupt(shard: PreparedShard) -> None:
        nonlocal built
        built += 1
        if built > 7 * 3:  # the fourth pack batch never gets built
            raise KeyboardInterrupt

    first.after_build = interrupt
    with pytest.raises(ClientError):
        first.run()
    zarr_id = first.zarr_id
    held = service.remote_files(zarr_id)
    assert len(held) == 1 + 3 * 7 * 4  # zarr.json, then three pack batches of 7 shards of 4
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 404

    # Resume, with bigger shards: what the server holds is not packed again.
    second = uploader(root, pack=True, shard_target_bytes=4096, zarr_id=zarr_id).run()
    assert second.ok, second.to_json()
    assert second.skipped_files == len(held)
    assert second.uploaded_files == second.packed_files == len(files) - len(held)
    assert second.server_checksum == cli_checksum(service, root)
    assert len(service.remote_files(zarr_id)) == len(files)


class Killed(Exception):
    pass


def test_pack_batch_left_open_by_a_killed_run_is_completed_on_resume(
    service: Service, uploader: MakeUploader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "open.zarr"
    files = write_v2(root)
    first = uploader(root, pack=True, shard_target_bytes=100)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise Killed  # after the first pack batch's shards were PUT, before complete

    # A kill leaves no chance to cancel: the batch stays open, the journal stays. (Only for
    # this run: the pack sender is made by the run, so its class is patched.)
    with monkeypatch.context() as patch:
        patch.setattr(PackBatchSender, "_complete", killed)
        patch.setattr(first, "_cancel_quietly", lambda: None)
        with pytest.raises(Killed):
            first.run()
    zarr_id = first.zarr_id
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 204
    loose = len(service.remote_files(zarr_id))
    assert loose == len(files) - 60

    second = uploader(root, pack=True, shard_target_bytes=100, zarr_id=zarr_id).run()
    assert second.ok, second.to_json()
    # The open batch (7 shards of 5 chunks) was completed and applied, not sent again.
    assert second.skipped_files == loose + 35
    assert (second.packed_files, second.shards) == (25, 5)
    assert not list(service.state_dir.glob("*.json"))
