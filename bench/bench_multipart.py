"""Big files on SeaweedFS (docs/measurements.md, "Big files in parts" and "Ranged downloads").

Uploads (``MULTIPART_PARTS`` names ``upload``): the md5 of the local file, one PUT against
64 MiB parts 4 at once, and the md5 proof (16 MiB ranged GETs with If-Match, as
``selectors.stored_md5s.object_md5`` reads) in MiB/s and CPU-s per GiB.

Downloads (``download``): the client's two paths for one file (``dandizarr.client``): one GET
hashed as it streams (``storage_gets`` into a ``download_files.Body``) against ranges at once
(``ranged_gets.fetch_ranged``), for the whole ``DOWNLOAD_MIB`` object and for prefixes of it
(the threshold's question), in MiB/s and the client's CPU-s per GiB (all its threads; the
storage server's CPU not counted); then what hashing in order costs: md5 of bytes in memory
against reading them back from the page cache first (``ranged_gets.FollowingHasher``).

    MULTIPART_PARTS=upload,download SIZE_MIB=1024 DOWNLOAD_MIB=2048 \
        .venv/bin/python -m bench multipart
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from dandizarr.client.download_files import Body
from dandizarr.client.models import RemoteFile
from dandizarr.client.ranged_gets import RangedDownloads, RangeSlots, fetch_ranged
from dandizarr.client.retry import RetryCounter, RetryPolicy
from dandizarr.client.storage_gets import Connections
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import composite_etag, part_ranges
from dandizarr.objectstore.s3 import S3ObjectStore
from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedS3

MIB = 1 << 20
SIZE = int(os.environ.get("SIZE_MIB", "1024")) * MIB
DOWNLOAD_SIZE = int(os.environ.get("DOWNLOAD_MIB", "2048")) * MIB
PARTS = set(os.environ.get("MULTIPART_PARTS", "upload,download").split(","))
PART = 64 * MIB
PROOF_BLOCK = 16 * MIB


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rate(started: float, size: int = SIZE) -> str:
    return f"{size / MIB / (time.perf_counter() - started):.0f} MiB/s"


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while block := handle.read(8 * MIB):
            digest.update(block)
    return digest.hexdigest()


def random_file(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        for _ in range(size // (64 * MIB)):
            handle.write(os.urandom(64 * MIB))


def put_in_parts(store: S3ObjectStore, key: str, file: Path, size: int) -> str:
    """``file`` into ``key`` in 64 MiB parts, 4 at once; the object's ETag."""
    ranges = part_ranges(size, PART)
    with open(file, "rb") as handle:
        md5s = [hashlib.md5(handle.read(b - a)).hexdigest() for a, b in ranges]
    upload_id = store.create_multipart_upload(key)
    urls = store.presigned_part_urls(key, upload_id, md5s, expires_in=3600)

    def put(number: int) -> None:
        start, end = ranges[number]
        with open(file, "rb") as handle:
            handle.seek(start)
            body = handle.read(end - start)
        headers = {"Content-MD5": content_md5_header(md5s[number])}
        answer = requests.put(urls[number], data=body, headers=headers, timeout=3600)
        assert answer.status_code == 200, answer.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, range(len(ranges))))
    etag = store.complete_multipart_upload(key, upload_id, list(enumerate(md5s, 1)))
    assert etag == composite_etag(md5s)
    return etag


def upload_figures(store: S3ObjectStore, tmp: Path) -> None:
    file = tmp / "big"
    random_file(file, SIZE)
    started = time.perf_counter()
    whole = md5_of(file)
    print(f"local md5: {rate(started)}")

    [url] = store.presigned_put_urls([("zarr/x/one", whole)], expires_in=3600)
    started = time.perf_counter()
    with open(file, "rb") as handle:
        headers = {"Content-MD5": content_md5_header(whole), "Content-Length": str(SIZE)}
        response = requests.put(url, data=handle, headers=headers, timeout=3600)
    assert response.status_code == 200, response.text
    print(f"single PUT: {rate(started)}")

    started = time.perf_counter()
    etag = put_in_parts(store, "zarr/x/parts", file, SIZE)
    print(f"parts (64 MiB, 4 at once) and completion: {rate(started)}")

    started, cpu = time.perf_counter(), cpu_seconds()
    digest = hashlib.md5(usedforsecurity=False)
    for start in range(0, SIZE, PROOF_BLOCK):
        end = min(start + PROOF_BLOCK, SIZE)
        data, _ = store.read_range("zarr/x/parts", start, end, if_match=etag)
        digest.update(data)
    assert digest.hexdigest() == whole
    per_gib = (cpu_seconds() - cpu) / (SIZE / (1 << 30))
    print(f"proof: {rate(started)}, {per_gib:.2f} CPU-s per GiB (storage's CPU not counted)")
    file.unlink()


async def get_whole(url: str, size: int, tmp: Path) -> str:
    """One GET of the object's first ``size`` bytes, hashed as they stream (the download's
    path for a file under the threshold: a Range for a prefix costs what a whole GET does)."""
    connections = Connections(600)
    body = Body(tmp / "whole.part")
    try:
        answer = await connections.get(url, {"Range": f"bytes=0-{size - 1}"}, 206, body.write)
    finally:
        connections.close()
    assert answer.status == 206 and body.size == size, answer
    body.place(tmp / "whole")
    return body.md5.hexdigest()


async def get_ranged(url: str, size: int, digest: str, tmp: Path, plan: RangedDownloads) -> None:
    connections = [Connections(600) for _ in range(plan.parallel)]
    slots = RangeSlots([(c.get, c.close) for c in connections])
    remote = RemoteFile("big", size, digest, download_url=url, shard_offset=0)

    async def locate() -> RemoteFile:
        return remote

    try:
        body = await fetch_ranged(
            remote, tmp / "ranged.part", plan, slots, locate, RetryPolicy(), RetryCounter()
        )
    finally:
        slots.close()
    body.place(tmp / "ranged")


def measured(what: str, size: int, run: Coroutine[Any, Any, object]) -> None:
    started, cpu = time.perf_counter(), cpu_seconds()
    asyncio.run(run)
    per_gib = (cpu_seconds() - cpu) / (size / (1 << 30))
    print(f"{what}: {rate(started, size)}, {per_gib:.2f} client CPU-s per GiB", flush=True)


def download_figures(store: S3ObjectStore, tmp: Path) -> None:
    file = tmp / "download"
    random_file(file, DOWNLOAD_SIZE)
    put_in_parts(store, "zarr/x/download", file, DOWNLOAD_SIZE)
    file.unlink()
    url = store.presigned_get_url("zarr/x/download", expires_in=3600)
    asyncio.run(get_whole(url, DOWNLOAD_SIZE, tmp))  # storage's page cache warmed
    sizes = sorted({s for s in (64 * MIB, 256 * MIB, 512 * MIB) if s < DOWNLOAD_SIZE})
    sizes.append(DOWNLOAD_SIZE)
    digests = {size: md5_of_prefix(tmp / "whole", size) for size in sizes}
    for size in sizes:
        label = f"{size // MIB} MiB"
        measured(f"{label}: one GET", size, get_whole(url, size, tmp))
        for range_mib, parallel in ((32, 8),) if size < DOWNLOAD_SIZE else RANGE_PLANS:
            plan = RangedDownloads(threshold=0, range_bytes=range_mib * MIB, parallel=parallel)
            measured(
                f"{label}: ranges of {range_mib} MiB, {parallel} at once",
                size,
                get_ranged(url, size, digests[size], tmp, plan),
            )
            (tmp / "ranged").unlink()
    asyncio.run(get_whole(url, DOWNLOAD_SIZE, tmp))
    hashing_figures(tmp / "whole")


# The plans tried on the whole object: (range MiB, ranges at once).
RANGE_PLANS = ((32, 4), (32, 8), (32, 16), (16, 8), (64, 8))


def md5_of_prefix(path: Path, size: int) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        left = size
        while left:
            block = handle.read(min(8 * MIB, left))
            assert block, f"{path} is shorter than {size} bytes"
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def hashing_figures(path: Path) -> None:
    """md5 of 1 MiB chunks already in memory (a window of ranges kept until their turn)
    against 8 MiB blocks read back from the page cache first (``FollowingHasher``)."""
    size = path.stat().st_size
    md5_of(path)  # in the page cache
    chunk = os.urandom(MIB)
    started, cpu = time.perf_counter(), cpu_seconds()
    digest = hashlib.md5(usedforsecurity=False)
    for _ in range(size // MIB):
        digest.update(chunk)
    in_memory = (cpu_seconds() - cpu) / (size / (1 << 30))
    print(f"md5 from memory: {rate(started, size)}, {in_memory:.2f} CPU-s per GiB")
    fd = os.open(path, os.O_RDONLY)
    started, cpu = time.perf_counter(), cpu_seconds()
    digest = hashlib.md5(usedforsecurity=False)
    for at in range(0, size, 8 * MIB):
        digest.update(os.pread(fd, 8 * MIB, at))
    os.close(fd)
    read_back = (cpu_seconds() - cpu) / (size / (1 << 30))
    print(
        f"md5 read back from the page cache: {rate(started, size)}, {read_back:.2f} CPU-s per GiB"
    )


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    server = SeaweedS3(tmp / "seaweedfs")
    server.start()
    try:
        server.create_bucket("bench-bucket")
        store = S3ObjectStore(
            "bench-bucket",
            endpoint_url=server.endpoint_url,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
        )
        if "upload" in PARTS:
            upload_figures(store, tmp)
        if "download" in PARTS:
            download_figures(store, tmp)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
