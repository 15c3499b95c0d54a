"""Big files in parts on SeaweedFS (docs/measurements.md, "Big files in parts"): the md5 of the
local file, one PUT against 64 MiB parts 4 at once, and the md5 proof (16 MiB ranged GETs with
If-Match, as ``multipart_proofs.object_md5`` reads) in MiB/s and CPU-s per GiB.

    SIZE_MIB=1024 .venv/bin/python -m bench.bench_multipart
"""

from __future__ import annotations

import hashlib
import os
import resource
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from dandizarr.objectstore.base import content_md5_header
from dandizarr.objectstore.multipart import composite_etag, part_ranges
from dandizarr.objectstore.s3 import S3ObjectStore
from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedS3

MIB = 1 << 20
SIZE = int(os.environ.get("SIZE_MIB", "1024")) * MIB
PART = 64 * MIB
PROOF_BLOCK = 16 * MIB


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rate(started: float) -> str:
    return f"{SIZE / MIB / (time.perf_counter() - started):.0f} MiB/s"


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while block := handle.read(8 * MIB):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    file = tmp / "big"
    with open(file, "wb") as handle:
        for _ in range(SIZE // (64 * MIB)):
            handle.write(os.urandom(64 * MIB))
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

        ranges = part_ranges(SIZE, PART)
        with open(file, "rb") as handle:
            md5s = [hashlib.md5(handle.read(b - a)).hexdigest() for a, b in ranges]
        upload_id = store.create_multipart_upload("zarr/x/parts")
        urls = store.presigned_part_urls("zarr/x/parts", upload_id, md5s, expires_in=3600)

        def put(number: int) -> None:
            start, end = ranges[number]
            with open(file, "rb") as handle:
                handle.seek(start)
                body = handle.read(end - start)
            headers = {"Content-MD5": content_md5_header(md5s[number])}
            answer = requests.put(urls[number], data=body, headers=headers, timeout=3600)
            assert answer.status_code == 200, answer.text

        started = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(put, range(len(ranges))))
        parts = list(enumerate(md5s, 1))
        etag = store.complete_multipart_upload("zarr/x/parts", upload_id, parts)
        print(f"parts (64 MiB, 4 at once) and completion: {rate(started)}")
        assert etag == composite_etag(md5s)

        started, cpu = time.perf_counter(), cpu_seconds()
        digest = hashlib.md5(usedforsecurity=False)
        for start in range(0, SIZE, PROOF_BLOCK):
            end = min(start + PROOF_BLOCK, SIZE)
            data, _ = store.read_range("zarr/x/parts", start, end, if_match=etag)
            digest.update(data)
        assert digest.hexdigest() == whole
        per_gib = (cpu_seconds() - cpu) / (SIZE / (1 << 30))
        print(f"proof: {rate(started)}, {per_gib:.2f} CPU-s per GiB (storage's CPU not counted)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
