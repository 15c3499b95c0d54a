"""The commit of a write session of ``BENCH_SESSION_COMMIT_FILES`` (100,000) chunk files
(issue #48: at most 2 s), in the production shape (``bench_session_writes.deployed``: gunicorn,
a Celery worker, PostgreSQL, Redis, SeaweedFS).

A uint8 array of 100,000 chunks of 64 bytes (no compressor) is written through
``ArchiveStore`` (not timed here: ``bench session_writes`` times writing), flushed, and then
``commit()`` is timed from the call to the checksum returned: the service's check of every
staged file against storage and the one transaction that makes the batch, then the tree update
of 100,000 files (the Celery worker) that the client waits for, then the archive's checksum.
The checksum is checked against the tree hash of the same array written to memory. Not in
``make bench``'s default parts (the writing took 19 minutes on a loaded machine):
``.venv/bin/python -m bench session_commit``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from bench.bench_session_writes import deployed, tree_hash_of
from dandizarr.client import ArchiveStore, DandizarrClient
from tests.support.production import tools_missing
from tests.support.seaweedfs import SeaweedS3

IN_DEFAULT_RUN = False
FILES = int(os.environ.get("BENCH_SESSION_COMMIT_FILES", "100000"))
CHUNK = (8, 8)
TARGET_SECONDS = 2.0


def _shape(files: int) -> tuple[int, int]:
    """A grid of about ``files`` chunks: 250 chunk columns."""
    return (CHUNK[0] * max(1, files // 250), CHUNK[1] * 250)


def _timed_phases(store: ArchiveStore) -> dict[str, float]:
    """Time the commit's parts as the client sees them: the POST (the service verifies every
    staged file and makes the batch), the wait for the batch's tree update (the Celery worker),
    the checksum's GET."""
    phases: dict[str, float] = {}
    client: Any = store.client

    def timed(name: str) -> None:
        method = getattr(client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - began

        setattr(client, name, call)

    for name in ("commit_session", "wait_for_batch", "get_archive"):
        timed(name)
    return phases


def main() -> None:
    missing = tools_missing()
    if missing:
        print(f"skipped: {', '.join(missing)} missing")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shape = _shape(FILES)
    files = (shape[0] // CHUNK[0]) * (shape[1] // CHUNK[1])
    data = np.random.default_rng(48).integers(0, 256, size=shape, dtype="u1")
    with tempfile.TemporaryDirectory(prefix="bench-session-commit-") as tmp:
        base = Path(tmp)
        s3 = SeaweedS3(base / "seaweedfs")
        try:
            with deployed(base, s3) as deployment:
                with DandizarrClient(deployment.url, deployment.token) as client:
                    dandiset = client.create_dandiset("bench-session-commit")["identifier"]
                    zarr_id = client.create_archive(dandiset, "commit").zarr_id
                store = ArchiveStore(deployment.url, zarr_id, deployment.token, read_only=False)
                started = time.perf_counter()
                array = zarr.create_array(
                    store, name="a", shape=shape, chunks=CHUNK, dtype="u1", compressors=None,
                    fill_value=0,
                )  # fmt: skip
                array[:] = data
                store.flush()
                written = time.perf_counter() - started
                print(f"  {files:,} chunk files of 64 bytes written in {written:.0f} s "
                      f"({files / written:,.0f} files/s)", flush=True)  # fmt: skip
                phases = _timed_phases(store)
                try:
                    started = time.perf_counter()
                    checksum = store.commit()
                    seconds = time.perf_counter() - started
                except BaseException:
                    print(deployment.logs_tail())
                    raise
        finally:
            s3.stop()
    expected = tree_hash_of(shape, CHUNK, data)
    if checksum != expected:
        raise RuntimeError(f"commit's checksum {checksum} is not the local tree hash {expected}")
    print("  phases: " + ", ".join(f"{name} {t:.2f} s" for name, t in phases.items()))
    verdict = "meets" if seconds <= TARGET_SECONDS else "MISSES"
    print(f"commit of a session of {files + 2:,} files (production shape): {seconds:.2f} s from "
          f"the call to the checksum ({verdict} the {TARGET_SECONDS:.0f} s goal); checksum = the "
          "local tree hash")  # fmt: skip


if __name__ == "__main__":
    main()
