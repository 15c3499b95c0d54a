"""The client's peak RSS while writing 10 GiB through ``ArchiveStore`` (issue #48: at most
300 MB), in the production shape (``bench_session_writes.deployed``).

A uint8 array of ``BENCH_SESSION_MEMORY_CHUNKS`` (40,960) chunks of 256 KiB (10 GiB), made a
row of chunks (64 MiB) at a time while writing (``bench/session_writer.py``, ``slabs``), then
committed; the writer is a process of its own and its peak RSS (``ru_maxrss``) is printed,
with the rate. Not in ``make bench``'s default parts (about 10 minutes here):
``.venv/bin/python -m bench session_memory``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

from bench.bench_session_writes import deployed, run_writer
from dandizarr.client import DandizarrClient
from tests.support.production import tools_missing
from tests.support.seaweedfs import SeaweedS3

IN_DEFAULT_RUN = False
CHUNKS = int(os.environ.get("BENCH_SESSION_MEMORY_CHUNKS", "40960"))
CHUNK = (512, 512)
COLUMNS = 256  # chunks per row: a slab of 64 MiB
TARGET_MB = 300


def main() -> None:
    missing = tools_missing()
    if missing:
        print(f"skipped: {', '.join(missing)} missing")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shape = (CHUNK[0] * max(1, CHUNKS // COLUMNS), CHUNK[1] * COLUMNS)
    chunks = (shape[0] // CHUNK[0]) * COLUMNS
    size = shape[0] * shape[1]
    with tempfile.TemporaryDirectory(prefix="bench-session-memory-") as tmp:
        base = Path(tmp)
        s3 = SeaweedS3(base / "seaweedfs")
        try:
            with deployed(base, s3) as deployment:
                with DandizarrClient(deployment.url, deployment.token) as client:
                    dandiset = client.create_dandiset("bench-session-memory")["identifier"]
                    zarr_id = client.create_archive(dandiset, "memory").zarr_id
                spec = {
                    "writer": "archive_store",
                    "shape": shape,
                    "chunks": CHUNK,
                    "slabs": 1,
                    "url": deployment.url,
                    "token": deployment.token,
                    "zarr_id": zarr_id,
                }
                try:
                    result = run_writer(spec)
                except BaseException:
                    print(deployment.logs_tail())
                    raise
        finally:
            s3.stop()
    peak = result["peak_rss_mb"]
    verdict = "meets" if peak <= TARGET_MB else "MISSES"
    print(f"{size / 2**30:.1f} GiB ({chunks:,} chunks of 256 KiB) through ArchiveStore + commit: "
          f"{result['seconds']:.0f} s ({size / 1e6 / result['seconds']:,.0f} MB/s), client peak "
          f"RSS {peak:.0f} MB ({verdict} the {TARGET_MB} MB goal)")  # fmt: skip


if __name__ == "__main__":
    main()
