"""Big files through the client (docs/api.md, "Big files"): over the service's threshold they
go in parts, several at once, each with its Content-MD5, in a batch of their own; an upload
killed mid-file resumes at the part, sending only the parts not yet sent. 5 MiB parts (S3's
smallest, which moto and SeaweedFS enforce too) on both."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from dandizarr.client.big_files import PartJournal
from dandizarr.client.upload import Uploader
from dandizarr_server.zarr_api.models import MultipartUpload
from tests.support.live_client import Service, local_checksum, make_tree
from tests.support.multipart import PART, THRESHOLD
from tests.support.sharded_client import MakeUploader, local_files

# Two files of three parts each.
BIG_SIZE = 2 * PART + 1000


@pytest.fixture(autouse=True)
def _small_parts(settings: Any) -> None:
    settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES = THRESHOLD
    settings.DANDIZARR_MULTIPART_PART_BYTES = PART


def _tree(root: Path) -> dict[str, str]:
    made = make_tree(root, 20, seed=3)
    for name in ("0/big.bin", "shard/c/0/0"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(BIG_SIZE))
        made[name] = hashlib.md5(path.read_bytes()).hexdigest()
    return made


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_big_files_go_in_parts(service: Service, uploader: MakeUploader, tmp_path: Path) -> None:
    root = tmp_path / "big.zarr"
    made = _tree(root)
    result = uploader(root, name="big.zarr").run()
    assert result.ok, result
    assert result.uploaded_files == len(made)
    remote = service.remote_files(result.zarr_id)
    assert {p: digest for p, (_, digest) in remote.items()} == made
    assert service.archive(result.zarr_id)["checksum"] == local_checksum(root)
    proven = MultipartUpload.objects.filter(state=MultipartUpload.State.PROVEN)
    assert sorted(proven.values_list("path", flat=True)) == ["0/big.bin", "shard/c/0/0"]
    # 18 small files in single PUTs and 3 parts per big file.
    assert result.put_requests == 20 + 2 * 3


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_killed_mid_file_resumes_at_the_part(
    service: Service, uploader: MakeUploader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "resumed.zarr"
    made = _tree(root)
    recorded = PartJournal.done
    finished: list[tuple[str, int]] = []

    def killed_after_two(journal: PartJournal, path: str, number: int) -> None:
        if len(finished) >= 2:
            raise SystemExit("killed")  # dead: parts PUT meanwhile are never recorded
        recorded(journal, path, number)
        finished.append((path, number))
        if len(finished) == 2:
            raise SystemExit("killed")  # as a kill: nothing after the journal's line

    monkeypatch.setattr(PartJournal, "done", killed_after_two)
    # A killed process cancels nothing: its batch stays open, its journal says so.
    monkeypatch.setattr(Uploader, "_cancel_quietly", lambda self: None)
    with pytest.raises(SystemExit):
        uploader(root, name="resumed.zarr").run()
    monkeypatch.setattr(PartJournal, "done", recorded)
    [journal] = service.state_dir.glob("*.parts.jsonl")
    assert len(journal.read_text().splitlines()) == 1 + 2  # its header and two parts
    assert service.api("GET", "/api/info/").status_code == 200
    zarr_id = next(iter(MultipartUpload.objects.values_list("archive__zarr_id", flat=True)))
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 204  # left open

    result = uploader(root, zarr_id=str(zarr_id)).run()
    assert result.ok, result
    # Only the parts the journal does not hold: 6 parts, 2 recorded by the killed run.
    assert result.put_requests == 4
    assert {p: d for p, (_, d) in service.remote_files(str(zarr_id)).items()} == made
    assert service.archive(str(zarr_id))["checksum"] == local_checksum(root)
    assert not list(service.state_dir.glob("*.parts.jsonl"))


def _write_arrays(root: Path) -> dict[str, bytes]:
    """Three v3 arrays (raw chunks): ``big``, two chunks of 8 MB (each over the threshold);
    ``mid``, four chunks of 4 MB (each under it, a shard of them over it); ``small``, 40
    chunks of 40 bytes (packed as usual)."""
    group = zarr.open_group(LocalStore(root), mode="w", zarr_format=3)
    rng = np.random.default_rng(11)
    for name, chunk, count in (("big", 2_000_000, 2), ("mid", 1_000_000, 4), ("small", 10, 40)):
        array = group.create_array(
            name, shape=(chunk * count,), chunks=(chunk,), dtype="int32", compressors=None
        )
        array[:] = rng.integers(0, 1 << 30, chunk * count, dtype="int32")
    return local_files(root)


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_pack_sends_chunks_too_big_for_a_shard_loose(
    service: Service, uploader: MakeUploader, tmp_path: Path
) -> None:
    """``upload --pack``: a chunk file over the threshold goes loose, in parts; the members of
    a shard that would pass the threshold go loose, each in one PUT; the rest is packed. The
    tree checksum is the one of the local files either way."""
    root = tmp_path / "arrays.zarr"
    files = _write_arrays(root)
    assert all(len(files[f"big/c/{i}"]) > THRESHOLD for i in range(2))
    assert all(len(files[f"mid/c/{i}"]) < THRESHOLD for i in range(4))
    result = uploader(root, name="arrays.zarr", pack=True).run()
    assert result.ok, result
    assert service.archive(result.zarr_id)["checksum"] == local_checksum(root)
    remote = service.remote_files(result.zarr_id)
    assert {p: d for p, (_, d) in remote.items()} == {
        p: hashlib.md5(b).hexdigest() for p, b in files.items()
    }
    proven = MultipartUpload.objects.filter(state=MultipartUpload.State.PROVEN)
    assert sorted(proven.values_list("path", flat=True)) == ["big/c/0", "big/c/1"]

    def packed(path: str) -> bool:
        entry = service.api("GET", f"/api/zarr/{result.zarr_id}/files/{path}").json()
        return bool(entry.get("shard"))

    assert not any(packed(f"big/c/{i}") or packed(f"mid/c/{i}") for i in range(2))
    assert not packed("mid/c/3")
    assert all(packed(f"small/c/{i}") for i in (0, 17, 39))
