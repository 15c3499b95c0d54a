"""Sharded uploads at scale (issue #15, benchmarks 4 and 5), measured from outside as a user runs
them: ``dandizarr upload --pack`` (the CLI, its own process) into ``dandizarr serve``.

a. 100,000 chunk files of 4 KiB packed into the service on SeaweedFS: wall time, files/s, the
   objects the bucket holds under the archive, the checksum verified.
b. ``POST /api/zarr/{id}/pack/`` of a loose archive of 10,000 files of 4 KiB (uploaded loose
   first) on SeaweedFS: time until the archive's detail says packing is done, objects before and
   after.
c. A million chunk files (a Zarr v2 array, nested keys, 64 bytes each) packed into the default
   ``dandizarr serve`` (``make serve``: SQLite, local storage, tasks inline), into the service
   on SeaweedFS, and into the service on SeaweedFS and PostgreSQL (a fresh database on
   ``BENCH_DATABASE_URL``'s server): wall time, peak RSS of the service and of the client,
   browse latency of a directory and of a file entry, audit time and peak memory.
   ``BENCH_S3_PACKED_SERVICES`` picks services (default ``serve,s3,pg``).

d. Scale (``make bench-scale``, not part of the default parts): ``bench.scale``.

e. Resume and ``--sync`` at ``BENCH_PACKED_FILES`` chunk files (issue #39), into the first of
   ``BENCH_S3_PACKED_SERVICES`` (``make serve`` by default): the client's peak RSS of an upload
   resumed after the first was killed half-way, of a fresh upload, and of ``upload --sync`` of
   the same tree into the resumed archive once it also
   holds a tenth as many files absent locally (all of the tree held already: every file is
   hashed and matched, the others deleted); target: resume and ``--sync`` at most 2x the
   fresh upload's peak. ``BENCH_S3_PACKED_SYNC=0`` leaves ``--sync`` out;
   ``BENCH_S3_PACKED_FRESH_MB`` takes the fresh upload's peak from elsewhere (``make
   bench-scale``'s upload of the same tree into the same shape) instead of uploading again.

``BENCH_S3_PACKED_CHUNKS`` (default 100000), ``BENCH_S3_PACKED_CONVERT`` (10000) and
``BENCH_PACKED_FILES`` (1000000) scale the three down; ``BENCH_S3_PACKED_PARTS`` picks parts
(e.g. ``c``; default ``abc``). Figures are printed, never asserted.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
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
    cpu_load,
    dandizarr_command,
    local_service,
    peak_rss_mb,
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


def part_a(tmp: Path) -> None:
    src = tmp / "a.zarr"
    started = time.perf_counter()
    write_array(src, CHUNKS, 4096)
    print(f"\na. {CHUNKS:,} chunk files of 4 KiB written in {time.perf_counter() - started:.1f} s")
    with seaweed_service(tmp, "a") as service:
        dandiset = service.api("POST", "/api/dandisets/", data={"name": "a"}).json()["identifier"]
        done = upload(service, src, dandiset, "a", "--pack")
        counts = objects(service, done["zarr_id"])
        print(
            f"   dandizarr upload --pack -j {JOBS} on SeaweedFS: {done['wall']:.1f} s wall, "
            f"{CHUNKS / done['wall']:,.0f} files/s ({done['files_per_second']:,.0f} inside the "
            f"client), {done['shards']} shards; bucket holds {counts['zarr']} loose objects + "
            f"{counts['zarr_shards']} shard objects; checksum {done['server_checksum']} verified; "
            f"client peak {done['client_mb']:.0f} MB; client phases {_phases(done)}"
        )


def part_b(tmp: Path) -> None:
    src = tmp / "b.zarr"
    write_array(src, CONVERT_FILES, 4096)
    with seaweed_service(tmp, "b") as service:
        dandiset = service.api("POST", "/api/dandisets/", data={"name": "b"}).json()["identifier"]
        done = upload(service, src, dandiset, "b")
        zarr_id = done["zarr_id"]
        before = objects(service, zarr_id)
        checksum = service.api("GET", f"/api/zarr/{zarr_id}/").json()["checksum"]
        started = time.perf_counter()
        service.api("POST", f"/api/zarr/{zarr_id}/pack/")
        while (detail := service.api("GET", f"/api/zarr/{zarr_id}/").json())["packing"]:
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        after = objects(service, zarr_id)
        print(
            f"\nb. POST pack/ of a loose archive of {CONVERT_FILES:,} files of 4 KiB on SeaweedFS "
            f"(uploaded loose in {done['wall']:.1f} s): packed in {seconds:.1f} s "
            f"({CONVERT_FILES / seconds:,.0f} files/s); objects {before['zarr']} loose + "
            f"{before['zarr_shards']} shards before, {after['zarr']} loose + "
            f"{after['zarr_shards']} shards after; checksum "
            f"{'unchanged' if detail['checksum'] == checksum else 'CHANGED'} ({detail['checksum']})"
        )


def _phases(done: dict[str, Any]) -> str:
    timings = done.get("phase_seconds") or {}
    return ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()) or "-"


def part_c(tmp: Path) -> None:
    kept = os.environ.get("BENCH_PACKED_SOURCE")  # written once, kept for later runs
    src = Path(kept) if kept else tmp / "c.zarr"
    started = time.perf_counter()
    if (src / ".zarray").exists():
        directory, chunk = array_paths(src)
        written = "reused"
    else:
        directory, chunk = write_array(src, MILLION, 64)
        written = f"written in {time.perf_counter() - started:.1f} s"
    print(
        f"\nc. {MILLION:,} chunk files of 64 bytes (Zarr v2, nested keys) {written} ({src}); "
        "targets for a million: "
        f"<= {TARGET_SECONDS:g} s, service <= {TARGET_SERVICE_MB:g} MB, client <= "
        f"{TARGET_CLIENT_MB:g} MB, directory browse < {TARGET_BROWSE_MS:g} ms, audit <= "
        f"{TARGET_AUDIT_SECONDS:g} s (issue #15 today: 443 s, 481 MB, ~720 MB, 14 ms)"
    )
    scale = MILLION / 1_000_000

    for label, service_context in (SERVICE_CONTEXTS[name] for name in SERVICES):
        with service_context(tmp) as service:
            dandiset = service.api("POST", "/api/dandisets/", data={"name": "c"}).json()
            done = upload(service, src, dandiset["identifier"], "c", "--pack")
            zarr_id = done["zarr_id"]
            counts = objects(service, zarr_id)
            directory_ms = browse_ms(service, zarr_id, directory)
            file_ms = browse_ms(service, zarr_id, chunk)
            audit_seconds, audit_mb, verdict = audit(service, zarr_id)
            service_mb = peak_rss_mb(service.pid)
        wall_target = target(done["wall"], TARGET_SECONDS * scale, "s")
        audit_target = target(audit_seconds, TARGET_AUDIT_SECONDS * scale, "s")
        print(
            f"   {label}: {done['wall']:.1f} s wall {wall_target}, "
            f"{MILLION / done['wall']:,.0f} files/s; {counts['zarr']} loose + "
            f"{counts['zarr_shards']} shard objects; checksum {done['server_checksum']} verified\n"
            f"     peak RSS: service {service_mb:.0f} MB "
            f"{target(service_mb, TARGET_SERVICE_MB, 'MB')}, client {done['client_mb']:.0f} MB "
            f"{target(done['client_mb'], TARGET_CLIENT_MB, 'MB')}\n"
            f"     browse (median of {BROWSE_REQUESTS}): directory {directory}/ "
            f"{directory_ms:.1f} ms "
            f"{target(directory_ms, TARGET_BROWSE_MS, 'ms')}, file {chunk} {file_ms:.1f} ms\n"
            f"     audit: {audit_seconds:.1f} s {audit_target}, "
            f"peak {audit_mb:.0f} MB, {verdict}\n"
            f"     client phases: {_phases(done)}"
        )
    if scale != 1:
        print(f"   (time targets scaled by {scale:g} for {MILLION:,} files)")


def _source(tmp: Path, name: str, count: int, kept: str | None) -> tuple[Path, str]:
    """The source array of ``count`` 64-byte chunk files: ``kept`` (written once, reused) or a
    new one under ``tmp``; and how it came to be."""
    src = Path(kept) if kept else tmp / f"{name}.zarr"
    started = time.perf_counter()
    if (src / ".zarray").exists():
        return src, "reused"
    write_array(src, count, 64)
    return src, f"written in {time.perf_counter() - started:.1f} s"


def _killed_half_way(service: Service, src: Path, dandiset: str, name: str) -> int:
    """``dandizarr upload --pack`` of ``src`` into a new archive ``name``, killed (SIGKILL)
    once the service holds half of ``src``'s files: how many it held then."""
    created = service.api(
        "POST", "/api/zarr/", json={"name": name, "dandiset": dandiset, "layout": "sharded"}
    ).json()
    zarr_id = created["zarr_id"]
    command = dandizarr_command(
        "upload", str(src), "--zarr-id", zarr_id, "--jobs", str(JOBS), "--no-progress", "--pack"
    )
    environment = {**os.environ, "DANDIZARR_URL": service.url, "DANDIZARR_TOKEN": service.token}
    process = subprocess.Popen(
        command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while (held := service.api("GET", f"/api/zarr/{zarr_id}/").json()["file_count"]) < (
            MILLION // 2
        ):
            if process.poll() is not None:
                raise RuntimeError(f"the upload to kill ended first (status {process.returncode})")
            time.sleep(0.5)
    finally:
        process.kill()
        process.wait()
    # The killed client's last request (a batch start takes seconds under load) may still be
    # served: a resume started meanwhile sees that batch opened under it and stops ("another
    # upload batch was opened ... while this upload was running", seen at 300,000 files).
    time.sleep(10)
    return int(held)


def part_e(tmp: Path) -> None:
    src, written = _source(tmp, "e", MILLION, os.environ.get("BENCH_PACKED_SOURCE"))
    label, service_context = SERVICE_CONTEXTS[SERVICES[0]]
    print(
        f"\ne. resume and --sync of {MILLION:,} chunk files of 64 bytes (source {written}) into "
        f"{label}: client peak RSS against a fresh upload's (target: at most 2x)",
        flush=True,
    )
    steps: list[tuple[str, dict[str, Any]]] = []

    def report(label: str, done: dict[str, Any]) -> None:
        steps.append((label, done))
        print(
            f"   {label}: {done['wall']:.1f} s wall, client peak {done['client_mb']:.0f} MB; "
            f"uploaded {done['uploaded_files']:,}, skipped {done['skipped_files']:,}; client "
            f"phases {_phases(done)}",
            flush=True,
        )

    with service_context(tmp) as service:
        dandiset = service.api("POST", "/api/dandisets/", data={"name": "e"}).json()
        identifier = dandiset["identifier"]
        held = _killed_half_way(service, src, identifier, "resumed")
        report(
            f"resumed (killed holding {held:,} files)",
            upload(service, src, identifier, "resumed", "--pack"),
        )
        if SYNC_STEP:
            # The resumed archive, which holds the tree, takes a tenth more files absent
            # locally (a second archive would upload the whole tree once more: an hour at
            # 10,000,000).
            extra = tmp / "e-extra"
            write_array(extra / "x", MILLION // 10, 64)
            upload(service, extra, identifier, "resumed", "--pack")
            synced = upload(service, src, identifier, "resumed", "--pack", "--sync")
            report(f"--sync (deleting {synced['deleted_files']:,})", synced)
        if FRESH_MB is None:
            fresh = upload(service, src, identifier, "fresh", "--pack")
            print(f"   fresh: {fresh['wall']:.1f} s wall, client peak {fresh['client_mb']:.0f} MB")
    peak = FRESH_MB if FRESH_MB is not None else fresh["client_mb"]
    source = "given" if FRESH_MB is not None else "measured"
    for label, done in steps:
        ratio = done["client_mb"] / peak
        print(
            f"   {label}: {ratio:.2f}x the fresh upload's {peak:.0f} MB ({source}) "
            f"{'(at most 2x: ok)' if ratio <= 2 else '(MISSED: over 2x)'}"
        )


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(cpu_load())
    keep = os.environ.get("BENCH_S3_PACKED_TMP")
    with tempfile.TemporaryDirectory(prefix="bench-s3-packed-", dir=keep) as tmp:
        tmp_path = Path(tmp)
        from bench.scale import part_d  # it builds on this module

        parts = (("a", part_a), ("b", part_b), ("c", part_c), ("d", part_d), ("e", part_e))
        for part, run in parts:
            if part in PARTS:
                run(tmp_path)
    print(cpu_load())


if __name__ == "__main__":
    main()
