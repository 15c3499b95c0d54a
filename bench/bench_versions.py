"""Archive versions (docs/versions.md) at scale, on SeaweedFS (a real S3 with bucket versioning)
and PostgreSQL:

- publish of a 1,000,000-file archive, loose and packed: seconds, the publishing process's peak
  RSS, and the objects storage gained (a PUT or COPY makes an object version: 0 means nothing
  was written or copied);
- a second publish after changing 1,000 of its files: seconds, and the database's growth over
  the change and the publish;
- reading a file of the first version (an object version the draft replaced) against reading
  the draft's file, through ``/zarr/``;
- a diff of version 1 to version 2 through ``GET /api/zarr/{id}/diff/``: a page of 100
  changes and all of them, cold and warm;
- garbage collection of 100,000 unreferenced object versions: seconds and peak RSS, killed
  (kill -9) half-way and run again to the end.

The archives' trees, member rows and shard objects are written straight into the database and
storage (as an audit would find them): a million uploads would measure the upload, not versions.
Storage holds the objects the bench reads or changes. Each measured step runs in a process of its
own (its peak RSS is its own). ``BENCH_VERSIONS_FILES`` and ``BENCH_VERSIONS_GC_OBJECTS`` scale
it down.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FILES = int(os.environ.get("BENCH_VERSIONS_FILES", "1000000"))
GC_OBJECTS = int(os.environ.get("BENCH_VERSIONS_GC_OBJECTS", "100000"))
CHANGED = min(1000, FILES // 10)
PER_DIRECTORY = 1000
BODY = b"v" * 64
READS = 200


def _paths() -> list[str]:
    return [f"c/{i // PER_DIRECTORY}/{i % PER_DIRECTORY}" for i in range(FILES)]


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


# --- the processes ----------------------------------------------------------------------------


def _django() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "dandizarr_server.settings"
    import django

    django.setup()


def _child(step: str, *args: str) -> dict[str, Any]:
    """Run ``step`` in a process of its own; its answer, its seconds and its peak RSS (MB)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", f"import bench.bench_versions as b; b.step({step!r}, {args!r})"],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    status = process.wait()
    seconds = time.perf_counter() - started
    if status != 0:
        raise RuntimeError(f"step {step} failed ({status}): {output[-2000:]!r}")
    answer: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    # The child's own high-water mark (VmHWM): ru_maxrss would count this big process, which
    # the child was forked from before it ran Python afresh.
    return {**answer, "process_seconds": seconds}


def _peak_rss_mb() -> float:
    """This process's peak resident set since it started Python (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step(name: str, args: tuple[str, ...]) -> None:
    """A measured step, in its own process; prints its figures as JSON (peak RSS included)."""
    _django()
    from dandizarr_server.zarr_api.models import Dandiset, ZarrArchive
    from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
    from dandizarr_server.zarr_api.services.publishing import version_publish

    if name == "publish":
        dandiset = Dandiset.objects.get(pk=int(args[0]))
        user = dandiset.owners.get()
        started = time.perf_counter()
        version_publish(user=user, dandiset=dandiset)
        seconds = time.perf_counter() - started
        print(json.dumps({"seconds": seconds, "peak_rss_mb": _peak_rss_mb()}))
    elif name == "gc":
        archive = ZarrArchive.objects.get(zarr_id=args[0])
        started = time.perf_counter()
        report = archive_garbage_collect(archive, dry_run=False)
        seconds = time.perf_counter() - started
        print(json.dumps({"seconds": seconds, "peak_rss_mb": _peak_rss_mb(), **report.__dict__}))


# --- seeding ----------------------------------------------------------------------------------


def _seed_archive(user: Any, dandiset: Any, name: str, packed: bool) -> Any:
    """An archive of FILES files, its tree in storage, its member rows and shard objects when
    ``packed``; storage holds the loose objects the bench changes or reads."""
    from dandizarr.checksums import compute_tree, encode_checksum_file
    from dandizarr_server.zarr_api.domain.keys import checksum_key, new_shard_key
    from dandizarr_server.zarr_api.models import Asset, Shard, ShardMember, Version, ZarrArchive
    from dandizarr_server.zarr_api.runtime.storage import get_store
    from dandizarr_server.zarr_api.services.bulk_rows import rows_insert
    from dandizarr_server.zarr_api.services.dandisets import archive_create

    layout = ZarrArchive.Layout.SHARDED if packed else ZarrArchive.Layout.LOOSE
    archive = archive_create(user=user, dandiset=dandiset, name=name, layout=layout)
    store = get_store()
    paths = _paths()
    digest = _md5(BODY)
    listings: dict[str, bytes] = {}

    def on_directory(directory: str, listing: Any) -> None:
        listings[checksum_key(archive.zarr_id, directory)] = encode_checksum_file(listing)

    summary = compute_tree(((p, len(BODY), digest) for p in paths), on_directory=on_directory)
    store.put_many(listings)
    if packed:
        shard_body = BODY * PER_DIRECTORY
        shards = []
        for directory in range(FILES // PER_DIRECTORY):
            key = new_shard_key(archive.zarr_id, f"c/{directory}.shard")
            shards.append(
                Shard(
                    archive=archive,
                    name=f"c/{directory}.shard",
                    key=key,
                    size=len(shard_body),
                    md5=_md5(shard_body),
                    state=Shard.State.LIVE,
                    verified=True,
                )
            )
        Shard.objects.bulk_create(shards, batch_size=1000)
        store.put_many({s.key: shard_body for s in shards})
        by_name = {s.name: s.pk for s in Shard.objects.filter(archive=archive)}
        rows_insert(
            ShardMember,
            ("archive", "path", "shard", "offset", "length", "md5", "slot"),
            (
                (
                    archive.pk,
                    path,
                    by_name[f"c/{i // PER_DIRECTORY}.shard"],
                    (i % PER_DIRECTORY) * len(BODY),
                    len(BODY),
                    digest,
                    i % PER_DIRECTORY,
                )
                for i, path in enumerate(paths)
            ),
        )
    else:
        touched = paths[:CHANGED] + paths[-READS:]
        store.put_many({archive.storage_prefix + p: BODY for p in touched})
    ZarrArchive.objects.filter(pk=archive.pk).update(
        checksum=summary.digest, file_count=summary.count, size=summary.size
    )
    draft = Version.objects.get(dandiset=dandiset, version=Version.DRAFT)
    Asset.objects.create(version=draft, path=name, zarr=archive)
    return ZarrArchive.objects.get(pk=archive.pk)


def _object_versions(bucket_client: Any, bucket: str) -> int:
    count = 0
    for page in bucket_client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        count += len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))
    return count


def _database_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        size: int = cursor.fetchone()[0]
    return size


def _change_files(user: Any, archive: Any) -> None:
    """CHANGED files rewritten through a real batch: presigned PUTs, complete, tree update."""
    import base64

    import requests

    from dandizarr_server.zarr_api.domain.declarations import FileDeclaration
    from dandizarr_server.zarr_api.services.upload_batches import batch_complete, batch_start

    body = b"changed!" * 8
    declared = [FileDeclaration(p, _md5(body)) for p in _paths()[:CHANGED]]
    targets = batch_start(user=user, archive=archive, files=declared)
    content_md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
    with requests.Session() as http:
        for target in targets:
            answer = http.put(target.upload_url, data=body, headers={"Content-MD5": content_md5})
            answer.raise_for_status()
    batch_complete(user=user, archive=archive)


def _read_seconds(client: Any, zarr_id: str, paths: list[str]) -> list[float]:
    times = []
    for path in paths:
        started = time.perf_counter()
        response = client.get(f"/zarr/{zarr_id}/{path}")
        b"".join(response.streaming_content)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    return times


def _gc_garbage(store: Any, archive: Any) -> None:
    """GC_OBJECTS objects written and deleted under the archive: replaced versions nothing
    references (as a cancelled upload of that many files leaves)."""
    keys = [f"{archive.storage_prefix}junk/{i}" for i in range(GC_OBJECTS)]
    for start in range(0, len(keys), 10000):
        store.put_many(dict.fromkeys(keys[start : start + 10000], b"junk"))
    store.delete_many(keys)


# --- main -------------------------------------------------------------------------------------


def main() -> None:
    import psycopg

    from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedS3

    database = f"bench_versions_{os.getpid()}"
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {database}")
    weed_dir = Path(tempfile.mkdtemp(prefix="bench-versions-"))
    weed = SeaweedS3(weed_dir)
    weed.start()
    try:
        bucket = weed.create_bucket("bench-versions")
        os.environ.update(
            DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{database}",
            DANDIZARR_STORAGE="s3",
            DANDIZARR_S3_ENDPOINT_URL=weed.endpoint_url,
            DANDIZARR_S3_BUCKET=bucket,
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            DANDIZARR_GC_WINDOW_DAYS="0",
            DANDIZARR_LOG_LEVEL="WARNING",
        )
        os.environ.pop("CELERY_BROKER_URL", None)
        _run(weed)
    finally:
        weed.stop()
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _run(weed: Any) -> None:
    _django()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from dandizarr_server.zarr_api.models import ZarrArchive
    from dandizarr_server.zarr_api.runtime.storage import get_store
    from dandizarr_server.zarr_api.services.dandisets import dandiset_create
    from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning

    call_command("migrate", verbosity=0)
    ensure_storage_versioning()  # as ensure_bucket sets a bucket up
    s3 = weed.client()
    bucket = os.environ["DANDIZARR_S3_BUCKET"]
    user = User.objects.create_user("bench")
    print(f"{FILES:,} files per archive, {CHANGED:,} changed, on SeaweedFS", flush=True)
    archives = {}
    for packed in (False, True):
        kind = "packed" if packed else "loose"
        dandiset = dandiset_create(user=user, name=f"bench {kind}")
        started = time.perf_counter()
        archive = _seed_archive(user, dandiset, f"{kind}.zarr", packed)
        print(f"  seeded the {kind} archive in {time.perf_counter() - started:.1f} s", flush=True)
        before = _object_versions(s3, bucket)
        first = _child("publish", str(dandiset.pk))
        written = _object_versions(s3, bucket) - before
        print(
            f"publish, {kind}, {FILES:,} files: {first['seconds']:.3f} s "
            f"(process {first['process_seconds']:.1f} s), peak RSS {first['peak_rss_mb']:.0f} MB, "
            f"objects written or copied: {written}  (targets: <= 30 s, <= 250 MB, 0)",
            flush=True,
        )
        database_before = _database_bytes()
        _change_files(user, ZarrArchive.objects.get(pk=archive.pk))
        second = _child("publish", str(dandiset.pk))
        grown = (_database_bytes() - database_before) / 1e6
        print(
            f"second publish, {kind}, after {CHANGED:,} changed files: {second['seconds']:.3f} s, "
            f"database growth over the change and the publish {grown:.2f} MB "
            "(targets: <= 5 s, <= 10 MB)",
            flush=True,
        )
        archives[kind] = ZarrArchive.objects.get(pk=archive.pk)

    # Reads: a changed file in version 1 (an object version the draft replaced) vs the draft's.
    client = Client(HTTP_HOST="127.0.0.1")
    archive = archives["loose"]
    version = archive.versions.get(number=1)
    changed = _paths()[:READS]
    for label, paths in (("changed files", changed), ("unchanged files", _paths()[-READS:])):
        cold = _read_seconds(client, str(version.version_id), paths)
        warm_version = _read_seconds(client, str(version.version_id), paths)
        draft = _read_seconds(client, str(archive.zarr_id), paths)
        ratio = statistics.median(warm_version) / statistics.median(draft)
        print(
            f"read, {label}: version 1 {statistics.median(warm_version) * 1e3:.2f} ms "
            f"(first read {statistics.median(cold) * 1e3:.2f} ms), draft "
            f"{statistics.median(draft) * 1e3:.2f} ms: {ratio:.2f}x  (target <= 1.2x)",
            flush=True,
        )

    # Diffs through the route (issue #49): version 1 to version 2, CHANGED files apart; a page
    # of 100 changes, then all of them, each cold (this process's first) then warm.
    v1_id, v2_id = (str(archive.versions.get(number=n).version_id) for n in (1, 2))
    for limit in (100, CHANGED):
        url = f"/api/zarr/{v1_id}/diff/?to={v2_id}&limit={limit}"
        for attempt in ("cold", "warm"):
            started = time.perf_counter()
            response = client.get(url)
            took = time.perf_counter() - started
            assert response.status_code == 200, response.content[:200]
            page = response.json()
            found = sum(len(page[kind]) for kind in ("added", "modified", "deleted"))
            print(
                f"diff of version 1 to 2 through the route, {found:,} changes ({attempt}): "
                f"{took * 1e3:.0f} ms  (target <= 1 s for 100)",
                flush=True,
            )

    # Garbage collection of GC_OBJECTS unreferenced versions, killed half-way, run again.
    store = get_store()
    started = time.perf_counter()
    _gc_garbage(store, archive)
    print(f"  wrote and deleted {GC_OBJECTS:,} objects in {time.perf_counter() - started:.1f} s")
    killed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import bench.bench_versions as b; b.step('gc', ({str(archive.zarr_id)!r},))",
        ],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(max(2.0, GC_OBJECTS / 20000))
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    left = _object_versions(s3, bucket)
    full = _child("gc", str(archive.zarr_id))
    after = _object_versions(s3, bucket)
    print(
        f"GC of {GC_OBJECTS:,} unreferenced objects (+ their delete markers), killed (-9) once: "
        f"the rerun deleted {full['reclaimed_objects']:,} versions in {full['seconds']:.1f} s, "
        f"peak RSS {full['peak_rss_mb']:.0f} MB; bucket {left:,} -> {after:,} object versions, "
        f"held {full['held_objects']:,}",
        flush=True,
    )
    # Every version still reads exactly.
    for number in (1, 2):
        held = archive.versions.get(number=number)
        got = _read_seconds(client, str(held.version_id), changed[:20])
        assert len(got) == 20
    print(f"  (self RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
