"""Upload 10,000 files of 4 KiB to the local service with S3 on moto's server, and compare
with the ceiling: the raw rate of presigned PUTs to that same S3, measured in the same run.

Everything runs on this machine as separate processes: moto's server, the service
(``dandizarr serve``: SQLite, tasks inline) and this process as the client. The ceiling is
measured before and after the upload and the better of the two is used, so the ratio is not
flattered by a warming or tiring moto.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.live_service import running_service

FILES = int(os.environ.get("BENCH_UPLOAD_FILES", "10000"))
FILE_SIZE = 4096
JOBS = int(os.environ.get("BENCH_UPLOAD_JOBS", "32"))
TARGET = 0.80


def _make_files(root: Path) -> list[str]:
    """A zarr-like layout: 100 files per directory, random content."""
    paths = []
    for i in range(FILES):
        path = f"0/{i // 100}/{i % 100}"
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(os.urandom(FILE_SIZE))
        paths.append(path)
    return paths


def _ceiling(moto: str, bucket: str, root: Path, paths: list[str], label: str) -> float:
    """Presigned PUTs of the same files, signed by the service's own S3 store, sent with the
    client's sessions and the same number of threads."""
    from dandizarr.client.api import make_session
    from objectstore.s3 import S3ObjectStore

    store = S3ObjectStore(
        bucket, endpoint_url=moto, access_key_id="testing", secret_access_key="testing"
    )
    bodies = []
    urls = []
    for path in paths:
        data = (root / path).read_bytes()
        digest = hashlib.md5(data).digest()
        bodies.append((data, base64.b64encode(digest).decode()))
        urls.append(
            store.presigned_put_url(f"ceiling-{label}/{path}", digest.hex(), expires_in=3600)
        )
    session = make_session(JOBS + 4)

    def put(i: int) -> None:
        data, md5 = bodies[i]
        response = session.put(urls[i], data=data, headers={"Content-MD5": md5}, timeout=60)
        response.raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(JOBS) as pool:
        list(pool.map(put, range(len(paths))))
    elapsed = time.perf_counter() - started
    session.close()
    return len(paths) / elapsed


def main() -> None:
    from dandizarr.client import DandizarrClient

    # A terminated benchmark still stops the servers it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with (
        tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp,
        running_service(Path(tmp), "bench-upload") as service,
    ):
        src = Path(tmp) / "src.zarr"
        paths = _make_files(src)
        print(f"{FILES:,} files of {FILE_SIZE} bytes, {JOBS} parallel PUTs")
        ceiling_before = _ceiling(service.moto, service.bucket, src, paths, "before")
        print(f"ceiling (presigned PUTs to moto), before: {ceiling_before:,.0f} files/s")

        with DandizarrClient(service.url, service.token, jobs=JOBS) as client:
            dandiset = client.create_dandiset("bench")["identifier"]
            result = client.upload(src, dandiset=dandiset)
        if not result.ok:
            raise RuntimeError(f"upload did not verify: {result.to_json()}")
        rate = result.uploaded_files / result.elapsed_seconds
        print(
            f"dandizarr upload: {result.uploaded_files:,} files in "
            f"{result.elapsed_seconds:.1f} s = {rate:,.0f} files/s "
            f"({result.batches} batches, {result.retries} retries), checksum verified"
        )
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in result.phase_seconds.items())
        print(f"  time in the serial steps: {phases}")
        put_rate = result.uploaded_files / result.phase_seconds["put"]
        print(f"  rate while PUTs run (between start and complete): {put_rate:,.0f} files/s")
        ceiling_after = _ceiling(service.moto, service.bucket, src, paths, "after")
        print(f"ceiling (presigned PUTs to moto), after: {ceiling_after:,.0f} files/s")
        ceiling = max(ceiling_before, ceiling_after)
        ratio = rate / ceiling
        verdict = "meets" if ratio >= TARGET else "MISSES"
        print(
            f"upload rate / ceiling = {rate:,.0f} / {ceiling:,.0f} = {ratio:.0%} "
            f"({verdict} the {TARGET:.0%} target)"
        )


if __name__ == "__main__":
    main()
