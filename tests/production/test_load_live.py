"""Issue #39's load test, short (``make load`` is the long one, bench/bench_load.py): the
production shape (PostgreSQL, a Redis, SeaweedFS, gunicorn with the production config and 2
workers, 2 Celery workers and beat), 4 uploaders of the client library (loose and packed, two
owners) and 8 readers through Locust for 12 s, on two seed archives of 64 chunks. Correctness
only, never latency: no request answered 5xx or not at all, every upload verified, every
archive's checksum equals the one its client computed, and ``audit_zarr`` finds no drift."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.load.figures import LoadConfig
from bench.load.run import stack
from tests.support.ci import needs
from tests.support.processes import Processes
from tests.support.production import tools_missing

pytestmark = needs(tools_missing(), f"missing {tools_missing()} (CI always runs this)")

# Every route class the readers use (bench/load/locustfile.py), each of which must be read.
READ_CLASSES = {
    "read: GET /api/zarr/{id}/",
    "read: GET /api/zarr/{id}/files/",
    "read: GET /zarr/{id}/{chunk} range, draft",
    "read: GET /zarr/{id}/{chunk} range, version",
}


@pytest.mark.timeout(600)
def test_short_load_answers_no_5xx_and_keeps_every_checksum(
    processes: Processes, tmp_path: Path
) -> None:
    # processes: the production shape (tests.support.production) runs as processes.
    server_database_url = os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    config = LoadConfig(
        seconds=12, uploaders=4, readers=8, reader_rate=2.0, owners=2, seed_files=64
    )
    with stack(tmp_path, server_database_url, config) as started:
        report = started.run("short", config)
        print(report.table())
        print(report.summary())
        checks = started.check()
        print(checks.describe())
    everything = report.row("Aggregated")
    assert everything is not None and everything.requests > 0
    assert report.count("HTTP 5") == 0, report.summary()
    assert everything.failures == 0, report.summary()
    read = {row.name for row in report.rows if row.requests > 0}
    assert read >= READ_CLASSES, read
    # Each uploader uploaded at least once, and every upload's checksum verified.
    assert report.uploads >= config.uploaders, report.summary()
    assert report.uploads_failed == 0, report.summary()
    assert checks.archives == config.uploaders, checks.describe()
    assert not checks.mismatched, checks.describe()
    assert checks.audit_clean, checks.describe()
