"""Issue #47: each finding of the attacker's round sent to a live service, where it hurt: on
``dandizarr serve`` (what ``make serve`` runs: SQLite, local storage, console logs at INFO)
and in the production shape (gunicorn, PostgreSQL, SeaweedFS, Celery; JSON logs).

Each request is measured from outside the service (its processes' CPU from /proc, the answer's
size, the log it wrote) and must cost what an ordinary request costs: no 5xx, a bounded answer
and log, no rich traceback, and ``/healthz`` answering right after. The table is printed
(``-s``) for the figures in docs/security.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.ci import needs
from tests.support.cost_bounds import cpu_scale
from tests.support.hostile_findings import (
    FINDING_DOCUMENTS,
    Measured,
    Target,
    archive_create,
    archive_upload,
    measure,
    probes,
    table,
)
from tests.support.processes import Processes, serve_logged
from tests.support.production import production, tools_missing
from tests.support.seaweedfs import SeaweedS3

REPO = Path(__file__).resolve().parents[2]

# What one hostile request may cost the service: about what a page costs, with room for a
# loaded machine (CPU, not wall time), and the log it may write (a line or two, a bounded
# traceback at most).
REQUEST_CPU_SECONDS = 0.5
# Measured from outside, of processes sharing the two cores with the walk (and a 10 MB body
# parsed by the service: 1.3 CPU-s on the slower machine of session 12): more headroom.
WALK_HEADROOM = 4.0
LOG_BYTES = 16 << 10
HEALTHZ_SECONDS = 2.0
# Box-drawing characters of a rich traceback: never in any log format.
RICH_MARKS = ("╭", "│", "╰")


def _check(rows: list[Measured]) -> list[str]:
    problems = []
    for row in rows:
        what = f"finding {row.probe.finding}, {row.probe.name}"
        if row.status >= 500:
            problems.append(f"{what}: answered {row.status}")
        if row.answer_bytes > row.probe.max_answer:
            problems.append(f"{what}: a {row.answer_bytes:,}-byte answer")
        if row.cpu_seconds > REQUEST_CPU_SECONDS * cpu_scale(WALK_HEADROOM):
            problems.append(f"{what}: {row.cpu_seconds:.2f} CPU-s")
        if row.log_bytes > LOG_BYTES:
            problems.append(f"{what}: {row.log_bytes:,} bytes of log")
        if any(mark in row.log_text for mark in RICH_MARKS):
            problems.append(f"{what}: a rich traceback in the log")
        if row.healthz_seconds > HEALTHZ_SECONDS:
            problems.append(f"{what}: /healthz then took {row.healthz_seconds:.1f} s")
    return problems


def _walk(target: Target, server_pid: int, logs: list[Path], shape: str) -> None:
    target.loose = archive_create(target, "hostile.zarr", "loose")
    archive_upload(target, target.loose, FINDING_DOCUMENTS)
    target.sharded = archive_create(target, "hostile-sharded.zarr", "sharded")
    # Once untimed: the first view of a page loads its templates and modules.
    requests.get(f"{target.url}/", timeout=60)
    rows = [measure(target, probe, server_pid, logs) for probe in probes()]
    print(table(shape, rows))
    problems = _check(rows)
    assert problems == [], "\n".join(problems)


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _stranger(url: str, env: dict[str, str]) -> Target:
    """A signed-in user who owns nothing but the dandiset they created."""
    name = f"mallory{uuid.uuid4().hex[:6]}"
    _manage(env, "users", "add", name)
    token = _manage(env, "users", "token", "issue", name, "--print").split()[-1]
    created = requests.post(
        f"{url}/api/dandisets/",
        json={"name": "mallory's"},
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    return Target(url=url, token=token, dandiset=str(created.json()["identifier"]))


@pytest.fixture
def served(processes: Processes, tmp_path: Path) -> Iterator[tuple[str, int, Path, Path]]:
    """``dandizarr serve`` as ``make serve`` starts it (console logs at INFO), logging to a file:
    its URL, pid, log and data directory."""
    data = tmp_path / "var"
    log = tmp_path / "serve.log"
    with serve_logged(data, log) as (url, pid):
        yield url, pid, log, data


def test_hostile_walk_on_dandizarr_serve(served: tuple[str, int, Path, Path]) -> None:
    url, pid, log, data = served
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL"}
    }
    env.update(DANDIZARR_DATA_DIR=str(data), DANDIZARR_SECRET_KEY="manage-" + "k" * 40)
    _walk(_stranger(url, env), pid, [log], "dandizarr serve (console logs)")


@needs(tools_missing(), f"missing {tools_missing()} (CI always runs this)")
@pytest.mark.timeout(600)
def test_hostile_walk_in_the_production_shape(processes: Processes, tmp_path: Path) -> None:
    server_database_url = os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    s3 = SeaweedS3(tmp_path / "seaweedfs")
    with production(
        tmp_path / "deployment",
        server_database_url,
        s3,
        f"hostile-{uuid.uuid4().hex[:12]}",
        web_workers=2,
        celery_workers=1,
        DANDIZARR_LOG_LEVEL="INFO",
    ) as deployment:
        assert deployment.web is not None
        target = _stranger(deployment.url, deployment.env)
        logs = sorted(deployment.directory.glob("*.log"))
        try:
            _walk(target, deployment.web.pid, logs, "the production shape (JSON logs)")
        except BaseException:
            print(deployment.logs_tail())
            raise
