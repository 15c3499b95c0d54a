"""The load test (issue #39; ``make load``): many people at once on the production shape.

PostgreSQL (a fresh database), a Redis, SeaweedFS, gunicorn with the production config
(``LOAD_WEB_WORKERS``, 2), ``LOAD_CELERY_WORKERS`` (2) Celery workers and beat; Locust runs
``LOAD_UPLOADERS`` (16) uploaders (the client library, loose and packed, one archive each,
owned by ``LOAD_OWNERS`` (4) users made with ``manage.py users``) and ``LOAD_READERS`` (64)
readers at ``LOAD_READER_RATE`` (1) requests per second each (bench/load/locustfile.py).

1. ``LOAD_SECONDS`` (300) of that; the table per route class (p50, p99, requests/s), the
   failures (goal: no 5xx, no timeout), the CPU of each process group.
2. The same again with a Celery worker and a web worker SIGKILLed halfway (``LOAD_KILL=0``
   skips it).
3. The readers' rate stepped (``LOAD_READER_RATES``: total requests per second, spread over
   the readers; ``LOAD_STEP_SECONDS`` each, 60) while the uploads run: the largest rate at which
   the readers' p99 stays under 250 ms, and what was busy. Empty: skipped.

After each of 1 and 2 (and after 3): every uploader archive's checksum equals the one its
client computed locally, and ``audit_zarr --report-only`` finds no drift. Figures printed,
never asserted (tests/production/test_load_live.py asserts the short version's correctness).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.load.figures import LoadConfig, PhaseReport
from bench.load.run import stack
from tests.support.production import tools_missing

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
P99_TARGET_MS = 250.0


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _print_phase(report: PhaseReport) -> None:
    print(report.table())
    print(report.summary(), flush=True)


def main() -> None:
    missing = tools_missing()
    if missing:
        print(f"skipped: {', '.join(missing)} missing")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = LoadConfig(
        seconds=_env_int("LOAD_SECONDS", 300),
        uploaders=_env_int("LOAD_UPLOADERS", 16),
        readers=_env_int("LOAD_READERS", 64),
        reader_rate=float(os.environ.get("LOAD_READER_RATE") or 1.0),
        owners=_env_int("LOAD_OWNERS", 4),
        web_workers=_env_int("LOAD_WEB_WORKERS", 2),
        celery_workers=_env_int("LOAD_CELERY_WORKERS", 2),
        proxy=os.environ.get("LOAD_PROXY", "0") != "0",
        read_web_workers=_env_int("LOAD_READ_WEB_WORKERS", 0),
    )
    rates = [
        float(r) for r in os.environ.get("LOAD_READER_RATES", "4,8,16,32,64,128").split(",") if r
    ]
    step_seconds = _env_int("LOAD_STEP_SECONDS", 60)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"commit {commit}; {os.cpu_count()} CPUs; load average {os.getloadavg()}")
    with (
        tempfile.TemporaryDirectory(prefix="bench-load-") as tmp,
        stack(Path(tmp), DATABASE_URL, config) as started,
    ):
        pools = (
            f"the reads' pool {config.read_web_workers} workers, "
            if config.read_web_workers
            else ""
        )
        print(
            f"stack up: {started.url} ({'nginx, ' if config.proxy else ''}{pools}"
            f"{config.web_workers} web workers); seeded {len(started.targets)} read targets"
        )
        _print_phase(started.run("steady", config, profile=True))
        print(started.check().describe(), flush=True)
        if os.environ.get("LOAD_KILL", "1") != "0":
            _print_phase(started.run("kills", config, kill=True))
            print(started.check().describe(), flush=True)
        passing: float | None = None
        for rate in rates:
            step = replace(config, seconds=step_seconds, reader_rate=rate / config.readers)
            report = started.run(f"readers-{rate:g}", step)
            p99 = report.reader_p99()
            print(
                f"readers at {rate:g} req/s asked ({report.reader_rate():.1f} answered): "
                f"p99 of all reads {p99:.0f} ms (worst route class "
                f"{report.worst_reader_p99():.0f} ms) "
                f"({'under' if p99 < P99_TARGET_MS else 'OVER'} {P99_TARGET_MS:.0f} ms)"
            )
            _print_phase(report)
            if p99 < P99_TARGET_MS:
                passing = rate
            else:
                break
        if rates:
            print(
                f"largest readers' rate with p99 < {P99_TARGET_MS:.0f} ms while uploads run: "
                f"{f'{passing:g} req/s' if passing else f'none of {rates}'}"
            )
            print(started.check().describe(), flush=True)
