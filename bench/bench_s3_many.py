"""Many clients at once in the production shape: gunicorn (4 workers), 2 Celery workers and
beat on PostgreSQL, Redis and SeaweedFS (``tests.support.production``), and 4 clients, each a
process of its own with a ``DandizarrClient``, uploading 4 different directories into 4
archives at the same time. Each checksum is verified.

The ceiling: 4 concurrent streams (processes) of raw presigned PUTs of the same files to the
same SeaweedFS, each with as many at once as one client sends, through the client's own
transfer engine (``bench.s3_env.RawPuts``), measured before and after the uploads. Aggregate
rate = all files / wall time from the first start to the last end (every process is ready
before any starts). Target: >= 80% of the ceiling. ``BENCH_MANY_FILES`` (per client),
``BENCH_MANY_CLIENTS`` and ``BENCH_MANY_JOBS`` shrink or grow it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
import time
import uuid
from multiprocessing.synchronize import Barrier
from pathlib import Path

from bench.s3_env import MachineCpu, RawPuts, busy_cpu_seconds, cpu_load, write_nested_files
from dandizarr.client import DandizarrClient
from dandizarr.commands.connection import DEFAULT_JOBS
from tests.support.production import Production, production, tools_missing
from tests.support.seaweedfs import SeaweedS3

FILES = int(os.environ.get("BENCH_MANY_FILES", "2500"))
CLIENTS = int(os.environ.get("BENCH_MANY_CLIENTS", "4"))
JOBS = int(os.environ.get("BENCH_MANY_JOBS", str(DEFAULT_JOBS)))
FILE_SIZE = 4096
TARGET = 0.80
DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

Span = tuple[float, float]  # (start, end) on the system-wide monotonic clock
Busy = tuple[float, float]  # the machine's busy CPU-seconds at a span's start and end


def _ceiling_stream(
    endpoint: str, bucket: str, root: str, paths: list[str], label: str, barrier: Barrier
) -> tuple[Span, Busy]:
    """One stream: presign every file's PUT, wait for the others, then PUT them all."""
    puts = RawPuts.prepare(endpoint, bucket, Path(root), paths, label)
    barrier.wait()
    busy = busy_cpu_seconds()
    span = puts.send(JOBS)
    return span, (busy, busy_cpu_seconds())


def _client_upload(
    url: str, token: str, dandiset: str, root: str, barrier: Barrier
) -> tuple[Span, dict[str, float], int, Busy]:
    """One client: a DandizarrClient of its own uploading ``root`` into a new archive; its
    span, the time in each step of its batches, and its number of batches."""
    with DandizarrClient(url, token, jobs=JOBS) as client:
        barrier.wait()
        busy = busy_cpu_seconds()
        started = time.monotonic()
        result = client.upload(root, dandiset=dandiset, name=Path(root).name)
        ended = time.monotonic()
        busy_end = busy_cpu_seconds()
    if not result.ok:
        raise RuntimeError(f"{root}: upload did not verify: {result.to_json()}")
    if result.uploaded_files != FILES:
        raise RuntimeError(f"{root}: uploaded {result.uploaded_files} of {FILES} files")
    return (started, ended), dict(result.phase_seconds), result.batches, (busy, busy_end)


def _aggregate(spans: list[Span]) -> float:
    """Files per second over all streams, first start to last end."""
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return CLIENTS * FILES / wall


def _machine_cpu(spans: list[Span], busy: list[Busy]) -> MachineCpu:
    """The machine's CPU from the first start to the last end."""
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return MachineCpu(wall, max(end for _, end in busy) - min(start for start, _ in busy))


def _ceiling(
    s3: SeaweedS3, roots: list[Path], paths: list[str], label: str
) -> tuple[float, MachineCpu]:
    bucket = f"bench-many-ceiling-{label}"
    s3.create_bucket(bucket)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(CLIENTS)
        with context.Pool(CLIENTS) as pool:
            streams = pool.starmap(
                _ceiling_stream,
                [
                    (s3.endpoint_url, bucket, str(root), paths, f"{label}{n}", barrier)
                    for n, root in enumerate(roots)
                ],
            )
    spans = [span for span, _ in streams]
    return _aggregate(spans), _machine_cpu(spans, [busy for _, busy in streams])


def _uploads(
    deployment: Production, roots: list[Path]
) -> tuple[float, list[float], str, MachineCpu]:
    with DandizarrClient(deployment.url, deployment.token) as client:
        dandiset = client.create_dandiset("bench-many")["identifier"]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(CLIENTS)
        with context.Pool(CLIENTS) as pool:
            results = pool.starmap(
                _client_upload,
                [(deployment.url, deployment.token, dandiset, str(r), barrier) for r in roots],
            )
    spans = [span for span, _, _, _ in results]
    phases = sorted({name for _, seconds, _, _ in results for name in seconds})
    steps = ", ".join(
        f"{name} {sum(seconds.get(name, 0.0) for _, seconds, _, _ in results) / CLIENTS:.1f} s"
        for name in phases
    )
    batches = sum(count for _, _, count, _ in results) / CLIENTS
    wall = sum(end - start for start, end in spans) / CLIENTS
    where = f"per client (mean): {wall:.1f} s, {batches:.0f} batches; {steps}"
    cpu = _machine_cpu(spans, [busy for _, _, _, busy in results])
    return _aggregate(spans), [FILES / (end - start) for start, end in spans], where, cpu


def main() -> None:
    missing = tools_missing()
    if missing:
        print(f"skipped: {', '.join(missing)} missing")
        return
    # A terminated benchmark still stops the servers it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-s3-many-") as tmp:
        base = Path(tmp)
        roots = [base / "src" / f"client{n}.zarr" for n in range(CLIENTS)]
        paths = [write_nested_files(root, FILES, FILE_SIZE) for root in roots][0]  # noqa: RUF015
        print(
            f"{CLIENTS} clients x {FILES:,} files of {FILE_SIZE} bytes, {JOBS} parallel PUTs "
            "each; gunicorn 4 workers, 2 Celery workers + beat, PostgreSQL, Redis, SeaweedFS"
        )
        s3 = SeaweedS3(base / "seaweedfs")
        bucket = f"bench-many-{uuid.uuid4().hex[:8]}"
        try:
            with production(
                base / "deployment",
                DATABASE_URL,
                s3,
                bucket,
                web_workers=4,
                celery_workers=2,
            ) as deployment:
                before, before_cpu = _ceiling(s3, roots, paths, "before")
                print(
                    f"  ceiling ({CLIENTS} streams of presigned PUTs), before: "
                    f"{before:,.0f} files/s; the machine's CPU: {before_cpu.describe()}"
                )
                try:
                    rate, each, where, cpu = _uploads(deployment, roots)
                except BaseException:
                    print(deployment.logs_tail())
                    raise
                print(
                    f"  {CLIENTS} x dandizarr upload at once: {rate:,.0f} files/s aggregate "
                    f"(each client {', '.join(f'{r:,.0f}' for r in each)} files/s), "
                    "every checksum verified"
                )
                print(f"    {where}")
                print(f"    the machine's CPU: {cpu.describe()}")
                after, after_cpu = _ceiling(s3, roots, paths, "after")
                print(
                    f"  ceiling ({CLIENTS} streams of presigned PUTs), after: {after:,.0f} "
                    f"files/s; the machine's CPU: {after_cpu.describe()}"
                )
        finally:
            s3.stop()
    ratio = rate / ((before + after) / 2)
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(
        f"aggregate / ceiling: {ratio:.0%} of the mean ceiling ({rate / max(before, after):.0%} "
        f"of the better one) ({verdict} the {TARGET:.0%} target); {cpu_load()}"
    )
    ceiling_busy = (before_cpu.busy + after_cpu.busy) / 2
    print(
        f"  CPU: the ceiling's PUTs took {ceiling_busy:.1f} CPU-s of the machine, the uploads "
        f"{cpu.busy:.1f}: with as many cores busy as the ceiling kept, the CPU alone bounds "
        f"them to {ceiling_busy / cpu.busy:.0%} of the ceiling"
    )


if __name__ == "__main__":
    main()
