"""Writing zarr arrays straight to storage (issue #48): dandizarr's ``ArchiveStore`` +
``commit()`` beside zarr-python's ``FsspecStore`` (s3fs: no versions, no verification) and
Icechunk 2 (a session + commit), all to the same SeaweedFS in one run.

The service in the production shape (``tests.support.production``): gunicorn with
``BENCH_SESSION_WRITES_WEB_WORKERS`` (2) workers, a Celery worker, PostgreSQL, Redis. Each
writer is a process of its own (``bench/session_writer.py``; Icechunk's from
``.venv-icechunk``, ``make bench``), writing the same array the same way (``zarr.create_array``,
no compressor, ``arr[:] = data``), timed from opening the store to the commit's end. Shapes:
2,048 chunks of 256 KiB and 4,096 chunks of 4 KiB (``BENCH_SESSION_WRITES_SHAPES``: ``big``,
``small``). ``BENCH_SESSION_WRITES_ROUNDS`` (2) rounds, writers in turn; the best round is
printed. ``ArchiveStore``'s checksum is checked against the tree hash of the same array
written to memory. For ``ArchiveStore``, what the service spent per chunk file: CPU-seconds
of web workers, Celery worker and PostgreSQL backends, API requests, and rows inserted.

Goal: ``ArchiveStore`` no slower than the fastest of the others, while verifying every
chunk's md5 and keeping the tree hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import zarr
from zarr.storage import MemoryStore

from bench.cpu_groups import cpu_by_group
from bench.s3_env import DATABASE_SERVER_URL
from bench.session_writer import array_data
from dandizarr.client import DandizarrClient
from dandizarr.client.digests import tree_checksum
from tests.support.production import Production, production, tools_missing
from tests.support.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3
from tests.support.service_processes import child_pids

ROOT = Path(__file__).resolve().parent.parent
ICECHUNK_VENV = Path(os.environ.get("BENCH_ICECHUNK_VENV", ROOT / ".venv-icechunk"))
WEB_WORKERS = int(os.environ.get("BENCH_SESSION_WRITES_WEB_WORKERS", "2"))
ROUNDS = int(os.environ.get("BENCH_SESSION_WRITES_ROUNDS", "2"))
# name: (shape, chunks) of a uint8 array: 2,048 chunks of 256 KiB; 4,096 chunks of 4 KiB.
SHAPES = {
    "big": ((512 * 32, 512 * 64), (512, 512)),
    "small": ((64 * 64, 64 * 64), (64, 64)),
}
WRITERS = ("archive_store", "fsspec", "icechunk")
CHOSEN = os.environ.get("BENCH_SESSION_WRITES_SHAPES", "big,small").split(",")


@dataclass
class Run:
    writer: str
    shape: str
    chunks: int
    bytes: int
    result: dict[str, Any]
    service: dict[str, float]

    @property
    def seconds(self) -> float:
        return float(self.result["seconds"])


def chunk_count(shape: tuple[int, int], chunks: tuple[int, int]) -> int:
    return (shape[0] // chunks[0]) * (shape[1] // chunks[1])


def tree_hash_of(shape: tuple[int, int], chunks: tuple[int, int], data: Any) -> str:
    """The tree hash of ``data`` written by zarr-python to memory as every writer writes it."""
    store = MemoryStore()
    array = zarr.create_array(
        store, name="a", shape=shape, chunks=chunks, dtype="u1", compressors=None, fill_value=0
    )
    array[:] = data
    entries = []
    for key, buffer in store._store_dict.items():
        raw = buffer.to_bytes()
        entries.append((key, len(raw), hashlib.md5(raw, usedforsecurity=False).hexdigest()))
    return tree_checksum(entries)


def run_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """One writer in a process of its own; its JSON line."""
    if spec["writer"] == "icechunk":
        argv = [str(ICECHUNK_VENV / "bin" / "python"), str(ROOT / "bench" / "session_writer.py")]
    else:
        argv = [sys.executable, "-m", "bench.session_writer"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*argv, json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{spec['writer']} failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


class ServiceMeter:
    """CPU-seconds of the service's processes (web workers, Celery worker, PostgreSQL backends
    of its database), its API requests (gunicorn's access log) and rows inserted, around a run.
    Sampled every 0.2 s so that a backend that closes meanwhile still counts."""

    def __init__(self, deployment: Production) -> None:
        self.deployment = deployment

    def _database_pids(self) -> list[int]:
        with psycopg.connect(self.deployment.server_database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.deployment.database_name,),
            ).fetchall()
        return [pid for (pid,) in rows]

    def _groups(self) -> dict[str, list[int]]:
        tasks = [w.pid for w in self.deployment.workers]
        return {
            "web": self.deployment.web_worker_pids(),
            "tasks": tasks + [c for pid in tasks for c in child_pids(pid)],
            "database": self._database_pids(),
        }

    def _rows_inserted(self) -> int:
        url = self.deployment.server_database_url.rsplit("/", 1)[0]
        with psycopg.connect(f"{url}/{self.deployment.database_name}", autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            (rows,) = conn.execute(
                "SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables"
            ).fetchone() or (0,)
        return int(rows)

    def _requests(self) -> int:
        log = self.deployment.directory / "gunicorn.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return sum(1 for line in text.splitlines() if "/api/" in line)

    def measure(self, run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, float]]:
        rows_before, requests_before = self._rows_inserted(), self._requests()
        result, spent = cpu_by_group(self._groups, run)
        time.sleep(1.0)  # PostgreSQL's statistics reach the views within a second or so
        spent["rows"] = float(self._rows_inserted() - rows_before)
        spent["requests"] = float(self._requests() - requests_before)
        return result, spent


def _table(runs: list[Run]) -> str:
    lines = [
        "| shape | writer | wall | MB/s | files/s | client CPU | client peak RSS | "
        "verifies md5, tree hash |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verifies = {"archive_store": "yes, yes", "fsspec": "no, no", "icechunk": "no, no"}
    names = {
        "archive_store": "ArchiveStore + commit()",
        "fsspec": "FsspecStore (s3fs)",
        "icechunk": "Icechunk 2 session + commit",
    }
    for run in runs:
        lines.append(
            f"| {run.shape} | {names[run.writer]} | {run.seconds:.2f} s | "
            f"{run.bytes / 1e6 / run.seconds:,.1f} | {run.chunks / run.seconds:,.0f} | "
            f"{run.result['cpu_seconds']:.1f} s | {run.result['peak_rss_mb']:.0f} MB | "
            f"{verifies[run.writer]} |"
        )
    return "\n".join(lines)


def _service_lines(runs: list[Run]) -> list[str]:
    out = []
    for run in runs:
        if run.writer != "archive_store":
            continue
        s, n = run.service, run.chunks
        cpu = s["web"] + s["tasks"] + s["database"]
        out.append(
            f"  {run.shape}: the service per chunk file: {1000 * cpu / n:.2f} ms CPU (web "
            f"{1000 * s['web'] / n:.2f}, Celery {1000 * s['tasks'] / n:.2f}, PostgreSQL "
            f"{1000 * s['database'] / n:.2f}), {s['requests'] / n:.3f} API requests, "
            f"{s['rows'] / n:.1f} rows inserted; commit {run.result['commit_seconds']:.2f} s"
        )
    return out


@contextmanager
def deployed(base: Path, s3: SeaweedS3, **env: str) -> Iterator[Production]:
    """The production shape this part and its siblings write into."""
    settings: dict[str, Any] = {"DANDIZARR_THROTTLE_USER": "10000000/min", **env}
    with production(
        base / "deployment",
        DATABASE_SERVER_URL,
        s3,
        f"writes-{uuid.uuid4().hex[:8]}",
        web_workers=WEB_WORKERS,
        celery_workers=1,
        commands=[["ensure_bucket"]],
        start_timeout=300,
        access_log=True,
        **settings,
    ) as deployment:
        yield deployment


def main() -> None:
    missing = tools_missing()
    icechunk = (ICECHUNK_VENV / "bin" / "python").exists()
    if missing:
        print(f"skipped: {', '.join(missing)} missing")
        return
    if not icechunk:
        print(f"  (no {ICECHUNK_VENV}: `make bench` makes it; Icechunk left out)")
    writers = [w for w in WRITERS if w != "icechunk" or icechunk]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-session-writes-") as tmp:
        base = Path(tmp)
        s3 = SeaweedS3(base / "seaweedfs")
        best: dict[tuple[str, str], Run] = {}
        try:
            with deployed(base, s3) as deployment:
                other = s3.create_bucket(f"others-{uuid.uuid4().hex[:8]}")
                meter = ServiceMeter(deployment)
                with DandizarrClient(deployment.url, deployment.token) as client:
                    dandiset = client.create_dandiset("bench-session-writes")["identifier"]
                    for name in CHOSEN:
                        shape, chunks = SHAPES[name]
                        checksum = tree_hash_of(shape, chunks, array_data(shape))
                        count = chunk_count(shape, chunks)
                        label = f"{count:,} x {chunks[0] * chunks[1] // 1024} KiB"
                        for number in range(ROUNDS):
                            for writer in writers:
                                spec: dict[str, Any] = {
                                    "writer": writer,
                                    "shape": shape,
                                    "chunks": chunks,
                                    "bucket": other,
                                    "prefix": f"{writer}-{name}-{number}",
                                    "endpoint": s3.endpoint_url,
                                    "region": REGION,
                                    "access_key": ACCESS_KEY,
                                    "secret_key": SECRET_KEY,
                                }
                                if writer == "archive_store":
                                    zarr_id = client.create_archive(
                                        dandiset, f"{name}-{number}"
                                    ).zarr_id
                                    spec |= {
                                        "url": deployment.url,
                                        "token": deployment.token,
                                        "zarr_id": zarr_id,
                                    }
                                try:
                                    result, spent = meter.measure(partial(run_writer, spec))
                                except BaseException:
                                    print(deployment.logs_tail())
                                    raise
                                if writer == "archive_store" and result["checksum"] != checksum:
                                    raise RuntimeError(
                                        f"ArchiveStore's checksum {result['checksum']} is not "
                                        f"the local tree hash {checksum}"
                                    )
                                run = Run(writer, label, count, count * chunks[0] * chunks[1],
                                          result, spent)  # fmt: skip
                                print(
                                    f"  {label}, round {number + 1}, {writer}: "
                                    f"{run.seconds:.2f} s (writes returned "
                                    f"{result['write_seconds']:.2f} s, flushed "
                                    f"{result['flush_seconds']:.2f} s, commit "
                                    f"{result['commit_seconds']:.2f} s), client CPU "
                                    f"{result['cpu_seconds']:.1f} s, peak RSS "
                                    f"{result['peak_rss_mb']:.0f} MB",
                                    flush=True,
                                )
                                key = (label, writer)
                                if key not in best or run.seconds < best[key].seconds:
                                    best[key] = run
        finally:
            s3.stop()
    runs = list(best.values())
    print(
        f"\nBest of {ROUNDS} rounds; gunicorn {WEB_WORKERS} workers, 1 Celery worker, "
        "PostgreSQL, Redis, SeaweedFS on this machine; ArchiveStore's checksum = the local "
        "tree hash"
    )
    print(_table(runs))
    print("\n".join(_service_lines(runs)))
    for label in dict.fromkeys(run.shape for run in runs):
        ours = best[(label, "archive_store")].seconds
        others = [best[(label, w)].seconds for w in writers if w != "archive_store"]
        if others:
            fastest = min(others)
            verdict = "meets" if ours <= fastest else "MISSES"
            print(f"  {label}: ArchiveStore {ours:.2f} s, the fastest other {fastest:.2f} s "
                  f"({ours / fastest:.2f}x: {verdict} the goal)")  # fmt: skip


if __name__ == "__main__":
    main()
