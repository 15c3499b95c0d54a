"""Issue #36 in the production shape: the versions model walk (tests/support/versions_model.py)
against PostgreSQL, SeaweedFS (bucket versioning), Redis, two gunicorn web processes (each on a
port of its own), a Celery worker applying the changes and compacting shards, and beat. Every
check of every step reads through both web processes: a process's cache of a version must
follow what the other process and the worker changed. Garbage collection runs as
``manage.py collect_garbage`` with no undelete window, compaction in a process of its own.
At the end the real ``dandi download`` of the draft and of every published version is exact.

``make test`` runs a short walk; ``make versions-model`` a long one
(``VERSIONS_MODEL_STEPS``, ``VERSIONS_MODEL_SEED``)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.ci import needs
from tests.support.dask_writes import (
    dask_write_and_commit,
    session_write_and_commit,
    xarray_writes_and_commits,
)
from tests.support.killed_writer import killed_writer
from tests.support.model_api import HttpApi
from tests.support.processes import Processes
from tests.support.production import Production, production, tools_missing
from tests.support.seaweedfs import SeaweedS3
from tests.support.session_model import SessionHarness
from tests.support.versions_model import (
    Harness,
    VersionsWalk,
    assert_every_version_downloads,
    session_store,
)

pytestmark = needs(tools_missing(), f"missing {tools_missing()} (CI always runs this)")

STEPS = int(os.environ.get("VERSIONS_MODEL_STEPS", "14"))
SEED = int(os.environ.get("VERSIONS_MODEL_SEED", "36"))
# Longest a change takes to be applied by the worker (a loaded machine).
SETTLE_SECONDS = 120.0

# tests.support.api.let_upload_urls_expire, in a process of the deployment's.
EXPIRE_UPLOAD_URLS = (
    "from tests.support.api import let_upload_urls_expire\nlet_upload_urls_expire()\n"
)
# Write sessions' expiry passed (an UPDATE instead of a wait), then the sweep, in a process of
# the deployment's (tests.support.versions_model.sessions_expire).
EXPIRE_SESSIONS = (
    "from tests.support.versions_model import sessions_expire\nsessions_expire({session_ids!r})\n"
)
# The keys storage holds under a session's staging prefix, a line each after STAGED (the shell
# prints lines of its own).
STAGED = "staged object: "
STAGED_OBJECTS = (
    "from tests.support.versions_model import staged_objects\n"
    "for key in staged_objects({zarr_id!r}, {session_id!r}):\n"
    f"    print({STAGED!r} + key)\n"
)
COMPACT_EVERY_SHARD = (
    "from dandizarr_server.zarr_api.models import Shard\n"
    "from dandizarr_server.zarr_api.services.compaction import shard_compact\n"
    "live = Shard.objects.filter(archive__zarr_id='{zarr_id}', state=Shard.State.LIVE)\n"
    "for pk in live.values_list('pk', flat=True):\n"
    "    shard_compact(pk)\n"
)


def deployment_harness(deployment: Production, second_web: str) -> Harness:
    writer = HttpApi(deployment.url, deployment.token)

    def wait(ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + SETTLE_SECONDS
        while not ready():
            assert time.monotonic() < deadline, f"not done within {SETTLE_SECONDS:.0f} s: {what}"
            time.sleep(0.2)  # the Celery worker applies it meanwhile

    return Harness(
        writer=writer,
        readers=[writer, HttpApi(second_web, deployment.token)],
        anonymous=HttpApi(deployment.url),
        collect_garbage=lambda zarr_id: print(deployment.manage("collect_garbage", zarr_id)),
        compact=lambda zarr_id: print(
            deployment.manage("shell", "-c", COMPACT_EVERY_SHARD.format(zarr_id=zarr_id))
        ),
        expire_upload_urls=lambda: print(deployment.manage("shell", "-c", EXPIRE_UPLOAD_URLS)),
        wait=wait,
        # Commits applied by the Celery worker, the sweep in a process of its own; sessions
        # read through ArchiveStore too.
        sessions=SessionHarness(
            expire=lambda ids: print(
                deployment.manage("shell", "-c", EXPIRE_SESSIONS.format(session_ids=ids))
            ),
            staged_objects=lambda zarr_id, session_id: [
                line.removeprefix(STAGED)
                for line in deployment.manage(
                    "shell", "-c", STAGED_OBJECTS.format(zarr_id=zarr_id, session_id=session_id)
                ).splitlines()
                if line.startswith(STAGED)
            ],
            store=session_store(deployment.url, deployment.token),
        ),
    )


@pytest.mark.timeout(max(900, STEPS * 30))
def test_every_version_reads_as_the_model_in_every_process(
    processes: Processes, tmp_path: Path
) -> None:
    # processes: the production shape (tests.support.production) runs as processes.
    server_database_url = os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    s3 = SeaweedS3(tmp_path / "seaweedfs")
    try:
        with production(
            tmp_path / "deployment",
            server_database_url,
            s3,
            f"versions-{uuid.uuid4().hex[:12]}",
            web_workers=1,
            celery_workers=1,
            DANDIZARR_GC_WINDOW_DAYS="0",
            DANDIZARR_SHARD_COMPACT_PERCENT="1",
            DANDIZARR_THROTTLE_USER="1000000/min",
            DANDIZARR_THROTTLE_ANON="1000000/min",
            DANDIZARR_THROTTLE_PUBLISHES="1000000/hour",
            commands=[["ensure_bucket"]],
            other_web_servers=1,
        ) as deployment:
            try:
                second_web = deployment.more_web_urls[0]
                # Write sessions drawn twice as often as the walk's own rules (issue #48).
                harness = deployment_harness(deployment, second_web)
                walk = VersionsWalk(
                    harness,
                    SEED,
                    max_versions=6,
                    log=print,
                    session_weight=2,
                )
                walk.run(STEPS)
                # Issue #48 in this shape: Dask's two worker processes write one session.
                made = HttpApi(deployment.url, deployment.token).request(
                    "POST",
                    "/api/zarr/",
                    body={"name": "dask.zarr", "dandiset": walk.dandiset},
                )
                assert made.status == 201, made.body
                dask_zarr = str(made.json()["zarr_id"])
                dask_write_and_commit(deployment.url, dask_zarr, deployment.token, tmp_path)
                # And xarray: to_zarr, then an append_dim and a region write, a session each.
                made = HttpApi(deployment.url, deployment.token).request(
                    "POST",
                    "/api/zarr/",
                    body={"name": "xarray.zarr", "dandiset": walk.dandiset},
                )
                assert made.status == 201, made.body
                xarray_writes_and_commits(
                    deployment.url, str(made.json()["zarr_id"]), deployment.token, tmp_path
                )
                # A writer SIGKILLed mid-write leaves the draft as it was; the next session
                # commits; the dead one expires and the sweep deletes what it staged.
                api = HttpApi(deployment.url, deployment.token)
                before = api.request("GET", f"/api/zarr/{dask_zarr}/").json()["checksum"]
                dead = killed_writer(deployment.url, dask_zarr, deployment.token)
                assert api.request("GET", f"/api/zarr/{dask_zarr}/").json()["checksum"] == before
                assert harness.sessions is not None
                assert harness.sessions.staged_objects(dask_zarr, dead)
                after = session_write_and_commit(deployment.url, dask_zarr, deployment.token)
                assert after != before
                harness.sessions.expire([dead])
                assert harness.sessions.staged_objects(dask_zarr, dead) == []
                assert api.request("GET", f"/api/zarr/{dask_zarr}/").json()["checksum"] == after
                downloaded = assert_every_version_downloads(
                    deployment.url, deployment.token, walk, tmp_path / "dandi"
                )
                assert walk.sessions is not None
                print(
                    f"seed {SEED}: {STEPS} steps, {len(walk.model.versions)} versions, "
                    f"{downloaded} downloads by dandi exact; sessions: {walk.sessions.tally()}"
                )
            except BaseException:
                print(deployment.logs_tail())
                raise
    finally:
        s3.stop()
