"""Big files downloaded in byte ranges at once (``dandizarr.client.ranged_gets``): written in
place at their offsets, hashed in order, verified before they take their name; a range cut
short is resumed where it stopped; an object with other bytes fails its file and leaves
nothing behind. A small plan (1 MiB ranges over 2 MiB) gives several ranges per file."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from dandizarr.client import ClientError
from dandizarr.client.progress import NullProgress
from dandizarr.client.ranged_gets import RangedDownloads
from tests.support.flaky_storage import FlakyStorage
from tests.support.live_client import Service, make_tree
from tests.support.multipart import PART, THRESHOLD
from tests.support.sharded_client import MakeUploader, local_files

MIB = 1 << 20
PLAN = RangedDownloads(threshold=2 * MIB, range_bytes=MIB, parallel=4)
# Sent in single PUTs (under the multipart threshold), fetched in 6 ranges.
BIG = "0/big.bin"
BIG_SIZE = 5 * MIB + 12345
# Sent in 3 parts (a composite ETag), fetched in 11 ranges.
IN_PARTS = "shard/c/0/0"
IN_PARTS_SIZE = 2 * PART + 1000


class Messages(NullProgress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


@pytest.fixture(autouse=True)
def _small_parts(settings: Any) -> None:
    settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES = THRESHOLD
    settings.DANDIZARR_MULTIPART_PART_BYTES = PART


@pytest.fixture
def big_tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "big.zarr"
    made = make_tree(root, 12, seed=5)
    for name, size in ((BIG, BIG_SIZE), (IN_PARTS, IN_PARTS_SIZE)):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        made[name] = hashlib.md5(path.read_bytes()).hexdigest()
    return root, made


def _upload(service: Service, root: Path) -> str:
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
    assert uploaded.ok, uploaded
    return uploaded.zarr_id


def _files_in(dest: Path) -> set[str]:
    return {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_big_files_come_in_ranges(
    service: Service, big_tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = big_tree
    zarr_id = _upload(service, root)
    dest = tmp_path / "copy"
    with service.client() as client:
        result = client.download(zarr_id, dest, ranged=PLAN)
    assert result.ok, result
    assert result.ranged_files == 2
    assert result.downloaded_files == len(files)
    assert _files_in(dest) == set(files)
    assert all((dest / p).read_bytes() == (root / p).read_bytes() for p in files)


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_a_range_cut_short_is_resumed_where_it_stopped(
    service: Service,
    flaky: FlakyStorage,
    big_tree: tuple[Path, dict[str, str]],
    tmp_path: Path,
) -> None:
    root, files = big_tree
    zarr_id = _upload(service, root)
    flaky.cut_ranged_gets = 3
    flaky.get_ranges.clear()
    dest = tmp_path / "copy"
    with service.client() as client:
        result = client.download(zarr_id, dest, ranged=PLAN)
    assert result.ok, result
    assert flaky.cut_ranged_gets == 0 and result.retries >= 3
    assert all((dest / p).read_bytes() == (root / p).read_bytes() for p in files)
    # Each cut range was asked for again from where its bytes stopped (half of it), not
    # from its start: a range's end with two different starts, the later one mid-range.
    starts: dict[tuple[str, int], list[int]] = {}
    for key, asked in flaky.get_ranges:
        if asked is not None:
            match = re.fullmatch(r"bytes=(\d+)-(\d+)", asked)
            assert match is not None
            starts.setdefault((key, int(match[2])), []).append(int(match[1]))
    # Keyed by object and end: the two big files share range ends (1 MiB ranges from 0).
    resumed = {place: s for place, s in starts.items() if len(s) > 1}
    assert len(resumed) == 3, flaky.get_ranges
    for (_, end), (first, again) in resumed.items():
        assert again == first + (end - first + 1) // 2


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_an_expired_url_is_renewed_keeping_what_was_written(
    service: Service,
    flaky: FlakyStorage,
    big_tree: tuple[Path, dict[str, str]],
    tmp_path: Path,
) -> None:
    """A URL that expires while a big file is read (403 to a range): a fresh one from the
    service, the ranges already written kept (no file starts again from its first range)."""
    root, files = big_tree
    zarr_id = _upload(service, root)
    flaky.expire_ranged_gets = 2  # one URL of each big file
    flaky.get_ranges.clear()
    dest = tmp_path / "copy"
    with service.client() as client:
        result = client.download(zarr_id, dest, ranged=PLAN)
    assert result.ok, result
    assert flaky.expire_ranged_gets == 0 and result.ranged_files == 2
    assert all((dest / p).read_bytes() == (root / p).read_bytes() for p in files)
    firsts = [key for key, asked in flaky.get_ranges if asked and asked.startswith("bytes=0-")]
    assert len(firsts) == len(set(firsts)) == 2, flaky.get_ranges


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_a_big_object_with_other_bytes_fails_and_leaves_nothing(
    service: Service, big_tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = big_tree
    zarr_id = _upload(service, root)
    with service.client() as client:
        key = str(client.stat(zarr_id, BIG)["s3_key"])
    good = (root / BIG).read_bytes()
    # Same size, one byte changed in the middle of a range past the first: only the md5 tells.
    bad = bytearray(good)
    bad[3 * MIB + 7] ^= 0xFF
    boto3.client(
        "s3",
        endpoint_url=service.moto,
        region_name="us-east-1",
        aws_access_key_id=service.access_key,
        aws_secret_access_key=service.secret_key,
    ).put_object(Bucket=service.bucket, Key=key, Body=bytes(bad))

    dest = tmp_path / "copy"
    messages = Messages()
    with service.client() as client, pytest.raises(ClientError, match="1 files could not"):
        client.download(zarr_id, dest, progress=messages, ranged=PLAN)
    assert len(messages.lines) == 1 and messages.lines[0].startswith(f"{BIG}: ")
    assert f"expected {BIG_SIZE} bytes with md5 {files[BIG]}" in messages.lines[0]
    assert hashlib.md5(bad).hexdigest() in messages.lines[0]
    assert _files_in(dest) == set(files) - {BIG}  # no wrong bytes, no temporary file left
    assert (dest / IN_PARTS).read_bytes() == (root / IN_PARTS).read_bytes()


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_big_packed_files_come_in_ranges_of_their_shard(
    service: Service, uploader: MakeUploader, tmp_path: Path
) -> None:
    """Two chunk files of 3 MB packed side by side in one shard (under the multipart
    threshold): each is fetched in ranges of the shard, from its own offset."""
    root = tmp_path / "packed.zarr"
    group = zarr.open_group(LocalStore(root), mode="w", zarr_format=3)
    array = group.create_array(
        "a", shape=(1_500_000,), chunks=(750_000,), dtype="int32", compressors=None
    )
    array[:] = np.random.default_rng(7).integers(0, 1 << 30, 1_500_000, dtype="int32")
    files = local_files(root)
    result = uploader(root, name="packed.zarr", pack=True).run()
    assert result.ok, result
    assert result.packed_files == 2
    offsets = [
        service.api("GET", f"/api/zarr/{result.zarr_id}/files/a/c/{i}").json()["shard"]["offset"]
        for i in range(2)
    ]
    assert offsets[1] - offsets[0] == len(files["a/c/0"])  # side by side in one shard
    dest = tmp_path / "copy"
    with service.client() as client:
        downloaded = client.download(result.zarr_id, dest, ranged=PLAN)
    assert downloaded.ok, downloaded
    assert downloaded.ranged_files == 2
    assert {p: (dest / p).read_bytes() for p in files} == files
