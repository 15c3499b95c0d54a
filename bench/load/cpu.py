"""Where a load run's CPU went: each process group's CPU seconds sampled from ``/proc`` during a
Locust run (``CpuSampler``), and py-spy's raw samples of a web worker summed by function
(``where_the_time_goes``)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Protocol

import psycopg

from bench.s3_env import cpu_seconds
from tests.support.production import Production, child_pids
from tests.support.proxy import NginxProxy
from tests.support.seaweedfs import SeaweedS3


class Stack(Protocol):
    """The processes a load run samples (``bench.load.run.Stack`` is one)."""

    deployment: Production
    proxy: NginxProxy | None
    s3: SeaweedS3


def where_the_time_goes(raw: Path, what: str, top: int = 12) -> str:
    """py-spy's raw samples (one ``frame;frame;... count`` line per stack) summed: the functions
    the samples were in (self), and the project's functions they were under (inclusive)."""
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = [f.strip() for f in stack.split(";")]
        own[_frame(frames[-1])] += samples
        for name in {_frame(f) for f in frames if "dandizarr" in f}:
            under[name] += samples
    if not total:
        return f"  py-spy, {what}: no samples"
    lines = [f"  py-spy, {what}: {total} samples of running threads; self:"]
    lines += [f"    {n / total:6.1%} {name}" for name, n in own.most_common(top)]
    lines.append("  under the project's functions (inclusive):")
    lines += [f"    {n / total:6.1%} {name}" for name, n in under.most_common(top)]
    return "\n".join(lines)


def _frame(frame: str) -> str:
    """``function (path/to/module.py:12)`` as ``function (module.py)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':', 1)[0]})" if where else name


class CpuSampler(threading.Thread):
    """Every 2 s, the CPU seconds of each process of the stack, by group; a process's share is
    its last sample less its first (a process started meanwhile from 0), so processes killed or
    started during the run count up to their last sample."""

    def __init__(self, stack: Stack, locust_pid: int) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.locust_pid = locust_pid
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.group: dict[int, str] = {}
        self.stopping = threading.Event()
        self.started_pids = set(self._pids())
        self._sample()

    def _pids(self) -> dict[int, str]:
        deployment = self.stack.deployment
        groups: dict[int, str] = {}
        if deployment.web is not None and deployment.web.running():
            groups[deployment.web.pid] = "gunicorn master"
            for pid in child_pids(deployment.web.pid):
                groups[pid] = "gunicorn workers"
        if deployment.reads is not None and deployment.reads.running():
            groups[deployment.reads.pid] = "gunicorn master"
            for pid in child_pids(deployment.reads.pid):
                groups[pid] = "gunicorn reads' workers"
        if self.stack.proxy is not None and self.stack.proxy.running():
            for pid in [self.stack.proxy.pid, *child_pids(self.stack.proxy.pid)]:
                groups[pid] = "nginx"
        for worker in deployment.workers:
            if worker.running():
                groups[worker.pid] = "Celery workers"
        if deployment.beat is not None and deployment.beat.running():
            groups[deployment.beat.pid] = "Celery beat"
        if deployment.redis.running():
            groups[deployment.redis.pid] = "redis"
        if self.stack.s3.process is not None:
            groups[self.stack.s3.process.pid] = "SeaweedFS"
            for pid in child_pids(self.stack.s3.process.pid):
                groups[pid] = "SeaweedFS"
        groups[self.locust_pid] = "Locust (readers)"
        for pid in child_pids(self.locust_pid):
            groups[pid] = "uploader clients"
        try:
            with psycopg.connect(deployment.server_database_url, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s",
                    (deployment.database_name,),
                ).fetchall()
            for (pid,) in rows:
                groups[pid] = "PostgreSQL backends"
        except psycopg.Error:
            pass
        return groups

    def _sample(self) -> None:
        for pid, group in self._pids().items():
            seconds = cpu_seconds([pid])
            if seconds == 0.0 and pid not in self.last:
                continue
            self.group[pid] = group
            self.first.setdefault(pid, seconds if pid in self.started_pids else 0.0)
            self.last[pid] = max(seconds, self.last.get(pid, 0.0))

    def run(self) -> None:
        while not self.stopping.wait(2.0):
            self._sample()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)

    def totals(self) -> dict[str, float]:
        totals: Counter[str] = Counter()
        for pid, group in self.group.items():
            totals[group] += self.last[pid] - self.first[pid]
        return dict(totals)
