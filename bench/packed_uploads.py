"""What the packed-upload benchmarks share (``bench_s3_packed``'s parts and ``bench.scale``):
the services they upload into, the source arrays they write, and how an upload is timed and
its objects counted. No benchmark of its own."""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bench.arrays import row_chunked_zarray
from bench.s3_env import (
    DATABASE_SERVER_URL,
    dandizarr_command,
    local_service,
    run_timed,
    s3_env,
    seaweedfs,
    service_on,
)
from tests.support.production import create_database, drop_database

CHUNKS = int(os.environ.get("BENCH_S3_PACKED_CHUNKS", "100000"))
CONVERT_FILES = int(os.environ.get("BENCH_S3_PACKED_CONVERT", "10000"))
MILLION = int(os.environ.get("BENCH_PACKED_FILES", "1000000"))
PARTS = os.environ.get("BENCH_S3_PACKED_PARTS", "abc")
JOBS = int(os.environ.get("BENCH_S3_PACKED_JOBS", "32"))
SCALE_FILES = int(os.environ.get("BENCH_SCALE_FILES", "10000000"))
SERVICES = os.environ.get("BENCH_S3_PACKED_SERVICES", "serve,s3,pg").split(",")
# Part e: BENCH_S3_PACKED_SYNC=0 leaves the --sync step out; BENCH_S3_PACKED_FRESH_MB, a fresh
# upload's client peak measured elsewhere (make bench-scale's, of the same tree into the same
# shape), instead of uploading the tree once more (half an hour at 10,000,000 files).
SYNC_STEP = os.environ.get("BENCH_S3_PACKED_SYNC", "1") != "0"
FRESH_MB = (
    float(os.environ["BENCH_S3_PACKED_FRESH_MB"])
    if os.environ.get("BENCH_S3_PACKED_FRESH_MB")
    else None
)
BROWSE_REQUESTS = 20

# Issue #15's targets for the million files.
TARGET_SECONDS = 180.0
TARGET_SERVICE_MB = 250.0
TARGET_CLIENT_MB = 300.0
TARGET_BROWSE_MS = 50.0
TARGET_AUDIT_SECONDS = 180.0


@dataclass
class Service:
    url: str
    token: str
    pid: int
    data_dir: Path
    env: dict[str, str]  # the settings it runs with (for manage.py audit_zarr)
    bucket: str | None = None
    s3: Any = None  # a boto3 client of the bucket, or None for local storage

    @property
    def access_log(self) -> Path:
        return self.data_dir / "access.log"

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        response = requests.request(
            method,
            self.url + path,
            headers={"Authorization": f"Token {self.token}"},
            timeout=60,
            **kwargs,
        )
        response.raise_for_status()
        return response


def write_array(root: Path, count: int, chunk_bytes: int) -> tuple[str, str]:
    """A Zarr v2 array at ``root`` of ``count`` raw uint8 chunk files of ``chunk_bytes`` bytes,
    nested keys ``i/j`` (``"dimension_separator": "/"``), up to 1,000 per directory; one
    directory and one chunk path, for browsing. ``.zarray`` is written last: a tree without it
    is unfinished (a writer stopped half-way), and writing it again keeps the directories that
    were already full (10,000,000 files take half an hour on a busy machine)."""
    root.mkdir(parents=True, exist_ok=True)
    # Two writers of one kept tree (one started ahead of a benchmark, the benchmark) take turns:
    # the second waits, then finds it full.
    with open(root.parent / f".{root.name}.writing", "w") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        _write_chunks(root, count, chunk_bytes)
    return array_paths(root)


def _write_chunks(root: Path, count: int, chunk_bytes: int) -> None:
    cols = min(1000, count)
    rows = max(1, count // cols)
    noise = os.urandom(1 << 20)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for i in range(rows):
        directory = root / str(i)
        if (root / str(i + 1)).is_dir() and len(os.listdir(directory)) == cols:
            continue  # full, and the writer went on past it (the last one may be cut short)
        directory.mkdir(exist_ok=True)
        for j in range(cols):
            n = (i * cols + j) * 7919 % ((1 << 20) - chunk_bytes)
            fd = os.open(directory / str(j), flags, 0o644)
            try:
                os.write(fd, noise[n : n + chunk_bytes])
            finally:
                os.close(fd)
    (root / ".zarray").write_text(row_chunked_zarray(rows, cols, chunk_bytes))


def array_paths(root: Path) -> tuple[str, str]:
    """A directory in the middle of ``write_array``'s array, and a chunk file in it."""
    zarray = json.loads((root / ".zarray").read_text())
    rows, cols = zarray["shape"][0], zarray["shape"][1] // zarray["chunks"][1]
    return str(rows // 2), f"{rows // 2}/{cols // 2}"


@contextmanager
def fresh_database(name: str) -> Iterator[str]:
    """A new empty PostgreSQL database on ``BENCH_DATABASE_URL``'s server, dropped on the way
    out: its URL."""
    database = f"bench_{name}_{os.getpid()}"
    url = create_database(DATABASE_SERVER_URL, database)
    try:
        yield url
    finally:
        drop_database(DATABASE_SERVER_URL, database)


@contextmanager
def seaweed_service(
    tmp: Path, name: str, database_url: str | None = None, **settings: str
) -> Iterator[Service]:
    """``dandizarr serve`` on SeaweedFS, on SQLite in its data directory or on
    ``database_url`` (PostgreSQL); ``settings`` add to its environment."""
    database = {"DATABASE_URL": database_url} if database_url else {}
    with seaweedfs(tmp / f"weed-{name}") as s3:
        bucket = f"bench-{name}"
        with service_on(s3, tmp / f"serve-{name}", bucket, **database, **settings) as service:
            env = {
                "DANDIZARR_STORAGE": "s3",
                "DANDIZARR_S3_ENDPOINT_URL": s3.endpoint_url,
                "DANDIZARR_S3_BUCKET": bucket,
                **s3_env(),
                **database,
            }
            yield Service(
                service.url, service.token, service.pid, service.data_dir, env, bucket, s3.client()
            )


@contextmanager
def default_service(tmp: Path) -> Iterator[Service]:
    with local_service(tmp / "serve-local") as (url, token, pid):
        yield Service(url, token, pid, tmp / "serve-local", {})


@contextmanager
def postgresql_service(tmp: Path) -> Iterator[Service]:
    with fresh_database("c") as url, seaweed_service(tmp, "cpg", url) as service:
        yield service


# BENCH_S3_PACKED_SERVICES's names: what each is, and its context.
SERVICE_CONTEXTS = {
    "serve": ("make serve (SQLite, local storage)", default_service),
    "s3": ("dandizarr serve on SeaweedFS (SQLite)", lambda t: seaweed_service(t, "c")),
    "pg": ("dandizarr serve on SeaweedFS and PostgreSQL", postgresql_service),
}


def objects(service: Service, zarr_id: str) -> dict[str, int]:
    """The objects storage holds under the archive: loose files and shards."""
    counts = {}
    for prefix in ("zarr", "zarr_shards"):
        if service.s3 is None:
            top = service.data_dir / "storage" / prefix / zarr_id
            n = sum(
                1
                for _, _, files in os.walk(top)
                for name in files
                if not name.startswith(".dandizarr-")
            )
        else:
            n = 0
            paginator = service.s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=service.bucket, Prefix=f"{prefix}/{zarr_id}/"):
                n += len(page.get("Contents", []))
        counts[prefix] = n
    return counts


def upload(service: Service, src: Path, dandiset: str, name: str, *pack: str) -> dict[str, Any]:
    """``dandizarr upload`` as a user runs it; its JSON summary, seconds and peak RSS."""
    timed = run_timed(
        dandizarr_command(
            "upload",
            str(src),
            "--dandiset",
            dandiset,
            "--name",
            name,
            "--jobs",
            str(JOBS),
            "--json",
            "--no-progress",
            *pack,
        ),
        env={"DANDIZARR_URL": service.url, "DANDIZARR_TOKEN": service.token},
    )
    summary = json.loads(timed.output[: timed.output.rindex("}") + 1])
    if not summary["ok"]:
        raise RuntimeError(f"upload of {name} did not verify: {summary}")
    return {
        **summary,
        "wall": timed.seconds,
        "client_mb": timed.peak_rss_mb,
        "client_user": timed.user_seconds,
        "client_system": timed.system_seconds,
    }


def browse_ms(service: Service, zarr_id: str, path: str) -> float:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {service.token}"
    times = []
    for _ in range(BROWSE_REQUESTS):
        started = time.perf_counter()
        session.get(f"{service.url}/api/zarr/{zarr_id}/tree/{path}", timeout=60).raise_for_status()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def audit(service: Service, zarr_id: str) -> tuple[float, float, str]:
    """``manage.py audit_zarr`` on the service's database and storage: seconds, peak MB, verdict."""
    manage = str(Path(__file__).parent.parent / "manage.py")
    env = {"DANDIZARR_DATA_DIR": str(service.data_dir), **service.env}
    saved = {k: os.environ.pop(k) for k in ("DATABASE_URL", "CELERY_BROKER_URL") if k in os.environ}
    try:
        timed = run_timed([sys.executable, manage, "audit_zarr", zarr_id], env=env)
    finally:
        os.environ.update(saved)
    verdict = next(
        (line for line in timed.output.splitlines() if line.startswith(zarr_id)), "?"
    ).removeprefix(f"{zarr_id}: ")
    return timed.seconds, timed.peak_rss_mb, verdict


def target(value: float, limit: float, unit: str) -> str:
    mark = "ok" if value <= limit else "MISSED"
    return f"(target <= {limit:g} {unit}: {mark})"


def phase_times(done: dict[str, Any]) -> str:
    timings = done.get("phase_seconds") or {}
    return ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()) or "-"


def packed_source(tmp: Path, name: str, count: int, kept: str | None) -> tuple[Path, str]:
    """The source array of ``count`` 64-byte chunk files: ``kept`` (written once, reused) or a
    new one under ``tmp``; and how it came to be."""
    src = Path(kept) if kept else tmp / f"{name}.zarr"
    started = time.perf_counter()
    if (src / ".zarray").exists():
        return src, "reused"
    write_array(src, count, 64)
    return src, f"written in {time.perf_counter() - started:.1f} s"
