"""Complete a 500-file batch into archives of 100,000 files; time complete -> checksum complete.

Runs the service's own code (services, tasks inline, the .checksum tree) on the local-filesystem
backend in a temporary data directory. Files are written straight to storage, as the client's
PUTs would; the clock runs from ``complete`` until ``checksum_status`` is ``complete``.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

TRIALS = 7
BATCH = 500


def _setup_django(data_dir: str) -> None:
    os.environ["DANDIZARR_DATA_DIR"] = data_dir
    os.environ["DANDIZARR_STORAGE"] = "local"
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{data_dir}/bench.sqlite3")
    os.environ["DJANGO_SETTINGS_MODULE"] = "dandizarr_server.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _md5(data: bytes) -> str:
    import hashlib

    return hashlib.md5(data).hexdigest()


def _seed(archive: Any, paths: list[str]) -> None:
    """Write the files and their .checksum tree (as an audit would) without 100k API calls."""
    from dandizarr.checksums import compute_tree, encode_checksum_file
    from dandizarr_server.zarr_api.domain.keys import checksum_key
    from dandizarr_server.zarr_api.runtime.storage import get_store

    store = get_store()
    body = b"x" * 64
    digest = _md5(body)
    # Seeding is not what is measured: skip its fsyncs (the measured batches keep them).
    fsync = getattr(store, "fsync", None)
    if fsync is not None:
        store.fsync = False  # type: ignore[attr-defined]
    for path in paths:
        store.put(archive.storage_prefix + path, body)

    def entries() -> Iterator[tuple[str, int, str]]:
        for path in sorted(paths):
            yield path, len(body), digest

    def write(directory: str, listing: Any) -> None:
        store.put(checksum_key(str(archive.zarr_id), directory), encode_checksum_file(listing))

    summary = compute_tree(entries(), on_directory=write)
    if fsync is not None:
        os.sync()
        store.fsync = fsync  # type: ignore[attr-defined]
    type(archive).objects.filter(pk=archive.pk).update(
        checksum=summary.digest, file_count=summary.count, size=summary.size
    )


def _run(layout: str, paths: list[str], new_paths: list[list[str]]) -> None:
    from django.contrib.auth.models import User

    from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
    from dandizarr_server.zarr_api.models import Batch
    from dandizarr_server.zarr_api.runtime.storage import get_store
    from dandizarr_server.zarr_api.runtime.tree import StorageChecksumTree
    from dandizarr_server.zarr_api.services.dandisets import archive_create, dandiset_create
    from dandizarr_server.zarr_api.services.upload_batches import batch_complete, batch_start

    user, _ = User.objects.get_or_create(username=f"bench-{layout}", is_staff=True)
    dandiset = dandiset_create(user=user, name=layout)
    archive = archive_create(user=user, dandiset=dandiset, name=f"{layout.split()[0]}.zarr")
    started = time.perf_counter()
    _seed(archive, paths)
    print(f"{layout}: seeded {len(paths):,} files in {time.perf_counter() - started:.1f} s")
    store = get_store()
    times = []
    reads = writes = 0
    for trial, batch_paths in enumerate(new_paths):
        files = {p: f"trial {trial} {p}".encode() for p in batch_paths}
        batch_start(
            user=user,
            archive=archive,
            files=[FileDeclaration(p, _md5(b)) for p, b in files.items()],
        )
        for path, body in files.items():
            store.put(archive.storage_prefix + path, body)
        reads_before = StorageChecksumTree.total_reads
        writes_before = StorageChecksumTree.total_writes
        clock = time.perf_counter()
        batch_complete(user=user, archive=archive)  # the tree update runs inline
        assert not Batch.objects.filter(archive=archive, state="pending").exists()
        times.append(time.perf_counter() - clock)
        reads = StorageChecksumTree.total_reads - reads_before
        writes = StorageChecksumTree.total_writes - writes_before
    directories = len({p.rsplit("/", 1)[0] if "/" in p else "" for p in new_paths[-1]})
    affected = len(
        {"/".join(p.split("/")[:i]) for p in new_paths[-1] for i in range(p.count("/") + 1)}
    )
    archive.refresh_from_db()
    print(
        f"{layout}: complete -> checksum complete, {BATCH}-file batch into {len(paths):,} files: "
        f"median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
        f"over {len(times)} batches"
    )
    print(
        f"{layout}: storage requests per batch: {BATCH} verification HEADs (local disk; on S3 "
        "one listing request per 1000 files), "
        f"{reads} .checksum reads, {writes} .checksum writes "
        f"({affected} affected directories, {directories} holding the batch's files)"
    )
    print(f"{layout}: final file_count {archive.file_count:,}, checksum {archive.checksum}")


def main() -> None:
    rng = random.Random(42)
    with tempfile.TemporaryDirectory(prefix="dandizarr-bench-") as data_dir:
        _setup_django(data_dir)
        # 0/i/j/k: 100 x 100 x 10 = 100,000 files; batches add files spread over the tree.
        nested = [f"0/{i}/{j}/{k}" for i in range(100) for j in range(100) for k in range(10)]
        nested_batches = [
            [
                f"0/{rng.randrange(100)}/{rng.randrange(100)}/{10 + t * 1000 + n}"
                for n in range(BATCH)
            ]
            for t in range(TRIALS)
        ]
        nested_batches = [list(dict.fromkeys(b)) for b in nested_batches]
        _run("nested 0/i/j/k", nested, nested_batches)
        # One flat directory of 100,000 Zarr v2 chunk keys.
        flat = [f"{i}.{j}.0" for i in range(1000) for j in range(100)]
        flat_batches = [[f"{1000 + t}.{n}.0" for n in range(BATCH)] for t in range(TRIALS)]
        _run("flat", flat, flat_batches)


if __name__ == "__main__":
    main()
