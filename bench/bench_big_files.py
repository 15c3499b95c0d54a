"""Big files (issue #40): one 6 GiB file, and a set of 10 files of 1 GiB, up and down.

In the production shape (``tests.support.production``: gunicorn with 2 workers, one Celery
worker and beat on PostgreSQL and Redis) on SeaweedFS, at the service's production threshold
and part size unless ``BENCH_BIG_THRESHOLD_MIB`` says otherwise:

- ``dandizarr upload`` of the set into a new archive (every file hashed, sent with its signed
  Content-MD5, a file over the threshold in parts whose md5 the worker then proves by reading
  it from storage; the archive's checksum compared with the local one), and ``dandizarr
  download`` of it (every file's md5 and the tree checksum verified);
- ``s5cmd cp`` and ``aws s3 cp --recursive`` of the same files up and down, each into a bucket
  of its own on the same SeaweedFS, in the same run; both send big files in parts and verify
  nothing beyond each part's md5 (sizes of what they downloaded are checked here);
- after dandizarr's upload of the 1 GiB set, ``dandizarr upload`` of 3 of its files
  (``BENCH_BIG_PARTS_FILES``; 0: not run) once more, into a service whose threshold is
  512 MiB (each file in parts and proven): the other side of the threshold's trade, per GiB
  (docs/measurements.md).

Each tool with its default concurrency (dandizarr 32 transfers, s5cmd 256 workers and 5 parts
of 50 MB at once per file, aws 10 requests). The page cache is dropped before each transfer
(root only), so each reads its source from disk. Printed per transfer: wall, MiB/s, and
CPU-seconds per GiB of the client, the service's web processes, the Celery worker (for a set
in parts: the md5 proof, nearly all of it) and SeaweedFS.

    flock /work/tools-lead/measure.lock .venv/bin/python -m bench big_files

``BENCH_BIG_MIB`` (6144), ``BENCH_BIG_SET_FILES`` (10), ``BENCH_BIG_SET_MIB`` (1024) shrink it
(0: that set left out). Disk: a set's size three times at once (its source, one bucket, one
download), 32 GB for the 1 GiB set.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from bench.s3_env import (
    cpu_load,
    cpu_seconds,
    dandizarr_command,
    page_cache_dropped,
    run_timed,
    tool,
)
from tests.support.production import Production, child_pids, production, tools_missing
from tests.support.seaweedfs import SeaweedS3

MIB = 1 << 20
GIB = 1 << 30
BIG_MIB = int(os.environ.get("BENCH_BIG_MIB", "6144"))
SET_FILES = int(os.environ.get("BENCH_BIG_SET_FILES", "10"))
SET_MIB = int(os.environ.get("BENCH_BIG_SET_MIB", "1024"))
THRESHOLD_MIB = os.environ.get("BENCH_BIG_THRESHOLD_MIB")  # unset: the service's default
PARTS_FILES = int(os.environ.get("BENCH_BIG_PARTS_FILES", "3"))
PARTS_RUN_THRESHOLD = 512 * MIB
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
# A random pool the files repeat: not a power of two, so no two 64 MiB parts (nor SeaweedFS's
# 8 MiB chunks) are alike, and longer than any compressor's window (SeaweedFS compresses
# what compresses: zeros would measure its gzip, not a transfer).
POOL = 64 * MIB + 12_345
WRITE = 64 * MIB


@dataclass
class FileSet:
    label: str
    files: dict[str, int]  # path in the archive -> size

    @property
    def size(self) -> int:
        return sum(self.files.values())


def write_set(root: Path, files: dict[str, int], pool: bytes, seed: int) -> None:
    """Each file: the pool from its own offset on, repeated, written 64 MiB at a time."""
    for number, (path, size) in enumerate(files.items()):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        start = (seed * 1_000_003 + number * 7_919 * 4096) % POOL
        rotated = pool[start:] + pool[:start]
        with open(target, "wb") as handle:
            left = size
            while left:
                data = rotated if left >= POOL else rotated[:left]
                for offset in range(0, len(data), WRITE):
                    handle.write(data[offset : offset + WRITE])
                left -= len(data)
    (root / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')


@dataclass
class Spent:
    """One transfer: its wall time and the CPU-seconds of each process meanwhile."""

    what: str
    size: int
    wall: float
    client: float
    web: float
    worker: float
    storage: float
    cold: bool

    def line(self) -> str:
        gib = self.size / GIB

        def per(seconds: float) -> str:
            return f"{seconds / gib:5.2f}"

        return (
            f"  {self.what:<44} {self.wall:7.1f} s {self.size / MIB / self.wall:6.1f} MiB/s; "
            f"CPU-s per GiB: client {per(self.client)}, service {per(self.web)}, worker "
            f"{per(self.worker)}, SeaweedFS {per(self.storage)}"
        )


class Measured:
    """The processes whose CPU a transfer is charged with."""

    def __init__(self, s3: SeaweedS3, deployment: Production | None) -> None:
        self.storage = [s3.process.pid] if s3.process else []
        self.web: list[int] = []
        self.worker: list[int] = []
        if deployment is not None:
            assert deployment.web is not None
            self.web = [deployment.web.pid, *deployment.web_worker_pids()]
            self.worker = [w.pid for w in deployment.workers]
            self.worker += [c for w in deployment.workers for c in child_pids(w.pid)]

    def run(self, what: str, size: int, transfer: Callable[[], tuple[float, float]]) -> Spent:
        cold = page_cache_dropped()
        before = [cpu_seconds(p) for p in (self.web, self.worker, self.storage)]
        wall, client = transfer()
        after = [cpu_seconds(p) for p in (self.web, self.worker, self.storage)]
        web, worker, storage = (a - b for a, b in zip(after, before, strict=True))
        spent = Spent(what, size, wall, client, web, worker, storage, cold)
        print(spent.line(), flush=True)
        return spent


def timed(argv: list[str]) -> tuple[float, float, str]:
    done = run_timed(argv)
    return done.seconds, done.user_seconds + done.system_seconds, done.output


def dandizarr_json(output: str, what: str) -> dict[str, object]:
    if "{" not in output:
        raise RuntimeError(f"dandizarr {what} printed no summary: {output[-2000:]}")
    result: dict[str, object] = json.loads(output[output.index("{") : output.rindex("}") + 1])
    if not result.get("ok"):
        raise RuntimeError(f"dandizarr {what} did not verify: {result}")
    return result


def check_sizes(root: Path, files: dict[str, int]) -> None:
    for path, size in files.items():
        got = (root / path).stat().st_size if (root / path).exists() else None
        if got != size:
            raise RuntimeError(f"{root / path}: {got} bytes, expected {size}")


@contextmanager
def deployment_on(
    s3: SeaweedS3, directory: Path, threshold: int | None
) -> Iterator[tuple[Production, str]]:
    """The production shape on a bucket of its own (deleted after, freeing its disk), with a
    dandiset to upload into."""
    bucket = f"dz-{uuid.uuid4().hex[:8]}"
    env = {"DANDIZARR_MULTIPART_THRESHOLD_BYTES": str(threshold)} if threshold else {}
    try:
        with production(
            directory, DATABASE_URL, s3, bucket, web_workers=2, celery_workers=1, **env
        ) as deployment:
            answer = requests.post(
                f"{deployment.url}/api/dandisets/",
                json={"name": "big files"},
                headers={"Authorization": f"Token {deployment.token}"},
                timeout=60,
            )
            answer.raise_for_status()
            yield deployment, str(answer.json()["identifier"])
    finally:
        bucket_deleted(s3, bucket)
        shutil.rmtree(directory, ignore_errors=True)


def bucket_deleted(s3: SeaweedS3, bucket: str) -> None:
    """Empty and delete a bucket: SeaweedFS drops its collection's volumes, and their disk."""
    client = s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    client.delete_bucket(Bucket=bucket)


def dandizarr_runs(
    s3: SeaweedS3, work: Path, src: Path, files: FileSet, threshold: int | None, label: str
) -> list[Spent]:
    spent = []
    with deployment_on(s3, work / "deployment", threshold) as (deployment, dandiset):
        measured = Measured(s3, deployment)
        auth = ["--server", deployment.url, "--token", deployment.token]
        info = requests.get(f"{deployment.url}/api/info/", timeout=30).json()
        limit = info["multipart_threshold_bytes"]
        in_parts = sum(size > limit for size in files.files.values())
        zarr_id = ""

        def upload() -> tuple[float, float]:
            nonlocal zarr_id
            wall, cpu, output = timed(
                dandizarr_command(
                    "upload",
                    *auth,
                    "--dandiset",
                    dandiset,
                    "--name",
                    "big.zarr",
                    "--no-progress",
                    "--json",
                    str(src),
                )
            )
            result = dandizarr_json(output, "upload")
            zarr_id = str(result["zarr_id"])
            return wall, cpu

        what = f"{label} up ({in_parts} in parts, threshold {limit // MIB} MiB)"
        spent.append(measured.run(what, files.size, upload))
        if threshold is None:
            into = work / "down-dandizarr"

            def download() -> tuple[float, float]:
                wall, cpu, output = timed(
                    dandizarr_command(
                        "download", *auth, zarr_id, str(into), "--no-progress", "--json"
                    )
                )
                dandizarr_json(output, "download")
                return wall, cpu

            spent.append(measured.run(f"{label} down", files.size, download))
            check_sizes(into, files.files)
            shutil.rmtree(into)
    return spent


def tool_runs(name: str, s3: SeaweedS3, work: Path, src: Path, files: FileSet) -> list[Spent]:
    executable = tool(name)
    if executable is None:
        print(f"  {name} is not installed (make bench-tools): not measured")
        return []
    bucket = s3.create_bucket(f"{name}-{uuid.uuid4().hex[:8]}")
    endpoint = s3.endpoint_url
    into = work / f"down-{name}"
    measured = Measured(s3, None)
    if name == "s5cmd":
        up = [executable, "--endpoint-url", endpoint, "cp", f"{src}/", f"s3://{bucket}/big.zarr/"]
        down = [
            executable,
            "--endpoint-url",
            endpoint,
            "cp",
            f"s3://{bucket}/big.zarr/*",
            f"{into}/",
        ]
    else:
        up = [
            executable,
            "s3",
            "cp",
            "--recursive",
            "--quiet",
            "--endpoint-url",
            endpoint,
            str(src),
            f"s3://{bucket}/big.zarr/",
        ]
        down = [
            executable,
            "s3",
            "cp",
            "--recursive",
            "--quiet",
            "--endpoint-url",
            endpoint,
            f"s3://{bucket}/big.zarr/",
            str(into),
        ]
    label = f"{name} cp, {files.label}"
    try:

        def run(argv: list[str]) -> Callable[[], tuple[float, float]]:
            def transfer() -> tuple[float, float]:
                wall, cpu, _ = timed(argv)
                return wall, cpu

            return transfer

        spent = [measured.run(f"{label} up", files.size, run(up))]
        spent.append(measured.run(f"{label} down", files.size, run(down)))
        check_sizes(into, files.files)
    finally:
        shutil.rmtree(into, ignore_errors=True)
        bucket_deleted(s3, bucket)
    return spent


def main() -> None:
    missing = tools_missing()
    if missing:
        print(f"  not run: {', '.join(missing)} missing (the production shape needs them)")
        return
    print(cpu_load(), flush=True)
    sets = [
        FileSet(f"one {BIG_MIB / 1024:.3g} GiB file", {"0/c/0/0": BIG_MIB * MIB}),
        FileSet(
            f"{SET_FILES} files of {SET_MIB / 1024:.3g} GiB",
            {f"0/c/0/{n}": SET_MIB * MIB for n in range(SET_FILES)},
        ),
    ]
    sets = [s for s in sets if s.size]  # BENCH_BIG_MIB=0 or BENCH_BIG_SET_FILES=0: left out
    threshold = int(THRESHOLD_MIB) * MIB if THRESHOLD_MIB else None
    pool = os.urandom(POOL)
    spent: list[Spent] = []
    base = Path(os.environ.get("BENCH_BIG_DIR") or tempfile.gettempdir())
    with tempfile.TemporaryDirectory(dir=base, prefix="bench-big-") as tmp:
        work = Path(tmp)
        s3 = SeaweedS3(work / "seaweedfs")
        s3.start()
        try:
            for seed, files in enumerate(sets):
                src = work / "big.zarr"
                write_set(src, files.files, pool, seed)
                print(f"\n{files.label} ({files.size / GIB:.3g} GiB), SeaweedFS on this disk:")
                spent += dandizarr_runs(
                    s3, work, src, files, threshold, f"dandizarr, {files.label}"
                )
                if PARTS_FILES and len(files.files) > 1 and SET_MIB * MIB > PARTS_RUN_THRESHOLD:
                    # Hard links of some of the set's files, in an archive of their own.
                    some = dict(list(files.files.items())[:PARTS_FILES])
                    part_src = work / "parts" / "big.zarr"
                    for path in [*some, "zarr.json"]:
                        (part_src / path).parent.mkdir(parents=True, exist_ok=True)
                        os.link(src / path, part_src / path)
                    subset = FileSet(f"{len(some)} files of {SET_MIB / 1024:.3g} GiB", some)
                    label = f"dandizarr, {subset.label}"
                    spent += dandizarr_runs(s3, work, part_src, subset, PARTS_RUN_THRESHOLD, label)
                    shutil.rmtree(work / "parts")
                for name in ("s5cmd", "aws"):
                    spent += tool_runs(name, s3, work, src, files)
                shutil.rmtree(src)
        finally:
            s3.stop()
    cold = all(s.cold for s in spent)
    print(
        f"\npage cache {'dropped' if cold else 'NOT dropped (not root)'} before each transfer; "
        f"{cpu_load()}"
    )
