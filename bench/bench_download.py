"""Download 2,000 small files from the local service with S3 on moto's server: files/s of
``dandizarr download`` as it is (each file's URL from the paged listing), as it was (one API
request per file for its URL before each GET: the listing asked without ``urls``), and the
ceiling (the same presigned GETs alone, same sessions and threads). Loose and packed archives.

Everything runs on this machine as separate processes (moto, ``dandizarr serve``: SQLite,
tasks inline; this process is the client), so the figures are for comparing with each other.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.live_service import running_service

FILES = int(os.environ.get("BENCH_DOWNLOAD_FILES", "2000"))
FILE_SIZE = 1024
JOBS = int(os.environ.get("BENCH_DOWNLOAD_JOBS", "32"))


def _make_files(root: Path) -> None:
    """A zarr v2 array of FILES chunks of FILE_SIZE bytes (uint8, no compressor), 100 per row."""
    rows = (FILES + 99) // 100
    (root / "x").mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    zarray = {
        "zarr_format": 2,
        "shape": [rows, 100 * FILE_SIZE],
        "chunks": [1, FILE_SIZE],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
    (root / "x" / ".zarray").write_text(json.dumps(zarray))
    for i in range(FILES - 2):
        (root / "x" / f"{i // 100}.{i % 100}").write_bytes(os.urandom(FILE_SIZE))


def _per_file_client(client_class: Any) -> Any:
    """The client as it was: the listing carries no URLs, so each file is asked for its own."""

    class PerFile(client_class):  # type: ignore[misc, valid-type]
        def iter_files(self, zarr_id: str, prefix: str = "", **options: Any) -> Iterator[Any]:
            options.pop("urls", None)
            return super().iter_files(zarr_id, prefix, **options)

    return PerFile


def _download(client: Any, zarr_id: str, dest: Path) -> float:
    shutil.rmtree(dest, ignore_errors=True)
    result = client.download(zarr_id, dest)
    if not result.ok or result.downloaded_files != FILES:
        raise RuntimeError(f"download did not verify: {result.to_json()}")
    return FILES / result.elapsed_seconds


def _ceiling(client: Any, zarr_id: str) -> float:
    """The same GETs (ranged for packed files) with the listing's URLs, nothing else."""
    files = list(client.iter_files(zarr_id, urls=True))
    session = client.storage_session

    def get(file: Any) -> None:
        header = file.range_header()
        response = session.get(
            file.download_url, headers={"Range": header} if header else None, timeout=60
        )
        if response.status_code not in (200, 206):
            raise RuntimeError(f"GET {file.path}: HTTP {response.status_code}")

    started = time.perf_counter()
    with ThreadPoolExecutor(JOBS) as pool:
        list(pool.map(get, files))
    return len(files) / (time.perf_counter() - started)


def main() -> None:
    from dandizarr.client import DandizarrClient

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-download-"))
        src = Path(tmp) / "src.zarr"
        _make_files(src)
        print(f"{FILES:,} files of {FILE_SIZE} bytes, {JOBS} parallel GETs, S3 on moto")
        service = stack.enter_context(running_service(Path(tmp), "bench-download"))
        client = stack.enter_context(DandizarrClient(service.url, service.token, jobs=JOBS))
        old = stack.enter_context(
            _per_file_client(DandizarrClient)(service.url, service.token, jobs=JOBS)
        )
        dandiset = client.create_dandiset("bench")["identifier"]
        for layout, pack in (("loose", False), ("packed", True)):
            up = client.upload(src, dandiset=dandiset, name=f"{layout}.zarr", pack=pack)
            if not up.ok:
                raise RuntimeError(f"upload did not verify: {up.to_json()}")
            dest = Path(tmp) / f"copy-{layout}"
            after = _download(client, up.zarr_id, dest)
            before = _download(old, up.zarr_id, dest)
            ceiling = _ceiling(client, up.zarr_id)
            print(
                f"  {layout}: download {after:,.0f} files/s (URLs from the listing); "
                f"{before:,.0f} files/s asking per file (before); "
                f"ceiling {ceiling:,.0f} files/s (presigned GETs alone)"
            )


if __name__ == "__main__":
    main()
