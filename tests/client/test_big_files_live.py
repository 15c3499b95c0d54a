"""Big files through the client (docs/api.md, "Big files"): over the service's threshold they
go in parts, several at once, each with its Content-MD5, in a batch of their own; an upload
killed mid-file resumes at the part, sending only the parts not yet sent. 5 MiB parts (S3's
smallest, which moto and SeaweedFS enforce too) on both."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from dandizarr.client.api import ApiClient
from dandizarr.client.big_files import PartJournal
from dandizarr.client.part_urls import PartUrls
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
def test_parts_past_a_page_are_asked_for_as_they_come(
    service: Service,
    uploader: MakeUploader,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pages of one part URL: the start gives each big file its first part's URL, and the
    client asks for each of the others as its PUT comes (issue #47: no answer holds every part
    URL of a file)."""
    settings.DANDIZARR_PART_URLS_PAGE = 1
    asked: list[tuple[str, int]] = []
    part_urls = ApiClient.part_urls

    def counted(client: ApiClient, zarr_id: str, batch: int, path: str, first: int) -> Any:
        asked.append((path, first))
        return part_urls(client, zarr_id, batch, path, first)

    monkeypatch.setattr(ApiClient, "part_urls", counted)
    root = tmp_path / "paged.zarr"
    made = _tree(root)
    result = uploader(root, name="paged.zarr").run()
    assert result.ok, result
    assert sorted(asked) == [(p, n) for p in ("0/big.bin", "shard/c/0/0") for n in (2, 3)]
    assert {p: d for p, (_, d) in service.remote_files(result.zarr_id).items()} == made
    assert service.archive(result.zarr_id)["checksum"] == local_checksum(root)


@pytest.mark.s3_servers("seaweedfs")
def test_a_part_url_storage_refuses_is_asked_for_again(
    service: Service,
    uploader: MakeUploader,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A URL storage refuses (as an expired one: 403) is asked for afresh, once, and the part
    PUT again with it. SeaweedFS checks signatures: the first URL of part 2 is spoilt."""
    settings.DANDIZARR_PART_URLS_PAGE = 1
    fetch = PartUrls._fetch
    fetched: list[tuple[str, int]] = []

    def spoil_once(urls: PartUrls, path: str, number: int) -> Any:
        page = fetch(urls, path, number)
        if number == 2 and (path, number) not in fetched:
            page.urls[0] = page.urls[0].replace("X-Amz-Signature=", "X-Amz-Signature=0")
        fetched.append((path, number))
        return page

    monkeypatch.setattr(PartUrls, "_fetch", spoil_once)
    root = tmp_path / "renewed.zarr"
    made = _tree(root)
    result = uploader(root, name="renewed.zarr").run()
    assert result.ok, result
    # Part 2 of each file twice (spoilt, then afresh), part 3 once.
    assert sorted(fetched) == [(p, n) for p in ("0/big.bin", "shard/c/0/0") for n in (2, 2, 3)]
    assert {p: d for p, (_, d) in service.remote_files(result.zarr_id).items()} == made


@pytest.mark.s3_servers("moto")
def test_a_page_is_asked_for_again_once_half_as_old_as_its_urls_live(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held page serves its parts while it is younger than half the URLs' lifetime; after,
    the part's URL comes from a fresh page (a 5 TiB file's upload outlasts any URL)."""
    client = service.client()
    try:
        zarr_id = client.create_archive(service.dandiset, "aged.zarr", layout="loose").zarr_id
        declared = {"path": "big", "etag": "0" * 32, "size": BIG_SIZE, "parts": ["1" * 32] * 3}
        answer = client.start_batch_in_parts(zarr_id, [declared])
        asked: list[int] = []
        part_urls = ApiClient.part_urls

        def counted(api: ApiClient, zarr_id: str, batch: int, path: str, first: int) -> Any:
            asked.append(first)
            return part_urls(api, zarr_id, batch, path, first)

        monkeypatch.setattr(ApiClient, "part_urls", counted)
        urls = PartUrls(client, zarr_id, answer, {"big": 3}, fresh_for=0.5)
        first = urls.url("big", 2)
        assert (first, asked) == (answer[0]["part_urls"][1], [])  # the start's page
        time.sleep(0.6)
        assert urls.url("big", 2) and asked == [2]  # a fresh page from part 2
        assert urls.url("big", 3) and asked == [2]  # held: part 3 is in it
        client.cancel_batch(zarr_id)
    finally:
        client.close()


@pytest.mark.s3_servers("moto")
def test_big_files_go_in_batches_within_the_caps(
    service: Service, uploader: MakeUploader, tmp_path: Path, settings: Any
) -> None:
    """Past the service's cap on the bytes one batch declares in parts, the big files go in
    one batch each."""
    settings.DANDIZARR_BATCH_DECLARED_BYTES_LIMIT = BIG_SIZE + 1
    root = tmp_path / "capped.zarr"
    made = _tree(root)
    result = uploader(root, name="capped.zarr").run()
    assert result.ok, result
    assert {p: d for p, (_, d) in service.remote_files(result.zarr_id).items()} == made
    batches = set(MultipartUpload.objects.values_list("batch_id", flat=True))
    assert len(batches) == 2


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
