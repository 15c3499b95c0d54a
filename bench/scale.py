"""Part d of ``bench s3_packed`` (``make bench-scale``, issues #23 and #39): ``BENCH_PACKED_FILES``
(1,000,000) chunk files of 64 bytes packed ``BENCH_SCALE_REFERENCE_RUNS`` (3) times, then
``BENCH_SCALE_FILES`` (10,000,000) once, each ``dandizarr upload --pack`` into a fresh service
on SeaweedFS from a cold page cache (when run as root).

The service: with ``DATABASE_URL`` (a PostgreSQL server; a fresh database is made on it for each
upload and dropped after), the production shape (``tests.support.production``: gunicorn with
``dandizarr_server/gunicorn_config.py`` and ``BENCH_SCALE_WEB_WORKERS`` (2) workers, a Celery
worker, beat, a Redis server of its own on a free port, ``manage.py ensure_bucket``); without it,
``dandizarr serve`` on SQLite (tasks inline).

Figures for each upload: wall time, the peak RSS of each service process and of the client, the
service's CPU-seconds per pack batch (every service process's, read from ``/proc`` each
``SAMPLE_SECONDS`` while the archive's detail is polled for its file count: a batch is the CPU
between one applied batch and the next), then the dandiset published (seconds) and reads of one
file through ``/zarr/`` of the version and of the draft (medians of ``READS`` GETs each,
interleaved). Targets against the median 1M run: time at most linear, CPU per batch at 10M
within 1.2x, peak RSS at most 2x; publish <= 30 s, a version's read within 1.2x the draft's.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import requests

from bench.packed_uploads import (
    MILLION,
    SCALE_FILES,
    Service,
    array_paths,
    browse_ms,
    objects,
    packed_source,
    phase_times,
    seaweed_service,
    upload,
)
from bench.s3_env import (
    cpu_load,
    cpu_seconds,
    cpu_split,
    page_cache_dropped,
    peak_rss_mb,
    seaweedfs,
)
from tests.support.production import production

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REFERENCE_RUNS = int(os.environ.get("BENCH_SCALE_REFERENCE_RUNS", "3"))
WEB_WORKERS = int(os.environ.get("BENCH_SCALE_WEB_WORKERS", "2"))
# Shorter runs (a smoke test, a profile) with smaller batches and a warm page cache.
MEMBER_LIMIT = os.environ.get("BENCH_SCALE_PACK_MEMBER_LIMIT")
DROP_CACHES = os.environ.get("BENCH_SCALE_DROP_CACHES", "1") != "0"
# The large run before the small ones (a shared machine's time slot may not hold them all).
LARGE_FIRST = os.environ.get("BENCH_SCALE_LARGE_FIRST", "0") == "1"
SAMPLE_SECONDS = 0.25
READS = 200
EDGE_BATCHES = 10  # the batches "early" and "late" in a run

TARGET_BATCH_CPU = 1.2
TARGET_PUBLISH_SECONDS = 30.0
TARGET_READ_RATIO = 1.2


@dataclass
class ScaleService:
    """A running service and its processes by role (each with its descendants)."""

    service: Service
    roles: dict[str, list[int]]
    manage: Any  # manage.py args... against its database and storage
    database_url: str = ""  # PostgreSQL's, or
    sqlite_path: Path | None = None

    def pids(self) -> list[int]:
        return list(dict.fromkeys(p for pids in self.pids_by_role().values() for p in pids))

    def pids_by_role(self) -> dict[str, list[int]]:
        return {
            role: [p for root in roots for p in _tree(root)] for role, roots in self.roles.items()
        }

    def peaks(self) -> dict[str, float]:
        """The largest peak RSS (MB) of any process in each role, now."""
        return {
            role: max((peak_rss_mb(p) for root in roots for p in _tree(root)), default=0.0)
            for role, roots in self.roles.items()
        }


def _settings() -> dict[str, str]:
    return {"DANDIZARR_PACK_MEMBER_LIMIT": MEMBER_LIMIT} if MEMBER_LIMIT else {}


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (Linux)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(c) for c in children)
    return found


def _manage(env: dict[str, str]) -> Any:
    root = Path(__file__).parent.parent

    def run(*args: str) -> None:
        dropped = {"DATABASE_URL", "CELERY_BROKER_URL"}
        clean = {k: v for k, v in os.environ.items() if k not in dropped}
        subprocess.run(
            [sys.executable, str(root / "manage.py"), *args],
            env={**clean, **env},
            check=True,
            capture_output=True,
        )

    return run


@contextmanager
def sqlite_service(tmp: Path, name: str) -> Iterator[ScaleService]:
    with seaweed_service(tmp, name, **_settings()) as service:
        env = {"DANDIZARR_DATA_DIR": str(service.data_dir), **service.env}
        yield ScaleService(
            service,
            {"serve": [service.pid]},
            _manage(env),
            sqlite_path=service.data_dir / "db.sqlite3",
        )


@contextmanager
def production_service(tmp: Path, name: str) -> Iterator[ScaleService]:
    with seaweedfs(tmp / f"weed-{name}") as s3:
        bucket = f"bench-{name}-{uuid.uuid4().hex[:6]}"
        with production(
            tmp / f"production-{name}",
            DATABASE_URL,
            s3,
            bucket,
            web_workers=WEB_WORKERS,
            celery_workers=1,
            start_timeout=300,  # gunicorn took over a minute to start on the busy machine
            **_settings(),
        ) as deployment:
            assert deployment.web is not None
            service = Service(
                deployment.url,
                deployment.token,
                deployment.web.pid,
                deployment.directory,
                deployment.env,
                bucket,
                s3.client(),
            )
            roles = {
                "web": [deployment.web.pid],
                "celery": [w.pid for w in deployment.workers],
            }
            yield ScaleService(
                service, roles, deployment.manage, database_url=deployment.env["DATABASE_URL"]
            )


class Database:
    """The service's database, read beside it (no request to the service): the files its
    archive has applied, and the PostgreSQL backends serving it (their CPU is the service's
    work too)."""

    def __init__(self, url: str, sqlite_path: Path | None) -> None:
        if sqlite_path is not None:
            self.sqlite: Any = sqlite3.connect(
                f"file:{sqlite_path}?mode=ro", uri=True, check_same_thread=False
            )
            self.postgres: Any = None
        else:
            self.sqlite = None
            self.postgres = psycopg.connect(url, autocommit=True)

    def files(self) -> int:
        query = "SELECT coalesce(sum(file_count), 0) FROM zarr_api_zarrarchive"
        if self.sqlite is not None:
            return int(self.sqlite.execute(query).fetchone()[0])
        return int(self.postgres.execute(query).fetchone()[0])

    def backends(self) -> list[int]:
        if self.postgres is None:
            return []
        rows = self.postgres.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
        return [int(pid) for (pid,) in rows]

    def close(self) -> None:
        (self.sqlite or self.postgres).close()


class CpuTotal:
    """CPU-seconds (user, system) of a changing set of processes by role, each counted at its
    last sighting (one that exits keeps what it used)."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[str, float, float]] = {}

    def update(self, pids_by_role: dict[str, list[int]]) -> float:
        for role, pids in pids_by_role.items():
            for pid in pids:
                split = cpu_split(pid)
                if split is not None and split[0] + split[1]:
                    self.last[pid] = (role, *split)
        return sum(user + system for _, user, system in self.last.values())

    def by_role(self) -> dict[str, tuple[float, float]]:
        """Each role's (user, system) CPU-seconds so far."""
        totals: dict[str, tuple[float, float]] = {}
        for role, user, system in self.last.values():
            was = totals.get(role, (0.0, 0.0))
            totals[role] = (was[0] + user, was[1] + system)
        return totals


@dataclass
class BatchCpu:
    """Samples of (seconds, files applied, service CPU-seconds, its database's) while an
    upload runs."""

    samples: list[tuple[float, int, float, float]] = field(default_factory=list)
    # Each role's (user, system) CPU-seconds at the first sample and at the last.
    roles_first: dict[str, tuple[float, float]] = field(default_factory=dict)
    roles_last: dict[str, tuple[float, float]] = field(default_factory=dict)

    def roles_used(self) -> dict[str, tuple[float, float]]:
        """Each role's (user, system) CPU-seconds between the first sample and the last."""
        used = {}
        for role, (user, system) in self.roles_last.items():
            user_before, system_before = self.roles_first.get(role, (0.0, 0.0))
            used[role] = (user - user_before, system - system_before)
        return used

    def per_batch(self, column: int = 2) -> list[float]:
        """CPU-seconds (``column`` 2: the service's processes, 3: its database backends) from
        one batch seen applied to the next (the file count changed), in order, from the first
        applied batch on; an interval over which several were applied is shared among them,
        a last partial batch left out."""
        marks: list[tuple[int, float]] = []  # (files, CPU when first seen), files > 0
        for sample in self.samples:
            files = sample[1]
            if files and (not marks or files != marks[-1][0]):
                marks.append((files, sample[column]))
        steps = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(marks)]
        if not steps:
            return []
        usual = statistics.median(files for files, _ in steps)
        return [cpu / max(1, round(files / usual)) for files, cpu in steps if files >= 0.9 * usual]


@contextmanager
def batch_cpu(running: ScaleService) -> Iterator[BatchCpu]:
    """Samples the service's CPU and its archive's applied file count during the block."""
    result = BatchCpu()
    stop = threading.Event()
    database = Database(running.database_url, running.sqlite_path)
    service, backends = CpuTotal(), CpuTotal()

    def sample() -> None:
        started = time.perf_counter()
        while not stop.wait(SAMPLE_SECONDS):
            try:
                files = database.files()
                pids = database.backends()
            except (sqlite3.Error, psycopg.Error):
                continue  # a busy moment: the next sample
            result.samples.append(
                (
                    time.perf_counter() - started,
                    files,
                    service.update(running.pids_by_role()),
                    backends.update({"postgres": pids}),
                )
            )
            result.roles_last = {**service.by_role(), **backends.by_role()}
            if not result.roles_first:
                result.roles_first = result.roles_last

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        database.close()


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def publish_and_read(
    running: ScaleService, dandiset: str, zarr_id: str, src: Path
) -> dict[str, float]:
    """Publish the dandiset with the archive as its asset: seconds; then the medians of READS
    GETs of chunk files through ``/zarr/`` of the version and of the draft (interleaved)."""
    service = running.service
    service.api(
        "POST",
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        json={"path": "scale.zarr", "zarr_id": zarr_id},
    )
    started = time.perf_counter()
    while True:
        answer = requests.post(
            f"{service.url}/api/dandisets/{dandiset}/versions/draft/publish/",
            headers={"Authorization": f"Token {service.token}"},
            timeout=600,
        )
        if answer.status_code != 409 or time.perf_counter() - started > 600:
            break
        time.sleep(0.5)  # checksums still pending: the publish waits as a client would
    answer.raise_for_status()
    publish_seconds = time.perf_counter() - started
    version_id = service.api("GET", f"/api/zarr/{zarr_id}/versions/1/").json()["zarr_id"]
    zarray = json.loads((src / ".zarray").read_text())
    rows, cols = zarray["shape"][0], zarray["shape"][1] // zarray["chunks"][1]
    rng = random.Random(39)
    paths = [f"{rng.randrange(rows)}/{rng.randrange(cols)}" for _ in range(READS + 20)]
    session = requests.Session()
    session.headers["Authorization"] = f"Token {service.token}"
    times: dict[str, list[float]] = {"version": [], "draft": []}
    for n, path in enumerate(paths):
        for kind, archive in (("version", version_id), ("draft", zarr_id)):
            began = time.perf_counter()
            got = session.get(f"{service.url}/zarr/{archive}/{path}", timeout=60)
            elapsed = time.perf_counter() - began
            got.raise_for_status()
            if len(got.content) != 64:
                raise RuntimeError(f"/zarr/{archive}/{path}: {len(got.content)} bytes")
            if n >= 20:  # the first ones warm the connection and the caches
                times[kind].append(elapsed)
    return {
        "publish": publish_seconds,
        "read_version_ms": _median(times["version"]) * 1000,
        "read_draft_ms": _median(times["draft"]) * 1000,
    }


def _one_run(tmp: Path, count: int, src: Path, label: str) -> dict[str, Any]:
    shape = production_service if DATABASE_URL else sqlite_service
    with shape(tmp, label) as running:
        service = running.service
        running.manage("ensure_bucket")  # as docker-compose does: versions kept from the start
        dandiset = service.api("POST", "/api/dandisets/", data={"name": label}).json()
        identifier = dandiset["identifier"]
        cold = DROP_CACHES and page_cache_dropped()
        with batch_cpu(running) as sampled:
            cpu_before = cpu_seconds(running.pids())
            done = upload(service, src, identifier, label, "--pack")
            service_cpu = cpu_seconds(running.pids()) - cpu_before
        zarr_id = done["zarr_id"]
        counts = objects(service, zarr_id)
        _, chunk = array_paths(src)
        file_ms = browse_ms(service, zarr_id, chunk)
        published = publish_and_read(running, identifier, zarr_id, src)
        peaks = running.peaks()
    per_batch = sampled.per_batch()
    database_batch = sampled.per_batch(column=3)
    return {
        **done,
        **published,
        "count": count,
        "cold": cold,
        "counts": counts,
        "file_ms": file_ms,
        "chunk": chunk,
        "service_cpu": service_cpu,
        "per_batch": per_batch,
        "early": _median(per_batch[:EDGE_BATCHES]),
        "late": _median(per_batch[-EDGE_BATCHES:]),
        "all": _median(per_batch),
        "database_early": _median(database_batch[:EDGE_BATCHES]),
        "database_late": _median(database_batch[-EDGE_BATCHES:]),
        "peaks": peaks,
        "service_mb": max(peaks.values()),
        "roles_cpu": sampled.roles_used(),
    }


def _describe(run: dict[str, Any], written: str) -> str:
    backends = (
        f"; its PostgreSQL backends first {EDGE_BATCHES} {run['database_early']:.2f}, last "
        f"{EDGE_BATCHES} {run['database_late']:.2f}"
        if DATABASE_URL
        else ""
    )
    peaks = ", ".join(f"{role} {mb:.0f} MB" for role, mb in run["peaks"].items())
    roles = ", ".join(
        f"{role} {user:.1f} user + {system:.1f} system"
        for role, (user, system) in run["roles_cpu"].items()
    )
    return (
        f"   {run['count']:,} files (source {written}; "
        f"{'page cache dropped' if run['cold'] else 'page cache NOT dropped'}): "
        f"{run['wall']:.1f} s wall, {run['count'] / run['wall']:,.0f} files/s; peak RSS "
        f"{peaks}, client {run['client_mb']:.0f} MB; {run['counts']['zarr']} loose + "
        f"{run['counts']['zarr_shards']} shard objects; checksum {run['server_checksum']} "
        f"verified; browse {run['chunk']} {run['file_ms']:.1f} ms; client phases "
        f"{phase_times(run)}; CPU seconds: client {run['client_user']:.1f} user + "
        f"{run['client_system']:.1f} system, service {run['service_cpu']:.1f}\n"
        f"     service CPU-s per pack batch ({len(run['per_batch'])} full batches measured): "
        f"median {run['all']:.2f}, first {EDGE_BATCHES} {run['early']:.2f}, last "
        f"{EDGE_BATCHES} {run['late']:.2f}{backends}; CPU-s by role over the upload: {roles}\n"
        f"     publish {run['publish']:.2f} s; read of a chunk (median of {READS}): version "
        f"{run['read_version_ms']:.2f} ms, draft {run['read_draft_ms']:.2f} ms "
        f"({run['read_version_ms'] / run['read_draft_ms']:.2f}x)"
    )


def _ok(value: float, limit: float) -> str:
    return "ok" if value <= limit else "MISSED"


def part_d(tmp: Path) -> None:
    shape = (
        f"production shape on PostgreSQL (gunicorn {WEB_WORKERS} workers with "
        "gunicorn_config, 1 Celery worker, beat, Redis; a fresh database per upload)"
        if DATABASE_URL
        else "`dandizarr serve` (SQLite, tasks inline)"
    )
    print(
        f"\nd. scale: {MILLION:,} chunk files of 64 bytes x {REFERENCE_RUNS}, then "
        f"{SCALE_FILES:,}, each `dandizarr upload --pack` into a fresh {shape} on SeaweedFS; "
        "targets against the median small run: time at most linear, service CPU per batch "
        f"within {TARGET_BATCH_CPU}x, peak RSS at most 2x; publish <= "
        f"{TARGET_PUBLISH_SECONDS:g} s, a version's read within {TARGET_READ_RATIO}x the "
        f"draft's; {cpu_load()}",
        flush=True,
    )
    small_src, small_written = packed_source(
        tmp, f"d{MILLION}", MILLION, os.environ.get("BENCH_PACKED_SOURCE")
    )
    smalls: list[dict[str, Any]] = []
    large: dict[str, Any] = {}

    def run_large() -> None:
        large_src, large_written = packed_source(
            tmp, f"d{SCALE_FILES}", SCALE_FILES, os.environ.get("BENCH_SCALE_SOURCE")
        )
        large.update(_one_run(tmp, SCALE_FILES, large_src, f"d{SCALE_FILES}"))
        print(_describe(large, large_written), flush=True)

    if LARGE_FIRST:
        run_large()
    for n in range(REFERENCE_RUNS):
        run = _one_run(tmp, MILLION, small_src, f"d{MILLION}-{n}")
        smalls.append(run)
        print(_describe(run, small_written), flush=True)
        small_written = "reused"
    if not LARGE_FIRST:
        run_large()

    factor = SCALE_FILES / MILLION
    wall = _median([r["wall"] for r in smalls])
    batch = _median([r["all"] for r in smalls])
    service_mb = _median([r["service_mb"] for r in smalls])
    client_mb = _median([r["client_mb"] for r in smalls])
    time_ratio = large["wall"] / wall
    early, late = large["early"] / batch, large["late"] / batch
    rss = max(large["service_mb"] / service_mb, large["client_mb"] / client_mb)
    read_ratio = large["read_version_ms"] / large["read_draft_ms"]
    print(
        f"   against the median of {REFERENCE_RUNS} small runs ({wall:.1f} s, {batch:.2f} "
        f"service CPU-s per batch, service {service_mb:.0f} MB, client {client_mb:.0f} MB): "
        f"{factor:g}x the files took {time_ratio:.2f}x the time "
        f"({_ok(time_ratio, factor)}: at most linear); service CPU per batch early "
        f"{early:.2f}x, late {late:.2f}x ({_ok(max(early, late), TARGET_BATCH_CPU)}: within "
        f"{TARGET_BATCH_CPU}x); peak RSS service {large['service_mb'] / service_mb:.2f}x, "
        f"client {large['client_mb'] / client_mb:.2f}x ({_ok(rss, 2)}: at most 2x); publish "
        f"{large['publish']:.2f} s ({_ok(large['publish'], TARGET_PUBLISH_SECONDS)}); version "
        f"read {read_ratio:.2f}x the draft's ({_ok(read_ratio, TARGET_READ_RATIO)}); "
        f"{cpu_load()}",
        flush=True,
    )
