"""One writer of ``bench session_writes``, run as a process of its own so that its peak RSS is
its own: ``python bench/session_writer.py '{"writer": ..., ...}'`` prints one JSON line.

The same zarr-python array creation for every writer (``zarr.create_array``, no compressor,
``arr[:] = data``), the same data (``numpy.random.default_rng(SEED)``), and the time from
opening the store to the commit's end. Writers: ``archive_store`` (dandizarr's
``ArchiveStore`` + ``commit()``), ``fsspec`` (zarr's ``FsspecStore`` on s3fs) and
``icechunk`` (a session of an Icechunk 2 repository + its commit; run from
``.venv-icechunk``, Python 3.12). Imports only what its writer needs: the Icechunk venv has
neither dandizarr nor s3fs.

``slabs`` > 0: the data is made a slab of chunk rows at a time while writing (the 10 GiB
run), never held whole; otherwise made whole before the clock starts.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import numpy as np
import zarr

SEED = 48


def array_data(shape: tuple[int, int]) -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, 256, size=shape, dtype="u1")


def _store(spec: dict[str, Any]) -> tuple[Any, Any]:
    """The writer's store, and what commits it (None: nothing to commit)."""
    writer = spec["writer"]
    if writer == "archive_store":
        from dandizarr.client import ArchiveStore

        store = ArchiveStore(spec["url"], spec["zarr_id"], spec["token"], read_only=False)
        return store, store.commit
    if writer == "fsspec":
        from zarr.storage import FsspecStore

        options = {
            "key": spec["access_key"],
            "secret": spec["secret_key"],
            "endpoint_url": spec["endpoint"],
            "client_kwargs": {"region_name": spec["region"]},
            "asynchronous": True,
        }
        url = f"s3://{spec['bucket']}/{spec['prefix']}"
        return FsspecStore.from_url(url, storage_options=options, read_only=False), None
    if writer == "icechunk":
        import icechunk

        storage = icechunk.s3_storage(
            bucket=spec["bucket"],
            prefix=spec["prefix"],
            region=spec["region"],
            endpoint_url=spec["endpoint"],
            allow_http=True,
            force_path_style=True,
            access_key_id=spec["access_key"],
            secret_access_key=spec["secret_key"],
        )
        repo = icechunk.Repository.create(storage)
        session = repo.writable_session("main")
        return session.store, lambda: session.commit("bench session_writes")
    raise ValueError(f"no writer {writer!r}")


def write(spec: dict[str, Any]) -> dict[str, Any]:
    shape = tuple(spec["shape"])
    chunks = tuple(spec["chunks"])
    slabs = int(spec.get("slabs", 0))
    data = None if slabs else array_data(shape)
    started = time.perf_counter()
    store, commit = _store(spec)
    array = zarr.create_array(
        store, name="a", shape=shape, chunks=chunks, dtype="u1", compressors=None, fill_value=0
    )
    if data is not None:
        array[:] = data
    else:
        # A slab of chunk rows at a time, each new bytes (one random slab, shifted by one in
        # place for each next row: only one slab is ever held).
        rows = chunks[0]
        slab = np.random.default_rng(SEED).integers(0, 256, size=(rows, shape[1]), dtype="u1")
        for n in range(shape[0] // rows):
            if n:
                slab += np.uint8(1)
            array[n * rows : (n + 1) * rows, :] = slab
    returned = time.perf_counter()
    flush = getattr(store, "flush", None)
    if flush is not None:  # ArchiveStore writes behind: the writes still in flight
        flush()
    written = time.perf_counter()
    checksum = commit() if commit is not None else None
    ended = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": ended - started,
        "write_seconds": returned - started,
        "flush_seconds": written - returned,
        "commit_seconds": ended - written,
        "peak_rss_mb": _peak_rss_mb(),
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "checksum": checksum if isinstance(checksum, str) else None,
    }


def _peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``: ``ru_maxrss`` keeps the parent's across exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    print(json.dumps(write(json.loads(sys.argv[1]))), flush=True)
