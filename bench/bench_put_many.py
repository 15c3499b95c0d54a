"""``S3ObjectStore.put_many`` of a tree update's ``.checksum`` files (112 JSON objects of ~2 KB,
as ~10,000 files in 100 directories make) on SeaweedFS: presigned PUTs over the client's
connections (``dandizarr.objectstore.s3_puts``) against a boto3 ``put_object`` each (the generic
``ObjectStore.put_many``), both on the store's pool. CPU is the process's (every thread), the
median of ``BENCH_PUT_MANY_ROUNDS`` rounds; a server has 2 cores and the client waits.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from dandizarr.objectstore.base import ObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore
from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedS3

OBJECTS = 112
ROUNDS = int(os.environ.get("BENCH_PUT_MANY_ROUNDS", "20"))


def checksum_files() -> dict[str, bytes]:
    """Listings of 40 entries each, the size of a directory's ``.checksum`` file."""
    return {
        f"zarr/{uuid.uuid4()}/d{i:03d}/.checksum": json.dumps(
            {
                "checksums": {
                    "files": [
                        {"digest": uuid.uuid4().hex, "name": f"{n}.{i}", "size": 4096}
                        for n in range(24)
                    ]
                },
                "md5": uuid.uuid4().hex + "-24--98304",
            }
        ).encode()
        for i in range(OBJECTS)
    }


def measure(put_many: Callable[[dict[str, bytes]], None]) -> tuple[float, float]:
    """Median (CPU s, wall s) of a batch, over ``ROUNDS`` rounds after one unmeasured."""
    cpu, wall = [], []
    for round_ in range(ROUNDS + 1):
        items = checksum_files()
        started_cpu, started = time.process_time(), time.perf_counter()
        put_many(items)
        if round_:
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        server = SeaweedS3(Path(directory))
        server.start()
        try:
            bucket = server.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")
            store = S3ObjectStore(
                bucket,
                endpoint_url=server.endpoint_url,
                access_key_id=ACCESS_KEY,
                secret_access_key=SECRET_KEY,
            )
            store.warm_up()
            size = sum(map(len, checksum_files().values())) // OBJECTS
            print(f"{OBJECTS} objects of ~{size} bytes, median of {ROUNDS} rounds")
            # The two alternate, so a change in the machine's load hits both alike.
            boto3_way: list[tuple[float, float]] = []
            presigned: list[tuple[float, float]] = []
            for _ in range(2):
                boto3_way.append(measure(lambda items: ObjectStore.put_many(store, items)))
                presigned.append(measure(store.put_many))
            for name, figures in [("boto3 put_object", boto3_way), ("presigned", presigned)]:
                cpu = statistics.median(c for c, _ in figures)
                wall = statistics.median(w for _, w in figures)
                print(f"  {name:17} CPU {cpu * 1000:6.1f} ms   wall {wall * 1000:6.1f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
