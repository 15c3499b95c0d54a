"""The load test's Locust users (``bench.load.run`` starts Locust on this file with the plan in
``LOAD_PLAN``).

- ``Uploader`` (``LOAD_UPLOADERS`` of them, Locust's ``fixed_count``): each drives a process of
  its own running the client library (``bench.load.uploader``), grows its local array and uploads
  it into its archive, loose or packed, again and again. Every request the client sends the
  service becomes a Locust request event named by its route class (``upload: POST
  /api/zarr/{id}/upload/``...), and each whole upload one more (``upload: loose`` /
  ``upload: packed``, failed unless its checksum verified).
- ``Reader`` (the rest): anonymous reads, at ``reader_rate`` requests per second each: range
  GETs of chunks through ``/zarr/`` of drafts and of published versions (most of them),
  archive details, listings (``/api/zarr/{id}/files/``), directory indexes, manifests and the
  archive page, of the seeded archives and of the uploaders' archives as they grow.

A request fails when it is answered with a 5xx or not at all (a timeout, a cut connection); the
failure's message says which (``HTTP 503``, ``timeout: ...``, ``connection: ...``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from locust import FastHttpUser, User, constant, constant_throughput, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.stats import StatsEntry

from bench.load.plan import Plan, ReadTarget
from bench.load.sources import ArraySource

PLAN = Plan.read(Path(os.environ["LOAD_PLAN"]))
ROOT = Path(__file__).resolve().parents[2]

# The uploaders' archives once uploaded: readers read them too (drafts that change under them).
_live_targets: list[ReadTarget] = []
_next_uploader = iter(range(len(PLAN.uploaders)))
_results_lock = threading.Lock()


def _failure(status: int | None, error: str | None) -> Exception | None:
    if error is not None:
        kind = "timeout" if "timed out" in error.lower() or "timeout" in error.lower() else ""
        return RuntimeError(f"{kind or 'connection'}: {error}")
    if status is not None and status >= 500:
        return RuntimeError(f"HTTP {status}")
    return None


class Uploader(User):
    fixed_count = len(PLAN.uploaders)
    wait_time = constant(0)

    def on_start(self) -> None:
        number = next(_next_uploader, None)
        if number is None:
            raise StopUser()
        self.plan = PLAN.uploaders[number]
        self.source = ArraySource(Path(self.plan.root))
        self.rng = random.Random(PLAN.seed * 1000 + number)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.child = subprocess.Popen(
            [sys.executable, "-m", "bench.load.uploader", PLAN.url, self.plan.token],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def on_stop(self) -> None:
        child = getattr(self, "child", None)
        if child is not None and child.stdin is not None:
            child.stdin.close()
            child.wait(60)

    @task
    def upload(self) -> None:
        self.source.grow(self.rng, PLAN.add_files, PLAN.overwrite_files)
        assert self.child.stdin is not None and self.child.stdout is not None
        command = {
            "root": self.plan.root,
            "dandiset": self.plan.dandiset,
            "name": self.plan.name,
            "pack": self.plan.pack,
        }
        self.child.stdin.write(json.dumps(command) + "\n")
        self.child.stdin.flush()
        fire = self.environment.events.request.fire
        while True:
            line = self.child.stdout.readline()
            if not line:
                raise RuntimeError(f"the uploader process of {self.plan.name} exited")
            answer: dict[str, Any] = json.loads(line)
            if answer["type"] == "request":
                fire(
                    request_type=answer["method"],
                    name=f"upload: {answer['name']}",
                    response_time=answer["ms"],
                    response_length=answer.get("length", 0),
                    exception=_failure(answer.get("status"), answer.get("error")),
                    context={},
                )
                continue
            break
        answer["name"] = self.plan.name
        answer["paths"] = len(self.source.paths())
        with _results_lock, open(PLAN.results, "a") as results:
            results.write(json.dumps(answer) + "\n")
        ok = answer.get("ok", False)
        fire(
            request_type="UPLOAD",
            name=f"upload: whole upload, {'packed' if self.plan.pack else 'loose'}",
            response_time=answer["ms"],
            response_length=0,
            exception=None if ok else RuntimeError(answer.get("error", "checksum differs")),
            context={},
        )
        if ok and not any(t.zarr_id == answer["zarr_id"] for t in _live_targets):
            _live_targets.append(ReadTarget(answer["zarr_id"], "draft (growing)", []))
        for target in _live_targets:
            if target.zarr_id == answer.get("zarr_id"):
                target.paths = self.source.paths()


class Reader(FastHttpUser):
    wait_time = constant_throughput(PLAN.reader_rate) if PLAN.reader_rate else constant(0)
    connection_timeout = 10.0
    network_timeout = 60.0

    def on_start(self) -> None:
        self.rng = random.Random()

    def _target(self, kind: str | None = None) -> ReadTarget:
        seeded = [t for t in PLAN.targets if kind is None or t.kind == kind]
        live = [t for t in _live_targets if t.paths] if kind in (None, "draft") else []
        return self.rng.choice(seeded + live if live and self.rng.random() < 0.5 else seeded)

    def _get(self, path: str, name: str, **kwargs: Any) -> None:
        with self.client.get(path, name=f"read: {name}", catch_response=True, **kwargs) as answer:
            status = answer.status_code or None
            error = None if status else repr(answer.error)
            failure = _failure(status, error)
            if failure is not None:
                answer.failure(str(failure))
            elif status is not None and status >= 400 and status != 404:
                # 4xx other than 404 (a chunk an overwrite races) is a finding: a failure too.
                answer.failure(f"HTTP {status}")
            else:
                answer.success()

    def _chunk(self, kind: str) -> None:
        target = self._target(kind)
        path = self.rng.choice(target.paths)
        start = self.rng.randrange(0, 3072)
        self._get(
            f"/zarr/{target.zarr_id}/{path}",
            f"GET /zarr/{{id}}/{{chunk}} range, {kind}",
            headers={"Range": f"bytes={start}-{start + 1023}"},
        )

    @task(8)
    def chunk_of_draft(self) -> None:
        self._chunk("draft")

    @task(4)
    def chunk_of_version(self) -> None:
        self._chunk("version")

    @task(2)
    def archive_detail(self) -> None:
        self._get(f"/api/zarr/{self._target().zarr_id}/", "GET /api/zarr/{id}/")

    @task(2)
    def listing(self) -> None:
        self._get(f"/api/zarr/{self._target().zarr_id}/files/", "GET /api/zarr/{id}/files/")

    @task(1)
    def directory_index(self) -> None:
        target = self._target()
        row = self.rng.choice(target.paths).split("/", 1)[0]
        self._get(
            f"/zarr/{target.zarr_id}/{row}/",
            "GET /zarr/{id}/{dir}/ index",
            headers={"Accept": "application/json"},
        )

    @task(1)
    def manifest(self) -> None:
        self._get(
            f"/api/zarr/{self._target().zarr_id}/manifest.json", "GET /api/zarr/{id}/manifest.json"
        )

    @task(1)
    def archive_page(self) -> None:
        self._get(f"/archives/{self._target('draft').zarr_id}/", "GET /archives/{id}/ page")


# The rows the table adds to Locust's own: every read together, every request of the uploaders'
# clients together (Locust's "Aggregated" mixes both, and whole uploads).
TOTALS = {"read: all reads": "read: ", "upload: all client requests": "upload: "}
_environment: list[Environment] = []


def _row(entry: StatsEntry) -> dict[str, Any]:
    return {
        "type": entry.method or "",
        "name": entry.name,
        "requests": entry.num_requests,
        "failures": entry.num_failures,
        "p50_ms": entry.get_response_time_percentile(0.5) if entry.num_requests else 0,
        "p99_ms": entry.get_response_time_percentile(0.99) if entry.num_requests else 0,
        "per_second": entry.total_rps,
    }


@events.init.add_listener
def _keep_environment(environment: Environment, **_: Any) -> None:
    _environment.append(environment)


@events.quit.add_listener
def _write_stats(**_: Any) -> None:
    """The final figures, once every user has stopped (their last uploads ended: Locust's
    ``quitting`` event and its CSV files come before that), to ``LOAD_STATS``."""
    stats = _environment[0].stats
    rows = [_row(entry) for entry in stats.entries.values()]
    for name, prefix in TOTALS.items():
        total = StatsEntry(stats, name, "", use_response_times_cache=False)
        for entry in stats.entries.values():
            if entry.name.startswith(prefix) and not entry.name.startswith("upload: whole"):
                total.extend(entry)
        if total.num_requests:
            rows.append(_row(total))
    rows.append(_row(stats.total))
    errors = [
        {"name": e.name, "error": str(e.error), "occurrences": e.occurrences}
        for e in stats.errors.values()
    ]
    Path(os.environ["LOAD_STATS"]).write_text(json.dumps({"rows": rows, "errors": errors}))
