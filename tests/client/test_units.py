"""Pieces of the client that need no server: the batch journal, the hashing reader, formats."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from dandizarr.checksums import EMPTY_DIGEST, compute_tree
from dandizarr.client import ChecksumMismatch, ClientError
from dandizarr.client.digests import content_md5, tree_checksum
from dandizarr.client.journal import BatchJournal
from dandizarr.client.models import RemoteFile, ServiceInfo
from dandizarr.client.progress import NullProgress
from dandizarr.client.results import UploadResult, format_bytes
from dandizarr.client.shards import ShardBuilder
from dandizarr.client.storage_puts import FileChangedError, HashingReader
from dandizarr.client.upload_types import LocalFile, LocalListing, UploadOptions
from tests.support.processes import Processes


def test_journal_tells_a_killed_run_from_a_live_one_and_another_host(
    processes: Processes, tmp_path: Path
) -> None:
    journal = BatchJournal("http://server", "zid", directory=tmp_path)
    assert not journal.exists() and not journal.is_mine_to_resume()
    journal.record(3)
    assert journal.exists() and journal.is_mine_to_resume()  # this very process
    other = BatchJournal("http://server", "other-zid", directory=tmp_path)
    assert other.path != journal.path and not other.exists()

    note = json.loads(journal.path.read_text())
    sleeper = processes.start(["sleep", "60"])
    try:
        journal.path.write_text(json.dumps({**note, "pid": sleeper.pid}))
        assert not journal.is_mine_to_resume()  # a concurrent upload's batch
    finally:
        sleeper.kill()
        sleeper.wait()
    assert journal.is_mine_to_resume()  # its writer is gone: resume it
    journal.path.write_text(json.dumps({**note, "host": "elsewhere"}))
    assert not journal.is_mine_to_resume()
    journal.clear()
    journal.clear()  # idempotent
    assert not journal.exists()


def test_hashing_reader_hashes_what_it_sends_and_notices_a_shorter_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    reader = HashingReader(path, 10)
    assert len(reader) == 10
    assert reader.read(4) + reader.read() + reader.read() == b"0123456789"
    assert reader.md5.hexdigest() == hashlib.md5(b"0123456789").hexdigest()
    # Grown since hashing: only the declared bytes are sent (and the md5 check catches it).
    path.write_bytes(b"0123456789-more")
    reader = HashingReader(path, 10)
    assert reader.read() == b"0123456789" and reader.read() == b""
    path.write_bytes(b"0123")
    reader = HashingReader(path, 10)
    assert reader.read(4) == b"0123"
    with pytest.raises(FileChangedError):
        reader.read(4)


def test_local_listing_columns_and_streamed_checksum() -> None:
    listing = LocalListing([("a", 1), ("b/c", 7)])
    assert len(listing) == 2 and list(listing.paths) == ["a", "b/c"]
    listing.set_hashed(0, 1, "f" * 32)
    listing.set_hashed(1, 2, "0123456789abcdef" * 2)  # the size hashed replaces the listed one
    assert listing.file(1) == LocalFile("b/c", 2, "0123456789abcdef" * 2)
    assert listing.digest(0) == b"\xff" * 16
    entries = list(listing.entries())
    assert entries == [("a", 1, "f" * 32), ("b/c", 2, "0123456789abcdef" * 2)]
    # An iterator in path order streams; the same checksum as the sorted collection.
    assert tree_checksum(listing.entries()) == tree_checksum(entries[::-1])


def test_checksum_and_formatting_helpers() -> None:
    assert tree_checksum([]) == EMPTY_DIGEST
    entries = [("b/c", 2, "0" * 32), ("a", 1, "f" * 32)]
    assert tree_checksum(entries) == compute_tree(sorted(entries)).digest
    assert tree_checksum(entries).endswith("-2--3")
    assert content_md5("d41d8cd98f00b204e9800998ecf8427e") == "1B2M2Y8AsgTpgAmY7PhCfg=="
    assert format_bytes(512) == "512 B" and format_bytes(3 * 1024**3) == "3.0 GiB"


def test_result_is_ok_only_when_checksums_match_and_nothing_changed() -> None:
    result = UploadResult(server="s", expected_checksum="x", server_checksum="x")
    assert result.ok
    result.changed_files.append("a")
    assert not result.ok
    assert not UploadResult(server="s", expected_checksum="x", server_checksum="y").ok
    with pytest.raises(ChecksumMismatch, match="the server holds y"):
        UploadResult(server="s", expected_checksum="x", server_checksum="y").check()
    with pytest.raises(ClientError, match="1 files changed on disk"):
        result.check()
    assert UploadResult(server="s", expected_checksum="x", server_checksum="x").check().ok
    data = UploadResult(server="s", uploaded_files=10, elapsed_seconds=2.0).to_json()
    assert data["files_per_second"] == 5.0 and data["ok"] is False


def test_tqdm_progress_counts_files_and_bytes_including_take_backs() -> None:
    import io

    from dandizarr.client.progress import TqdmProgress

    out = io.StringIO()
    progress = TqdmProgress("upload", file=out)
    progress.start(3, 3000)
    progress.advance(2, 2000)
    progress.advance(-1, -1000)  # a cancelled batch's files are sent again
    progress.batch(2, ["a", "b"])
    progress.message("a message")
    progress.advance(2, 2000)
    progress.close()
    text = out.getvalue()
    assert "a message" in text
    assert "upload files" in text and "3/3" in text
    assert "upload bytes" in text


def test_shard_shapes_fit_the_pack_member_limit() -> None:
    from dandizarr.client.shards import fit_chunks_per_shard

    assert fit_chunks_per_shard((4, 64), 1000) == (4, 64)
    assert fit_chunks_per_shard((16384,), 10_000) == (8192,)
    assert fit_chunks_per_shard((8, 8, 64), 100) == (1, 1, 64)
    assert fit_chunks_per_shard((3, 3), 1) == (1, 1)
    assert fit_chunks_per_shard((), 5) == ()


def test_shard_size_argument() -> None:
    import argparse

    from dandizarr.commands.upload import byte_size

    assert [byte_size(t) for t in ("4096", "4K", "4KiB", "64M", "64mb", "1G")] == [
        4096, 4096, 4096, 64 << 20, 64 << 20, 1 << 30,
    ]  # fmt: skip
    for bad in ("", "0", "-1K", "x", "4T"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)


def test_a_file_entry_says_where_its_bytes_are() -> None:
    loose = RemoteFile.from_json({"path": "a/b", "size": 5, "digest": "d", "download_url": "u"})
    assert (loose.download_url, loose.shard_offset, loose.range_header()) == ("u", None, None)
    packed = RemoteFile.from_json(
        {
            "path": "s4/0/0/0/0",
            "size": 512,
            "digest": "d",
            "download_url": "shard-url",
            "shard": {"key": "zarr_shards/z/s4.x", "offset": 3136, "length": 512},
        }
    )
    assert packed.range_header() == "bytes=3136-3647"
    # A listing without ``urls``: nothing known of where the bytes are.
    assert RemoteFile.from_json({"path": "p", "size": 0, "digest": "d"}).download_url is None
    with pytest.raises(ValueError, match="empty packed file"):
        RemoteFile("e", 0, "d", "shard-url", 10).range_header()


def _v2_array(root: Path, n: int) -> None:
    root.mkdir()
    (root / ".zarray").write_text(
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [n],
                "chunks": [1],
                "dtype": "|u1",
                "compressor": None,
                "filters": None,
                "fill_value": 0,
                "order": "C",
            }
        )
    )
    for i in range(n):
        (root / str(i)).write_bytes(bytes([i]) * (i + 1))


def test_shard_builder_hashes_unhashed_members_from_the_bytes_it_packs(tmp_path: Path) -> None:
    """Chunk files nobody hashed yet are read once, as their shard is built, and get the md5
    of the bytes packed; a member hashed before (to compare with the server's copy) whose
    content changed since is left out and reported."""
    root = tmp_path / "a.zarr"
    _v2_array(root, 4)
    listing = LocalListing([(".zarray", 0), ("0", 1), ("1", 2), ("2", 3), ("3", 4)])
    listing.set_hashed(2, 2, hashlib.md5(b"\x01\x01").hexdigest())  # "1", as on the server
    (root / "1").write_bytes(b"changed")  # ... and changed on disk since
    result = UploadResult(server="http://server")
    info = ServiceInfo("1", 500, 600, "local", 100)
    builder = ShardBuilder(
        root, UploadOptions(pack=True), result, NullProgress(), threading.Event(), jobs=1
    )
    builder.plan_layouts(listing.paths, info)
    try:
        plans, loose = builder.plan_shards(listing, bytearray([0, 1, 1, 1, 1]))
        assert not loose
        shards = [builder._build_shard(plan, listing) for plan in plans]
    finally:
        builder.cleanup()
    packed = {m.path: m.md5 for shard in shards if shard for m in shard.members}
    assert result.changed_files == ["1"] and "1" not in packed
    for i, name in ((1, "0"), (3, "2"), (4, "3")):
        data = (root / name).read_bytes()
        assert listing.is_hashed(i) and listing.size(i) == len(data)
        assert listing.md5(i) == packed[name] == hashlib.md5(data).hexdigest()


def test_local_listing_of_paths_learns_its_sizes_as_files_are_hashed() -> None:
    listing = LocalListing.of_paths(["a", "b/c", "d"])
    assert not listing.sized and (listing.total_bytes, listing.known_bytes) == (None, 0)
    listing.set_hashed(0, 5, "f" * 32)
    listing.set_hashed_many([(1, 7, "e" * 32)])
    assert (listing.total_bytes, listing.known_bytes) == (None, 12)
    listing.set_hashed_many([(2, 3, "d" * 32), (1, 7, "e" * 32)])  # hashed again: counted once
    assert (listing.total_bytes, listing.known_bytes) == (15, 15)
    assert listing.file(1) == LocalFile("b/c", 7, "e" * 32)
    sized = LocalListing([("a", 1), ("b", 2)])
    assert sized.sized and (sized.total_bytes, sized.known_bytes) == (3, 3)


def test_tqdm_progress_without_a_byte_total() -> None:
    """A packed upload learns its sizes as it reads: the bytes bar counts without a total."""
    import io

    from dandizarr.client.progress import TqdmProgress

    out = io.StringIO()
    progress = TqdmProgress("upload", file=out)
    progress.start(2, None)
    progress.advance(2, 3 << 20)
    progress.close()
    text = out.getvalue()
    assert "2/2" in text and "3.00MB" in text.replace(" ", "")


def test_pack_batches_are_cut_by_the_bytes_each_shard_was_built_to(tmp_path: Path) -> None:
    """The listing of a packed upload has no sizes: shards are grouped into pack batches as
    they are built, each batch within ``max_batch_bytes`` by the shards' real sizes (a shard
    larger than the limit goes alone), in plan order, and within the service's limits."""
    root = tmp_path / "a.zarr"
    _v2_array(root, 12)  # chunk i holds i + 1 bytes
    paths = [".zarray", *sorted(str(i) for i in range(12))]
    listing = LocalListing.of_paths(paths)
    info = ServiceInfo("1", 5, 600, "local", 100)  # at most 5 shards a batch
    options = UploadOptions(pack=True, shard_target_bytes=2, max_batch_bytes=100)
    builder = ShardBuilder(
        root, options, UploadResult(server="s"), NullProgress(), threading.Event(), jobs=2
    )
    builder.plan_layouts(listing.paths, info)
    batches: list[list[tuple[str, int]]] = []

    def put(batch: Any) -> bool:
        batches.append([(shard.name, shard.size) for shard in batch.shards])
        builder.release_slot()
        return True

    try:
        plans, loose = builder.plan_shards(listing, bytearray([0] + [1] * 12))
        assert not loose and len(plans) == 6  # 2 chunks a shard
        assert builder.build_batches(plans, listing, info, put)
    finally:
        builder.cleanup()
    sizes = [[size for _, size in batch] for batch in batches]
    # Shard k holds chunks 2k and 2k+1 (4k + 3 bytes) and a 36-byte index.
    assert sizes == [[39, 43], [47, 51], [55], [59]]
    assert [name for batch in batches for name, _ in batch] == [p.name for p in plans]
    assert listing.known_bytes == sum(range(1, 13))  # every chunk hashed as it was packed
