"""What one chunk read costs the service, beside what SeaweedFS's own GET of the same object
costs (issue #50), in the production shape: gunicorn with the project's config
(``BENCH_CHUNK_READS_WEB_WORKERS``, 2), PostgreSQL, Redis as the shared cache, SeaweedFS
(``tests.support.production``).

An archive of ``BENCH_CHUNK_READS_CHUNKS`` (4,096) chunks of 4 KiB, uploaded loose and packed
(``--pack``) and published. Each case reads every chunk ``BENCH_CHUNK_READS_WARM_PASSES``
(3) times (warm-up: each web worker keeps what it found of a version's files), then
``BENCH_CHUNK_READS_READS`` (2,000) random chunks ``BENCH_CHUNK_READS_ROUNDS`` (3) times over
keep-alive connections (``BENCH_CHUNK_READS_JOBS`` at once): through ``/zarr/`` of the draft
and of the version, ``If-None-Match`` revalidations (304s), and, as the ceiling, presigned
GETs of the same objects straight to SeaweedFS (a loose chunk's object; a packed one's range of
its shard). CPU-seconds from ``/proc`` of the web workers, of the database's PostgreSQL
backends, of Redis and of SeaweedFS, per read; the ratio is the whole stack's (web workers +
PostgreSQL) to SeaweedFS's own for the presigned GET (target: at most 1.5x; a 304 at most
1 ms). Then a version's manifest and DANDI ``files`` page asked again (made once, then kept:
at most 2 ms each). Last, with Debian's nginx installed, a version's chunks through the
caching proxy (``deploy/nginx.conf.template``) once it keeps them: the service's CPU (0) and
nginx's.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import requests

from bench import profiles
from bench.bench_sharded import make_array
from bench.cpu_groups import cpu_by_group
from bench.s3_env import DATABASE_SERVER_URL
from dandizarr.client import DandizarrClient
from tests.support.production import Production, tools_missing
from tests.support.proxy import NginxProxy, nginx_binary
from tests.support.seaweedfs import SeaweedS3
from tests.support.service_processes import child_pids

CHUNKS = int(os.environ.get("BENCH_CHUNK_READS_CHUNKS", "4096"))
READS = int(os.environ.get("BENCH_CHUNK_READS_READS", "2000"))
ROUNDS = int(os.environ.get("BENCH_CHUNK_READS_ROUNDS", "3"))
JOBS = int(os.environ.get("BENCH_CHUNK_READS_JOBS", "4"))
WEB_WORKERS = int(os.environ.get("BENCH_CHUNK_READS_WEB_WORKERS", "2"))
# Passes over every chunk before the measured reads, so that each web worker has met each.
WARM_PASSES = int(os.environ.get("BENCH_CHUNK_READS_WARM_PASSES", "3"))
PROFILE = bool(os.environ.get("BENCH_CHUNK_READS_PROFILE"))
DOCUMENT_READS = 50
TARGET = 1.5
NOT_MODIFIED_TARGET_MS = 1.0
DOCUMENT_TARGET_MS = 2.0

Request = tuple[str, dict[str, str]]
Checker = Callable[[int, bytes, int], None]


@dataclass
class Spent:
    """CPU-seconds per group of processes over one measured run of ``reads`` requests."""

    label: str
    reads: int
    web: float
    database: float
    redis: float
    storage: float
    proxy: float = 0.0

    def per_read_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.reads

    @property
    def stack(self) -> float:
        return self.web + self.database


class Meter:
    """The processes of the deployment, sampled from ``/proc`` around a run."""

    def __init__(self, deployment: Production, s3: SeaweedS3) -> None:
        self.deployment = deployment
        self.s3 = s3
        self.proxy: NginxProxy | None = None

    def _database_pids(self) -> list[int]:
        with psycopg.connect(self.deployment.server_database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.deployment.database_name,),
            ).fetchall()
        return [pid for (pid,) in rows]

    def _groups(self) -> dict[str, list[int]]:
        storage = [self.s3.process.pid] if self.s3.process is not None else []
        storage += [c for pid in storage for c in child_pids(pid)]
        proxy = [self.proxy.pid, *child_pids(self.proxy.pid)] if self.proxy is not None else []
        return {
            "web": self.deployment.web_worker_pids(),
            "database": self._database_pids(),
            "redis": [self.deployment.redis.pid],
            "storage": storage,
            "proxy": proxy,
        }

    def measure(self, label: str, reads: int, run: Callable[[], object]) -> Spent:
        """``run``'s CPU by group: each process's last sample less its first (from zero for
        one that started meanwhile), sampled every 0.2 s so that a database backend closed
        during the run (``DANDIZARR_DB_CONN_MAX_AGE``) still counts."""
        _, spent = cpu_by_group(self._groups, run)
        return Spent(label, reads, **spent)


def _read_all(requests_: Sequence[Request], check: Callable[[int, bytes, int], None]) -> None:
    """Every request over ``JOBS`` keep-alive sessions; ``check(index, body, status)``."""
    sessions = [requests.Session() for _ in range(JOBS)]

    def one(job: int) -> None:
        session = sessions[job]
        for index in range(job, len(requests_), JOBS):
            url, headers = requests_[index]
            response = session.get(url, headers=headers, timeout=60)
            check(index, response.content, response.status_code)

    try:
        with ThreadPoolExecutor(JOBS) as pool:
            list(pool.map(one, range(JOBS)))
    finally:
        for session in sessions:
            session.close()


def _seed(deployment: Production, src: Path) -> dict[str, dict[str, Any]]:
    """The loose and packed archives, published: ``{layout: {"draft", "version", "refs"}}``
    (``refs``: the draft's manifest, presigned URLs straight to SeaweedFS)."""
    url, token = deployment.url, deployment.token
    found: dict[str, dict[str, Any]] = {}
    with DandizarrClient(url, token, jobs=16) as client:
        dandiset = client.create_dandiset("chunk reads")["identifier"]
        for layout in ("loose", "packed"):
            result = client.upload(src, dandiset=dandiset, name=layout, pack=layout == "packed")
            if not result.ok:
                raise RuntimeError(f"{layout} upload did not verify: {result.to_json()}")
            zarr_id = str(result.zarr_id)
            client.wait_for_checksum(zarr_id)
            client.request(
                "POST",
                f"/api/dandisets/{dandiset}/versions/draft/assets/",
                json={"path": f"{layout}.zarr", "zarr_id": zarr_id, "metadata": {}},
                expect=(201,),
            )
            found[layout] = {"draft": zarr_id}
        client.request("POST", f"/api/dandisets/{dandiset}/versions/draft/publish/", expect=(201,))
        for ids in found.values():
            versions = client.get_json(f"/api/zarr/{ids['draft']}/versions/")["results"]
            ids["version"] = versions[-1]["zarr_id"]
            manifest = requests.get(
                f"{url}/api/zarr/{ids['draft']}/manifest/?expires_in=86400",
                headers={"Authorization": f"Token {token}"},
                timeout=600,
            )
            manifest.raise_for_status()
            ids["refs"] = manifest.json()["refs"]
    return found


def _direct_to(refs: dict[str, Any]) -> Callable[[str], Request]:
    """A chunk's presigned GET straight to storage (a packed one's: its range of the shard)."""

    def request(key: str) -> Request:
        ref = refs[key]
        if len(ref) == 3:
            _, offset, length = ref
            return ref[0], {"Range": f"bytes={offset}-{offset + length - 1}"}
        return ref[0], {}

    return request


def _service_read(
    base_url: str, read_id: str, etags: dict[str, str] | None
) -> Callable[[str], Request]:
    """A chunk's read through ``/zarr/``; with ``etags``, a revalidation of it."""

    def request(key: str) -> Request:
        headers = {"If-None-Match": etags[key]} if etags is not None else {}
        return f"{base_url}/zarr/{read_id}/{key}", headers

    return request


def _run_case(
    meter: Meter, label: str, make: Callable[[str], Request], keys: list[str], expected: Any
) -> Spent:
    """Every chunk ``WARM_PASSES`` times (what each web worker finds of a chunk once, it keeps:
    a version's file locations, listings), then ``ROUNDS`` times ``READS`` of ``keys``'
    sample, measured."""
    rng = random.Random(label)
    every = list(expected)

    def check_for(
        sample: list[str], status_ok: tuple[int, ...]
    ) -> Callable[[int, bytes, int], None]:
        def check(index: int, body: bytes, status: int) -> None:
            if status not in status_ok:
                raise RuntimeError(f"{label}: {sample[index]} answered {status}: {body[:200]!r}")
            if status in (200, 206) and body != expected[sample[index]]:
                raise RuntimeError(f"{label}: {sample[index]}: bytes differ")

        return check

    not_modified = "If-None-Match" in make(keys[0])[1]
    ok = (304,) if not_modified else (200, 206)
    for _ in range(WARM_PASSES):
        _read_all([make(k) for k in every], check_for(every, ok))
    sample = [rng.choice(keys) for _ in range(READS * ROUNDS)]
    return meter.measure(
        label, len(sample), lambda: _read_all([make(k) for k in sample], check_for(sample, ok))
    )


def _profiled(
    deployment: Production, label: str, make: Callable[[str], Request], keys: list[str], out: Path
) -> str:
    """Where the web workers' CPU goes for ``READS`` reads of ``label`` (py-spy, when
    ``BENCH_CHUNK_READS_PROFILE`` is set and ``make bench-tools`` installed it)."""
    assert deployment.web is not None
    raw = out / f"{label.replace(' ', '_').replace(',', '').replace(':', '')}.pyspy"
    sample = random.Random(label).choices(keys, k=READS)
    with profiles.sampling(deployment.web.pid, raw):
        _read_all([make(k) for k in sample], lambda *_: None)
    return f"  {label}, sampled by py-spy:\n{profiles.summary(raw, top=10)}"


def _through_the_proxy(
    meter: Meter,
    deployment: Production,
    archives: dict[str, dict[str, Any]],
    keys: list[str],
    expected: dict[str, bytes],
    base: Path,
) -> list[Spent]:
    """A version's chunks read through the caching proxy (deploy/nginx.conf.template), once
    kept: what the service spends on them (nothing) and nginx."""
    proxy = NginxProxy(base / "nginx", deployment.url.removeprefix("http://"))
    proxy.start()
    meter.proxy = proxy
    try:
        return [
            _run_case(
                meter,
                f"{layout}, version through the proxy (kept)",
                _service_read(proxy.url, ids["version"], etags=None),
                keys,
                expected,
            )
            for layout, ids in archives.items()
        ]
    finally:
        meter.proxy = None
        proxy.stop()


def _documents(meter: Meter, deployment: Production, version_id: str) -> list[Spent]:
    """A version's manifest and DANDI ``files`` page: made once, then asked again."""
    spent = []
    for label, path in (
        ("version manifest (kept)", f"/api/zarr/{version_id}/manifest/"),
        ("version DANDI files page (kept)", f"/api/zarr/{version_id}/files/?page_size=1000"),
    ):
        url = deployment.url + path
        first = requests.get(url, timeout=600)
        first.raise_for_status()

        def again(url: str = url, body: bytes = first.content) -> None:
            with requests.Session() as session:
                for _ in range(DOCUMENT_READS):
                    response = session.get(url, timeout=600)
                    if response.content != body:
                        raise RuntimeError(f"{url}: another document the second time")

        spent.append(meter.measure(label, DOCUMENT_READS, again))
    return spent


def _table(rows: list[Spent], ceilings: dict[str, float]) -> str:
    lines = [
        "| read | web workers | PostgreSQL | Redis | service (web + PostgreSQL) | SeaweedFS "
        "during | nginx | SeaweedFS's own GET | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ceiling = ceilings.get(row.label.split(",")[0])
        measured = ceiling and "304" not in row.label
        ratio = f"{row.stack / row.reads * 1000 / ceiling:.1f}x" if measured else "-"
        own = f"{ceiling:.2f} ms" if ceiling else "-"
        lines.append(
            f"| {row.label} | {row.per_read_ms(row.web):.2f} ms | "
            f"{row.per_read_ms(row.database):.2f} ms | {row.per_read_ms(row.redis):.2f} ms | "
            f"{row.per_read_ms(row.stack):.2f} ms | {row.per_read_ms(row.storage):.2f} ms | "
            f"{row.per_read_ms(row.proxy):.2f} ms | {own} | {ratio} |"
        )
    return "\n".join(lines)


def main() -> None:
    missing = tools_missing()
    if missing:
        print(f"skipped: {', '.join(missing)} missing")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="bench-chunk-reads-") as tmp:
        base = Path(tmp)
        src = base / "array"
        keys = make_array(src, CHUNKS)
        expected = {key: (src / key).read_bytes() for key in keys}
        s3 = SeaweedS3(base / "seaweedfs")
        deployment = Production(
            base / "deployment",
            DATABASE_SERVER_URL,
            s3,
            f"reads-{uuid.uuid4().hex[:8]}",
            web_workers=WEB_WORKERS,
            celery_workers=1,
            extra_env={
                # One reader address: the expensive reads' limits are not what is measured.
                "DANDIZARR_THROTTLE_ANON": "10000000/min",
                "DANDIZARR_THROTTLE_USER": "10000000/min",
            },
            commands=[["ensure_bucket"]],
            start_timeout=300,
        )
        deployment.extra_env["DANDIZARR_CACHE_URL"] = deployment.redis.url.rsplit("/", 1)[0] + "/1"
        try:
            deployment.start()
            started = time.perf_counter()
            archives = _seed(deployment, src)
            print(
                f"{CHUNKS:,} chunks of 4 KiB, loose and packed, uploaded and published in "
                f"{time.perf_counter() - started:.0f} s; {WEB_WORKERS} web workers; "
                f"{READS:,} random reads x {ROUNDS}, {JOBS} keep-alive connections",
                flush=True,
            )
            meter = Meter(deployment, s3)
            etags = {k: f'"{hashlib.md5(v).hexdigest()}"' for k, v in expected.items()}
            rows: list[Spent] = []
            profiled: list[str] = []
            ceilings: dict[str, float] = {}
            base_url = deployment.url
            for layout, ids in archives.items():
                refs = ids["refs"]
                direct = _run_case(
                    meter, f"{layout}, presigned GET", _direct_to(refs), keys, expected
                )
                ceilings[layout] = direct.per_read_ms(direct.storage)
                rows.append(direct)
                for state in ("draft", "version"):
                    read = _service_read(base_url, ids[state], etags=None)
                    rows.append(_run_case(meter, f"{layout}, {state}", read, keys, expected))
                    if PROFILE and profiles.available():
                        found = _profiled(deployment, f"{layout}, {state}", read, keys, base)
                        profiled.append(found)
                    revalidate = _service_read(base_url, ids[state], etags=etags)
                    label = f"{layout}, {state}: If-None-Match -> 304"
                    rows.append(_run_case(meter, label, revalidate, keys, expected))
            documents = _documents(meter, deployment, archives["loose"]["version"])
            if nginx_binary() is not None:
                rows += _through_the_proxy(meter, deployment, archives, keys, expected, base)
        finally:
            deployment.stop()
            s3.stop()
    print(_table(rows, ceilings))
    print("\n".join(profiled))
    print()
    for row in rows:
        layout = row.label.split(",")[0]
        if "presigned" in row.label or "proxy" in row.label:
            continue
        per = row.per_read_ms(row.stack)
        if "304" in row.label:
            verdict = "met" if per <= NOT_MODIFIED_TARGET_MS else "missed"
            print(f"  {row.label}: {per:.2f} ms (target <= {NOT_MODIFIED_TARGET_MS} ms: {verdict})")
        else:
            ratio = per / ceilings[layout]
            verdict = "met" if ratio <= TARGET else "missed"
            print(f"  {row.label}: {ratio:.1f}x SeaweedFS's own (target <= {TARGET}x: {verdict})")
    for row in rows:
        if "through the proxy" in row.label:
            print(f"  {row.label}: {row.per_read_ms(row.stack):.2f} ms of service CPU a read "
                  "(target: 0)")  # fmt: skip
    for row in documents:
        per = row.per_read_ms(row.stack)
        verdict = "met" if per <= DOCUMENT_TARGET_MS else "missed"
        print(f"  {row.label}: {per:.2f} ms of service CPU a request (target <= "
              f"{DOCUMENT_TARGET_MS} ms: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
