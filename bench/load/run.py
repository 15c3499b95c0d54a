"""The load test's driver: the production shape (``tests.support.production``: PostgreSQL, a
Redis, SeaweedFS, gunicorn with the production config, Celery workers and beat), its users and
seed data, one or more Locust runs against it (``bench.load.locustfile``, Locust's own
process), optionally a Celery worker and a web worker SIGKILLed mid-run, then the checks: every
archive's checksum equals the one its client computed locally, and ``audit_zarr`` finds no
drift. ``bench.bench_load`` prints it; ``tests/production/test_load_live.py`` asserts it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import requests

from bench.load.cpu import CpuSampler, where_the_time_goes
from bench.load.figures import Checks, LoadConfig, PhaseReport, load_average, read_stats
from bench.load.plan import Plan, ReadTarget, UploaderPlan
from bench.load.sources import ArraySource
from bench.s3_env import busy_cpu_seconds, tool
from dandizarr.client import DandizarrClient
from tests.support.production import Production
from tests.support.proxy import NginxProxy
from tests.support.seaweedfs import SeaweedS3

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
# Longest the checks wait for every archive's checksum after a run (a killed worker's tree
# update is requeued by beat: DANDIZARR_STALLED_UPDATE_SECONDS + DANDIZARR_RESUME_INTERVAL_SECONDS).
DRAIN_SECONDS = 300.0


class Stack:
    """The production shape with the load test's users, owners' dandisets and seed data."""

    def __init__(self, base: Path, server_database_url: str, config: LoadConfig) -> None:
        self.base = base
        self.config = config
        self.s3 = SeaweedS3(base / "seaweedfs")
        self.deployment = Production(
            base / "deployment",
            server_database_url,
            self.s3,
            f"load-{uuid.uuid4().hex[:8]}",
            web_workers=config.web_workers,
            read_web_workers=config.read_web_workers,
            celery_workers=config.celery_workers,
            extra_env={
                # Every reader comes from 127.0.0.1: the per-address limits of expensive reads
                # would answer most of them 429 (the throttle is not what is measured).
                "DANDIZARR_THROTTLE_ANON": "10000000/min",
                "DANDIZARR_THROTTLE_USER": "10000000/min",
            },
        )
        # The web workers share the throttles' counts and cached previews (docs/deploying.md).
        self.deployment.extra_env["DANDIZARR_CACHE_URL"] = (
            self.deployment.redis.url.rsplit("/", 1)[0] + "/1"
        )
        self.uploaders: list[UploaderPlan] = []
        self.targets: list[ReadTarget] = []
        self.results = base / "uploads.jsonl"
        self.proxy: NginxProxy | None = None

    @property
    def url(self) -> str:
        """Where everyone's requests go: the proxy when there is one, else gunicorn."""
        return self.proxy.url if self.proxy is not None else self.deployment.url

    def start(self) -> None:
        # Object versions on (published versions need them), CORS: as deploying.md says; the
        # owners made with ``manage.py users``. One Django process, while the service starts.
        tokens = self.base / "tokens"
        tokens.mkdir(exist_ok=True)
        self.deployment.commands = [["ensure_bucket"]]
        for n in range(self.config.owners):
            self.deployment.commands += [
                ["users", "add", f"owner{n}"],
                ["users", "token", "issue", f"owner{n}", "--file", str(tokens / f"owner{n}")],
            ]
        self.deployment.start()
        if self.config.proxy:
            reads = self.deployment.reads_url or self.deployment.url
            self.proxy = NginxProxy(
                self.base / "nginx",
                self.deployment.url.removeprefix("http://"),
                reads.removeprefix("http://"),
            )
            self.proxy.start()
        self._users(tokens)
        self._seed()

    def stop(self) -> None:
        try:
            if self.proxy is not None:
                self.proxy.stop()
            self.deployment.stop()
        finally:
            self.s3.stop()

    def _users(self, tokens: Path) -> None:
        """Each owner creates a dandiset of their own (its owner); uploaders round-robin over
        them, half of them packed."""
        owners = []
        for n in range(self.config.owners):
            token = (tokens / f"owner{n}").read_text().strip()
            with DandizarrClient(self.deployment.url, token) as client:
                owners.append((token, client.create_dandiset(f"load owner{n}")["identifier"]))
        for number in range(self.config.uploaders):
            token, dandiset = owners[number % len(owners)]
            pack = number % 2 == 1
            name = f"uploader{number}-{'packed' if pack else 'loose'}"
            root = self.base / "sources" / name
            self.uploaders.append(UploaderPlan(token, dandiset, name, str(root), pack))

    def _seed(self) -> None:
        """Two archives (loose, packed) uploaded, published, then grown as drafts: readers read
        the published versions and the drafts. The two archives' uploads run at once."""
        url, token = self.deployment.url, self.deployment.token
        with DandizarrClient(url, token) as client:
            dandiset = client.create_dandiset("load readers")["identifier"]

        def upload(source: ArraySource) -> str:
            pack = source.root.name.endswith("packed")
            with DandizarrClient(url, token) as client:
                result = client.upload(
                    source.root, dandiset=dandiset, name=source.root.name, pack=pack
                )
            if not result.ok:
                raise RuntimeError(f"seeding {source.root.name} did not verify: {result.to_json()}")
            return result.zarr_id

        def first(pack: bool) -> tuple[str, ArraySource, random.Random]:
            name = f"seed-{'packed' if pack else 'loose'}"
            source = ArraySource(self.base / "sources" / name)
            rng = random.Random(self.config.seed * 2 + pack)
            source.grow(rng, self.config.seed_files, 0)
            zarr_id = upload(source)
            with DandizarrClient(url, token) as client:
                client.request(
                    "POST",
                    f"/api/dandisets/{dandiset}/versions/draft/assets/",
                    json={"path": f"{name}.zarr", "zarr_id": zarr_id, "metadata": {}},
                    expect=(201,),
                )
            return zarr_id, source, rng

        def grown(seeded: tuple[str, ArraySource, random.Random]) -> list[ReadTarget]:
            zarr_id, source, rng = seeded
            with DandizarrClient(url, token) as client:
                versions = client.get_json(f"/api/zarr/{zarr_id}/versions/")["results"]
            published = ReadTarget(versions[-1]["zarr_id"], "version", source.paths())
            source.grow(rng, self.config.seed_files // 4, 16)
            if upload(source) != zarr_id:
                raise RuntimeError(f"growing {zarr_id} uploaded into another archive")
            return [published, ReadTarget(zarr_id, "draft", source.paths())]

        with ThreadPoolExecutor(2) as pool:
            seeded = list(pool.map(first, (False, True)))
            with DandizarrClient(url, token) as client:
                client.request(
                    "POST", f"/api/dandisets/{dandiset}/versions/draft/publish/", expect=(201,)
                )
            for targets in pool.map(grown, seeded):
                self.targets += targets

    # --- a run -------------------------------------------------------------------------------

    def run(
        self, label: str, config: LoadConfig, *, kill: bool = False, profile: bool = False
    ) -> PhaseReport:
        """One Locust run of ``config``; with ``kill``, a Celery worker and a web worker are
        SIGKILLed halfway through (gunicorn starts a new web worker; the Celery worker is
        started again 5 s later, as a supervisor would); with ``profile``, py-spy samples a web
        worker for the middle third of the run (``PhaseReport.profile``)."""
        out = self.base / f"locust-{label}"
        out.mkdir(exist_ok=True)
        plan = Plan(
            url=self.url,
            uploaders=self.uploaders[: config.uploaders],
            targets=self.targets,
            reader_rate=config.reader_rate,
            results=str(self.results),
            seed=config.seed,
        )
        plan.write(out / "plan.json")
        results_before = _lines(self.results)
        users = config.uploaders + config.readers
        argv = [
            sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
            "-u", str(users), "-r", str(users), "-t", f"{config.seconds}s",
            "--host", self.url,
            # Uploads under way at the end finish (their checksums are checked after).
            "--stop-timeout", "600", "--only-summary", "--loglevel", "WARNING",
        ]  # fmt: skip
        env = {
            **os.environ,
            "LOAD_PLAN": str(out / "plan.json"),
            "LOAD_STATS": str(out / "stats.json"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        load_before = load_average()
        busy = busy_cpu_seconds()
        started = time.monotonic()
        with open(out / "locust.log", "wb") as log:
            locust = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            sampler = CpuSampler(self, locust.pid)
            sampler.start()
            kills: list[str] = []
            profiled: list[str] = []
            profiler = threading.Thread(
                target=self._profile_web,
                args=(config.seconds / 3, config.seconds / 3, out, profiled),
                daemon=True,
            )
            if profile:
                profiler.start()
            if kill:
                killer = threading.Thread(
                    target=self._kill_midway, args=(config.seconds / 2, kills), daemon=True
                )
                killer.start()
            try:
                locust.wait(config.seconds + 900)
            finally:
                if locust.poll() is None:
                    locust.kill()
                sampler.stop()
                if profile:
                    # py-spy lags behind its duration on a loaded machine.
                    profiler.join(300)
        wall = time.monotonic() - started
        machine_busy = busy_cpu_seconds() - busy
        rows, failures = read_stats(out / "stats.json")
        uploads = [json.loads(line) for line in _lines(self.results)[len(results_before) :]]
        if not rows:
            raise RuntimeError(f"Locust wrote no stats; see {out / 'locust.log'}")
        return PhaseReport(
            label, config, rows, failures, kills, sampler.totals(), wall, machine_busy,
            load_before, load_average(), len(uploads),
            sum(1 for u in uploads if not u.get("ok")), "".join(profiled),
        )  # fmt: skip

    def _profile_web(self, after: float, seconds: float, out: Path, into: list[str]) -> None:
        spy = tool("py-spy")
        web = self.deployment.web_worker_pids()
        if spy is None or not web:
            into.append("py-spy: not installed (make bench-tools)" if spy is None else "")
            return
        time.sleep(after)
        raw = out / "web-worker.pyspy.txt"
        done = subprocess.run(
            [spy, "record", "-p", str(web[0]), "-d", str(int(seconds)), "-r", "50", "-f", "raw",
             "-o", str(raw), "--nonblocking"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0 or not raw.exists():
            into.append(f"py-spy failed: {done.stderr[-500:]}")
            return
        into.append(where_the_time_goes(raw, f"web worker {web[0]}, {seconds:.0f} s"))

    def _kill_midway(self, after: float, kills: list[str]) -> None:
        time.sleep(after)
        web = self.deployment.web_worker_pids()
        if web:
            os.kill(web[0], signal.SIGKILL)
            kills.append(f"web worker {web[0]} SIGKILL at {after:.0f} s")
        worker = self.deployment.workers[0]
        old = worker.pid
        worker.kill()
        kills.append(f"Celery worker {old} SIGKILL at {after:.0f} s")
        time.sleep(5)
        worker.start()
        kills.append(f"Celery worker started again ({worker.pid}) at {after + 5:.0f} s")

    # --- the checks --------------------------------------------------------------------------

    def check(self) -> Checks:
        """Each uploader archive's checksum (once complete) against the checksum its client
        computed in its last upload, then ``audit_zarr --report-only`` over every archive."""
        # The audit's process starts now: its Django import overlaps the wait for checksums.
        audit = self.deployment.manage_later("audit_zarr", "--report-only")
        last: dict[str, dict[str, object]] = {}
        for line in _lines(self.results):
            answer = json.loads(line)
            if answer.get("zarr_id"):
                last[str(answer["zarr_id"])] = answer
        checks = Checks(archives=len(last))
        session = requests.Session()
        session.headers["Authorization"] = f"Token {self.deployment.token}"
        deadline = time.monotonic() + DRAIN_SECONDS
        for zarr_id, answer in last.items():
            while True:
                detail = session.get(f"{self.deployment.url}/api/zarr/{zarr_id}/", timeout=60)
                detail.raise_for_status()
                body = detail.json()
                if body["checksum_status"] == "complete" and not body["upload_in_progress"]:
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            local = answer.get("local_checksum") or answer.get("expected_checksum")
            if not answer.get("ok") or body["checksum"] != local:
                checks.mismatched.append(
                    f"{answer.get('name')} {zarr_id}: server {body['checksum']} "
                    f"({body['checksum_status']}), client {local}, last upload ok "
                    f"{answer.get('ok')} {answer.get('error', '')}"
                )
        checks.audit = audit()
        checks.audit_clean = (
            "\n0 archive(s) had drift" in "\n" + checks.audit
            and "0 unreferenced archive(s) in storage" in checks.audit
        )
        return checks


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@contextmanager
def stack(base: Path, server_database_url: str, config: LoadConfig) -> Iterator[Stack]:
    """The stack started (a fresh database of its own), stopped on the way out."""
    started = Stack(base, server_database_url, config)
    try:
        started.start()
        yield started
    except BaseException:
        print(started.deployment.logs_tail(), file=sys.stderr)
        raise
    finally:
        started.stop()
