"""Standard Zarr readers against dandizarr (issue #12): 1,000 random chunks of a loose and of a
sharded (``upload --pack``) archive, read by tensorstore through ``/zarr/`` (http kvstore), by
zarr-python over the archive's manifest (fsspec reference file system, straight from
storage), by dandizarr's own ``ArchiveStore``, and as direct storage reads of the same bytes
(aiohttp GETs of the manifest's URLs, with the member's Range for a packed chunk): chunks/s of
each and its ratio to the direct reads. All at the same concurrency (``BENCH_READERS_JOBS``).

Same processes as ``bench_sharded``: moto's S3 server and ``dandizarr serve`` (tasks inline,
S3 on that moto), this process the reader. ``BENCH_READERS_CHUNKS`` sizes the array.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_sharded import CHUNK_ELEMENTS, make_array
from bench.live_service import Service, running_service

CHUNKS = int(os.environ.get("BENCH_READERS_CHUNKS", "10000"))
READS = int(os.environ.get("BENCH_READERS_READS", "1000"))
JOBS = int(os.environ.get("BENCH_READERS_JOBS", "16"))
# moto copies a whole object out for every ranged GET (S3 does not): with the default 64 MiB
# shards every reader, direct reads included, measured moto at ~10 reads/s. 1 MiB shards keep
# the ceiling the readers' own.
SHARD_BYTES = int(os.environ.get("BENCH_READERS_SHARD_BYTES", str(1 << 20)))
HTTP_TARGET = 0.5
MANIFEST_TARGET = 0.9


async def _bounded(keys: list[str], one: Callable[[str], Awaitable[bytes]]) -> list[bytes]:
    limit = asyncio.Semaphore(JOBS)

    async def bounded(key: str) -> bytes:
        async with limit:
            return await one(key)

    return list(await asyncio.gather(*(bounded(k) for k in keys)))


def direct(refs: dict[str, Any], keys: list[str]) -> list[bytes]:
    import aiohttp

    async def run() -> list[bytes]:
        connector = aiohttp.TCPConnector(limit=JOBS)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(key: str) -> bytes:
                ref = refs[key]
                headers = {}
                if len(ref) == 3:
                    headers["Range"] = f"bytes={ref[1]}-{ref[1] + ref[2] - 1}"
                async with session.get(ref[0], headers=headers) as response:
                    response.raise_for_status()
                    return await response.read()

            return await _bounded(keys, one)

    return asyncio.run(run())


def tensorstore_http(service: Service, zarr_id: str, keys: list[str]) -> list[bytes]:
    import tensorstore as ts

    context = ts.Context({"http_request_concurrency": {"limit": JOBS}})
    spec = {
        "driver": "zarr",
        "kvstore": {"driver": "http", "base_url": f"{service.url}/zarr/{zarr_id}/"},
    }
    array = ts.open(spec, read=True, context=context).result()
    futures = [array[int(k) * CHUNK_ELEMENTS : (int(k) + 1) * CHUNK_ELEMENTS].read() for k in keys]
    return [f.result().tobytes() for f in futures]


def zarr_manifest(refs_document: dict[str, Any], keys: list[str]) -> list[bytes]:
    import fsspec
    import zarr
    from zarr.storage import FsspecStore

    async def run() -> list[bytes]:
        fs = fsspec.filesystem(
            "reference",
            fo=refs_document,
            remote_protocol="http",
            # Fresh instances: a cached one holds a session of a closed event loop.
            remote_options={"asynchronous": True, "skip_instance_cache": True},
            asynchronous=True,
            skip_instance_cache=True,
        )
        array = await zarr.api.asynchronous.open_array(
            store=FsspecStore(fs, read_only=True), mode="r"
        )

        async def one(key: str) -> bytes:
            start = int(key) * CHUNK_ELEMENTS
            data = await array.getitem(slice(start, start + CHUNK_ELEMENTS))
            return np.asarray(data).tobytes()

        return await _bounded(keys, one)

    return asyncio.run(run())


def archive_store(service: Service, zarr_id: str, keys: list[str]) -> list[bytes]:
    from zarr.core.buffer import default_buffer_prototype

    from dandizarr.client.store import ArchiveStore

    prototype = default_buffer_prototype()
    store = ArchiveStore(service.url, zarr_id)

    async def one(key: str) -> bytes:
        buffer = await store.get(key, prototype)
        assert buffer is not None
        return buffer.to_bytes()

    try:
        return asyncio.run(_bounded(keys, one))
    finally:
        store.close()


def main() -> None:
    import requests

    from dandizarr.client import DandizarrClient

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-readers-") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "array.zarr"
        chunk_keys = make_array(src, CHUNKS)
        sample = random.Random(1).sample(chunk_keys, min(READS, len(chunk_keys)))
        expected = [(src / key).read_bytes() for key in sample]
        print(
            f"{CHUNKS:,} chunks of {CHUNK_ELEMENTS * 4} bytes (zarr v2, raw); {len(sample):,} "
            f"random chunks read by each reader, {JOBS} at a time; shards of "
            f"{SHARD_BYTES:,} bytes"
        )
        with running_service(tmp_path, "bench-readers") as service:
            zarr_ids = {}
            with DandizarrClient(service.url, service.token, jobs=32) as client:
                dandiset = client.create_dandiset("bench")["identifier"]
                for label, pack in (("loose", False), ("sharded", True)):
                    result = client.upload(
                        src,
                        dandiset=dandiset,
                        name=label,
                        pack=pack,
                        shard_target_bytes=SHARD_BYTES if pack else None,
                    )
                    if not result.ok:
                        raise RuntimeError(f"{label} upload did not verify: {result.to_json()}")
                    zarr_ids[label] = str(result.zarr_id)
            for label, zarr_id in zarr_ids.items():
                started = time.perf_counter()
                document = requests.get(
                    f"{service.url}/api/zarr/{zarr_id}/manifest/", timeout=600
                ).json()
                seconds = time.perf_counter() - started
                refs = document["refs"]
                print(
                    f"{label}: manifest of {len(refs):,} files in {seconds:.2f} s "
                    f"({len(refs) / seconds:,.0f} refs/s)"
                )
                readers: dict[str, Callable[[], list[bytes]]] = {
                    "direct storage reads": functools.partial(direct, refs, sample),
                    "tensorstore via /zarr/": functools.partial(
                        tensorstore_http, service, zarr_id, sample
                    ),
                    "zarr-python via manifest": functools.partial(zarr_manifest, document, sample),
                    "ArchiveStore": functools.partial(archive_store, service, zarr_id, sample),
                }
                rates: dict[str, float] = {}
                for name, read in readers.items():
                    started = time.perf_counter()
                    got = read()
                    seconds = time.perf_counter() - started
                    if got != expected:
                        raise RuntimeError(f"{label} {name}: bytes differ from the originals")
                    rates[name] = len(sample) / seconds
                ceiling = rates["direct storage reads"]
                for name, rate in rates.items():
                    target = {
                        "tensorstore via /zarr/": HTTP_TARGET,
                        "zarr-python via manifest": MANIFEST_TARGET,
                    }.get(name)
                    verdict = ""
                    if target is not None:
                        met = "meets" if rate / ceiling >= target else "MISSES"
                        verdict = f" ({met} the >= {target:.0%} target)"
                    print(
                        f"{label} {name}: {rate:,.0f} chunks/s = {rate / ceiling:.0%} of "
                        f"direct{verdict}"
                    )


if __name__ == "__main__":
    main()
