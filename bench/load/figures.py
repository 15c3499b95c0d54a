"""What a load run is asked (``LoadConfig``) and what it measured: each Locust run's table of
route classes, failures, kills and CPU (``PhaseReport``), and the checks after the runs
(``Checks``). ``bench.load.run`` makes them; ``bench.bench_load`` prints them and
``tests/production/test_load_live.py`` asserts them."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LoadConfig:
    seconds: int
    uploaders: int
    readers: int
    # Each reader's requests per second; 0: as fast as the service answers.
    reader_rate: float = 1.0
    owners: int = 4
    web_workers: int = 2
    celery_workers: int = 2
    seed: int = 39
    # Each seeded archive's chunks (published once, then grown as a draft by a quarter).
    seed_files: int = 512
    # The caching proxy (deploy/nginx.conf.template) in front, everyone's requests through it,
    # and the reads' own gunicorn pool of this many workers behind it (0: one pool for all).
    proxy: bool = False
    read_web_workers: int = 0


@dataclass
class Row:
    """One route class's figures, as Locust's stats give them."""

    type: str
    name: str
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    per_second: float


@dataclass
class PhaseReport:
    """One Locust run: the table, the failures by kind, the kills made, the CPU by process."""

    label: str
    config: LoadConfig
    rows: list[Row]
    failures: Counter[str]
    kills: list[str]
    cpu: dict[str, float]  # CPU seconds by process group
    wall: float
    machine_busy: float
    load_before: str
    load_after: str
    uploads: int = 0
    uploads_failed: int = 0
    profile: str = ""

    def count(self, kind: str) -> int:
        """Failures whose message starts with ``kind`` (``HTTP 5``, ``timeout``, ``connection``)."""
        return sum(n for message, n in self.failures.items() if message.startswith(kind))

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)

    def reader_p99(self) -> float:
        """The p99 of every read together."""
        row = self.row("read: all reads")
        return row.p99_ms if row else 0.0

    def worst_reader_p99(self) -> float:
        """The largest p99 of the readers' route classes."""
        return max((r.p99_ms for r in self.rows if r.name.startswith("read: ")), default=0.0)

    def reader_rate(self) -> float:
        row = self.row("read: all reads")
        return row.per_second if row else 0.0

    def table(self) -> str:
        lines = [
            f"{'route class':<58} {'requests':>8} {'fail':>5} {'p50 ms':>7} {'p99 ms':>7} "
            f"{'req/s':>7}"
        ]
        ordered = sorted(
            self.rows, key=lambda r: (r.name == "Aggregated", ": all " in r.name, r.name)
        )
        for row in ordered:
            name = row.name if row.name != "Aggregated" else "everything (Locust's aggregate)"
            lines.append(
                f"{name[:58]:<58} {row.requests:>8} {row.failures:>5} {row.p50_ms:>7.0f} "
                f"{row.p99_ms:>7.0f} {row.per_second:>7.1f}"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        cores = os.cpu_count() or 1
        cpu = ", ".join(
            f"{name} {seconds / self.wall:.2f}"
            for name, seconds in sorted(self.cpu.items(), key=lambda item: -item[1])
        )
        failures = "; ".join(f"{n} x {m[:160]}" for m, n in self.failures.most_common(8))
        return "\n".join(
            [
                f"{self.label}: {self.config.uploaders} uploaders, {self.config.readers} readers "
                f"at {self.config.reader_rate or 'unpaced'} req/s each, {self.config.seconds} s "
                f"({self.wall:.0f} s with the uploads' ends)",
                f"  uploads: {self.uploads} ({self.uploads_failed} failed); 5xx "
                f"{self.count('HTTP 5')}, timeouts {self.count('timeout')}, connection errors "
                f"{self.count('connection')}",
                f"  failures: {failures or 'none'}",
                f"  kills: {'; '.join(self.kills) or 'none'}",
                f"  cores busy: machine {self.machine_busy / self.wall:.2f} of {cores}; {cpu}",
                f"  load average before: {self.load_before}; after: {self.load_after}",
                *([self.profile] if self.profile else []),
            ]
        )


@dataclass
class Checks:
    """After the runs: each uploader's archive against its client's checksum, and the audit."""

    archives: int = 0
    mismatched: list[str] = field(default_factory=list)
    audit: str = ""
    audit_clean: bool = False

    def describe(self) -> str:
        return (
            f"checksums: {self.archives - len(self.mismatched)} of {self.archives} archives equal "
            f"their client's ({'; '.join(self.mismatched) or 'no mismatch'}); audit_zarr: "
            f"{'no drift' if self.audit_clean else 'DRIFT or skipped archives:'}"
            + ("" if self.audit_clean else "\n" + self.audit)
        )


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# Locust's failures name the exception by its repr: RuntimeError('HTTP 503').
_EXCEPTION_REPR = re.compile(r"^\w+\((['\"])(.*)\1\)$", re.DOTALL)


def read_stats(path: Path) -> tuple[list[Row], Counter[str]]:
    """The rows and failures ``bench.load.locustfile`` wrote once Locust stopped."""
    if not path.exists():
        return [], Counter()
    stats = json.loads(path.read_text())
    rows = [Row(**row) for row in stats["rows"]]
    failures: Counter[str] = Counter()
    for error in stats["errors"]:
        message = _EXCEPTION_REPR.sub(r"\2", error["error"])
        failures[f"{message} [{error['name']}]"] += int(error["occurrences"])
    return rows, failures
