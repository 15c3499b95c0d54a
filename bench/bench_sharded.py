"""Sharded archives (docs/sharded.md) against loose ones: 100,000 chunk files of 4 KiB (one
zarr v2 array, raw chunks) uploaded loose and with ``pack`` into two archives of the local
service (S3 on moto's server), then the objects each archive keeps in the bucket, then 1,000
random chunks read back through ``ArchiveStore`` from each, counting storage requests.

Processes (moto's server, ``dandizarr serve`` with tasks inline, this
process as the client). ``BENCH_SHARDED_CHUNKS`` scales the array down (e.g. 5000).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.live_service import Service, running_service

CHUNKS = int(os.environ.get("BENCH_SHARDED_CHUNKS", "100000"))
CHUNK_ELEMENTS = 1024  # uint32: 4 KiB per chunk file
READS = int(os.environ.get("BENCH_SHARDED_READS", "1000"))
JOBS = int(os.environ.get("BENCH_SHARDED_JOBS", "32"))
SPEEDUP_TARGET = 10.0
OBJECTS_TARGET = 100.0
REQUESTS_TARGET = 2.0


def make_array(root: Path, chunks: int = CHUNKS) -> list[str]:
    """One zarr v2 array at the root: ``chunks`` raw (uncompressed) chunks of 4 KiB."""
    root.mkdir(parents=True)
    (root / ".zarray").write_text(
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [chunks * CHUNK_ELEMENTS],
                "chunks": [CHUNK_ELEMENTS],
                "dtype": "<u4",
                "compressor": None,
                "filters": None,
                "fill_value": 0,
                "order": "C",
            }
        )
    )
    keys = [str(i) for i in range(chunks)]
    for key in keys:
        (root / key).write_bytes(os.urandom(CHUNK_ELEMENTS * 4))
    return keys


def count_objects(service: Service, zarr_id: str) -> dict[str, int]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=service.moto, region_name="us-east-1")
    counts = {}
    for prefix in (f"zarr/{zarr_id}/", f"zarr_shards/{zarr_id}/"):
        n = 0
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=service.bucket, Prefix=prefix
        ):
            n += len(page.get("Contents", []))
        counts[prefix.split("/")[0]] = n
    return counts


@dataclass
class ReadFigures:
    seconds: float
    storage_gets: int
    api_requests: int


def read_chunks(service: Service, zarr_id: str, root: Path, keys: list[str]) -> list[ReadFigures]:
    """Read ``keys`` through ArchiveStore twice (cold, then with entries cached), checking the
    bytes; storage GETs counted by a hook on the store's storage session."""
    from zarr.core.buffer import default_buffer_prototype

    from dandizarr.client.store import ArchiveStore

    prototype = default_buffer_prototype()
    store = ArchiveStore(service.url, zarr_id)
    seen = {"storage": 0, "api": 0}

    def counter(name: str) -> Any:
        def hook(response: Any, *args: Any, **kwargs: Any) -> Any:
            seen[name] += 1
            return response

        return hook

    store.client.storage_session.hooks["response"].append(counter("storage"))
    store.client.api_session.hooks["response"].append(counter("api"))

    async def all_of_them() -> None:
        limit = asyncio.Semaphore(JOBS)  # JOBS reads at a time, as zarr-python would

        async def one(key: str) -> None:
            async with limit:
                buffer = await store.get(key, prototype)
            assert buffer is not None and buffer.to_bytes() == (root / key).read_bytes(), key

        await asyncio.gather(*(one(key) for key in keys))

    figures = []
    try:
        for _ in range(2):
            before = dict(seen)
            started = time.perf_counter()
            asyncio.run(all_of_them())
            figures.append(
                ReadFigures(
                    time.perf_counter() - started,
                    seen["storage"] - before["storage"],
                    seen["api"] - before["api"],
                )
            )
    finally:
        store.close()
    return figures


def main() -> None:
    from dandizarr.client import DandizarrClient

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-sharded-") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "array.zarr"
        started = time.perf_counter()
        keys = make_array(src)
        print(
            f"{CHUNKS:,} chunk files of {CHUNK_ELEMENTS * 4} bytes (one zarr v2 array, raw), "
            f"written in {time.perf_counter() - started:.1f} s; {JOBS} parallel transfers"
        )
        with running_service(tmp_path, "bench-sharded") as service:
            results = {}
            with DandizarrClient(service.url, service.token, jobs=JOBS) as client:
                dandiset = client.create_dandiset("bench")["identifier"]
                for label, pack in (("loose", False), ("packed", True)):
                    result = client.upload(src, dandiset=dandiset, name=label, pack=pack)
                    if not result.ok:
                        raise RuntimeError(f"{label} upload did not verify: {result.to_json()}")
                    results[label] = result
                    extra = (
                        f", {result.shards} shards in {result.pack_batches} pack batches"
                        if pack
                        else f", {result.batches} batches"
                    )
                    phases = ", ".join(f"{k} {v:.1f}" for k, v in result.phase_seconds.items())
                    print(
                        f"{label} upload: {result.uploaded_files:,} files in "
                        f"{result.elapsed_seconds:.1f} s = {result.files_per_second:,.0f} "
                        f"files/s{extra}; checksum {result.server_checksum} verified "
                        f"(serial steps, s: {phases})"
                    )
            loose, packed = results["loose"], results["packed"]
            assert loose.server_checksum == packed.server_checksum
            speedup = loose.elapsed_seconds / packed.elapsed_seconds
            verdict = "meets" if speedup >= SPEEDUP_TARGET else "MISSES"
            print(f"upload speedup: {speedup:.1f}x ({verdict} the {SPEEDUP_TARGET:.0f}x target)")

            counts = {label: count_objects(service, r.zarr_id) for label, r in results.items()}
            totals = {label: sum(c.values()) for label, c in counts.items()}
            for label, c in counts.items():
                detail = ", ".join(f"{k}/: {v:,}" for k, v in c.items())
                print(f"{label} archive: {totals[label]:,} objects in the bucket ({detail})")
            ratio = totals["loose"] / max(1, totals["packed"])
            verdict = "meets" if ratio >= OBJECTS_TARGET else "MISSES"
            print(f"objects: {ratio:,.0f}x fewer ({verdict} the {OBJECTS_TARGET:.0f}x target)")

            sample = random.Random(0).sample(keys, min(READS, len(keys)))
            for label, result in results.items():
                cold, warm = read_chunks(service, result.zarr_id, src, sample)
                n = len(sample)
                print(
                    f"{label} reads of {n:,} random chunks: cold {cold.seconds:.2f} s "
                    f"({cold.storage_gets / n:.2f} storage GETs + {cold.api_requests / n:.2f} "
                    f"service requests per chunk), cached entries {warm.seconds:.2f} s "
                    f"({warm.storage_gets / n:.2f} storage GETs + {warm.api_requests / n:.2f} "
                    "service requests per chunk)"
                )
                if label == "packed":
                    worst = max(cold.storage_gets, warm.storage_gets) / n
                    verdict = "meets" if worst <= REQUESTS_TARGET else "MISSES"
                    print(
                        f"packed: {worst:.2f} storage requests per chunk read "
                        f"({verdict} the <= {REQUESTS_TARGET:.0f} target; "
                        f"{warm.storage_gets / n:.2f} with entries cached)"
                    )


if __name__ == "__main__":
    main()
