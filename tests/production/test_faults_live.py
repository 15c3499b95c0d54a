"""Issue #16: the production shape under faults.

gunicorn (3 workers), two Celery workers and beat, on PostgreSQL, a Redis and a SeaweedFS of the
test's own. Client threads run random batches on several archives (new files, overwrites,
corrupt uploads, cancels after partial PUTs, deletes, concurrent starts) while Celery workers
are SIGKILLed and restarted every few seconds, gunicorn workers are SIGKILLed twice, the broker
is lost once (killed, restarted empty), the service's database connections are cut once and
the S3 server is stopped for ten seconds.

The clients keep a model of each archive from their own point of view: a batch whose complete
answered 200 adds its files, a cancel removes what it overwrote, a delete removes its paths;
an answer that never came (a killed worker, a 503) is resolved by asking the API afterwards.
After a bounded drain every archive's checksum equals ``compute_tree`` over its model, storage
holds exactly the model's objects, every ``.checksum`` agrees, the audit finds no drift, and
no request was answered with a 5xx other than 503 (which must carry Retry-After).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from dandizarr.checksums import DirectoryListing, compute_tree, decode_checksum_file
from tests.support.ci import needs
from tests.support.processes import Processes
from tests.support.production import Production, production, terminate_connections, tools_missing
from tests.support.seaweedfs import SeaweedS3

pytestmark = needs(tools_missing(), f"missing {tools_missing()} (CI always runs this)")

SEED = int(os.environ.get("DANDIZARR_FAULTS_SEED", "16"))
CLIENTS = 4
ARCHIVES = 3
# Files live at depth three only, so a path is never both a file and a directory.
PATHS = [f"a{i}/b{j}/c{k}" for i in range(3) for j in range(3) for k in range(6)]
CHAOS_SECONDS = 60.0
CELERY_KILL_EVERY = 4.0
S3_OUTAGE_SECONDS = 10.0
# Longest a client waits for a definite answer to one request (faults heal well within it).
ANSWER_DEADLINE = 90.0
DRAIN_DEADLINE = 90.0
# Any one request: the service's own S3 retries during the outage stay well below this.
REQUEST_TIMEOUT = 75.0


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def content_md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


class Unresolved(Exception):
    """No definite answer within ANSWER_DEADLINE."""


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    storage_refusals: Counter[int] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    seconds: Counter[str] = field(default_factory=Counter)

    def count(self, counter: str, key: Any, n: int = 1) -> None:
        with self.lock:
            getattr(self, counter)[key] += n

    def problem(self, message: str) -> None:
        with self.lock:
            self.problems.append(message)


class Api:
    """The service's REST API as a client sees it, every answer counted."""

    def __init__(self, url: str, token: str, stats: Stats) -> None:
        self.url = url
        self.headers = {"Authorization": f"Token {token}"}
        self.stats = stats
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        session: requests.Session = self._local.session
        return session

    def once(self, method: str, path: str, body: Any = None) -> requests.Response | None:
        """One attempt; None when no answer came (connection refused or cut, a timeout)."""
        try:
            response = self.session.request(
                method,
                self.url + path,
                json=body,
                headers=self.headers,
                timeout=REQUEST_TIMEOUT,
            )
        except requests.RequestException as error:
            self.stats.count("statuses", f"no answer ({type(error).__name__})")
            self._local.session = requests.Session()
            return None
        self.stats.count("statuses", str(response.status_code))
        if response.status_code >= 500:
            if response.status_code != 503:
                self.stats.problem(
                    f"{method} {path} -> {response.status_code}: {response.text[:300]}"
                )
            elif not response.headers.get("Retry-After", "").isdigit():
                self.stats.problem(f"{method} {path} -> 503 without Retry-After")
            elif "detail" not in response.json():
                self.stats.problem(f"{method} {path} -> 503 without detail")
        return response

    @staticmethod
    def pause(response: requests.Response | None, rng: random.Random) -> None:
        """Wait before the next attempt: a short part of Retry-After (these are tests)."""
        wait = 0.3
        if response is not None and response.headers.get("Retry-After", "").isdigit():
            wait = min(float(response.headers["Retry-After"]), 1.0)
        time.sleep(wait * (0.5 + rng.random()))

    def answer(
        self, method: str, path: str, body: Any = None, *, rng: random.Random
    ) -> requests.Response:
        """Repeat until a definite answer (not 503, not none); for requests safe to repeat."""
        deadline = time.monotonic() + ANSWER_DEADLINE
        while True:
            response = self.once(method, path, body)
            if response is not None and response.status_code < 500:
                return response
            if time.monotonic() > deadline:
                raise Unresolved(f"{method} {path}: no definite answer in {ANSWER_DEADLINE} s")
            self.pause(response, rng)


def storage_put(url: str, body: bytes, header_md5: str | None, stats: Stats) -> int:
    """PUT to a presigned URL until storage answers; returns its status."""
    deadline = time.monotonic() + ANSWER_DEADLINE
    headers = {"Content-MD5": header_md5} if header_md5 is not None else {}
    while True:
        try:
            response = requests.put(url, data=body, headers=headers, timeout=30)
        except requests.RequestException:
            stats.count("operations", "storage PUT without answer (retried)")
        else:
            if response.status_code < 500:
                return response.status_code
            stats.count("operations", f"storage PUT {response.status_code} (retried)")
        if time.monotonic() > deadline:
            raise Unresolved(f"PUT {url.split('?')[0]}: storage never answered")
        time.sleep(0.3)


@dataclass
class Archive:
    zarr_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    # What the archive holds, as the clients were told: path -> bytes.
    model: dict[str, bytes] = field(default_factory=dict)

    def expected_entries(self) -> list[tuple[str, int, str]]:
        return sorted((p, len(b), md5(b)) for p, b in self.model.items())


@dataclass
class Upload:
    """One path of a batch: what was declared, and what storage holds after this batch's PUTs
    (None: nothing of this batch's reached storage)."""

    declared: bytes
    # How this path is uploaded: "ok", "bad-body" (other bytes under the declared Content-MD5),
    # "no-md5" (other bytes, no Content-MD5), "wrong-md5" (declared md5 of bytes never sent).
    fault: str = "ok"
    stored: bytes | None = None


class Client:
    """One client thread's behaviour: random batches against whichever archive is free."""

    def __init__(self, api: Api, archives: list[Archive], stats: Stats, seed: int) -> None:
        self.api = api
        self.archives = archives
        self.stats = stats
        self.rng = random.Random(seed)

    def run(self, until: float) -> None:
        while time.monotonic() < until:
            archive = self._acquire()
            if archive is None:
                time.sleep(0.05)
                continue
            try:
                self.one_operation(archive)
            except Unresolved as error:
                self.stats.problem(f"{archive.zarr_id}: {error}")
                return
            except Exception as error:  # a broken client must fail the test, not hang it
                self.stats.problem(f"{archive.zarr_id}: client error {error!r}")
                raise
            finally:
                archive.lock.release()

    def _acquire(self) -> Archive | None:
        for archive in self.rng.sample(self.archives, len(self.archives)):
            if archive.lock.acquire(blocking=False):
                return archive
        return None

    def one_operation(self, archive: Archive) -> None:
        choice = self.rng.choices(
            ["upload", "corrupt", "partial-cancel", "delete", "concurrent-starts"],
            weights=[5, 2, 2, 2, 1],
        )[0]
        if choice == "delete" and not archive.model:
            choice = "upload"
        self.stats.count("operations", choice)
        if choice == "delete":
            self.delete(archive)
        elif choice == "concurrent-starts":
            self.concurrent_starts(archive)
        else:
            uploads = self.new_uploads(archive)
            if choice == "corrupt":
                corrupt = min(len(uploads), self.rng.randint(1, 2))
                for path in self.rng.sample(sorted(uploads), corrupt):
                    uploads[path].fault = self.rng.choice(["bad-body", "no-md5", "wrong-md5"])
            if not self.start(archive, uploads):
                return
            if choice == "partial-cancel":
                chosen = self.rng.sample(sorted(uploads), self.rng.randint(0, len(uploads)))
                self.put_all(archive, uploads, only=chosen)
                self.cancel(archive, uploads)
            else:
                self.put_all(archive, uploads)
                self.finish(archive, uploads)

    # --- batches ----------------------------------------------------------------------------

    def new_uploads(self, archive: Archive, paths: list[str] | None = None) -> dict[str, Upload]:
        if paths is None:
            paths = self.rng.sample(PATHS, self.rng.randint(1, 6))
        uploads = {}
        for path in paths:
            if path in archive.model and self.rng.random() < 0.1:
                data = archive.model[path]  # the same bytes again
            else:
                data = self.rng.randbytes(self.rng.choice([0, 1, 50, 700, 3000]))
            uploads[path] = Upload(data)
        return uploads

    def declaration(self, uploads: dict[str, Upload]) -> list[dict[str, str]]:
        return [{"path": p, "etag": md5(u.declared)} for p, u in uploads.items()]

    def start(self, archive: Archive, uploads: dict[str, Upload]) -> bool:
        """Open the batch; False when it could not be (nothing is left open)."""
        deadline = time.monotonic() + ANSWER_DEADLINE
        while True:
            response = self.api.once(
                "POST", f"/api/zarr/{archive.zarr_id}/upload/", self.declaration(uploads)
            )
            if response is not None and response.status_code == 200:
                for target in response.json():
                    self.urls[target["path"]] = target["upload_url"]
                return True
            if response is not None and response.status_code < 500:
                self.stats.problem(
                    f"start on {archive.zarr_id} -> {response.status_code} {response.text[:200]}"
                )
                return False
            # No answer: ask whether the batch opened; an open one nobody holds URLs for is
            # cancelled (nothing was PUT, so the archive is unchanged).
            self.stats.count("operations", "start outcome resolved by asking")
            if self.batch_open(archive):
                self.cancel(archive, {})
            if time.monotonic() > deadline:
                raise Unresolved(f"start on {archive.zarr_id}")
            self.api.pause(response, self.rng)

    @property
    def urls(self) -> dict[str, str]:
        if not hasattr(self, "_urls"):
            self._urls: dict[str, str] = {}
        return self._urls

    def batch_open(self, archive: Archive) -> bool:
        response = self.api.answer("GET", f"/api/zarr/{archive.zarr_id}/upload/", rng=self.rng)
        assert response.status_code in {204, 404}, response.text
        return response.status_code == 204

    def put_all(
        self, archive: Archive, uploads: dict[str, Upload], only: list[str] | None = None
    ) -> None:
        for path in only if only is not None else list(uploads):
            upload = uploads[path]
            url = self.urls[path]
            other = upload.declared + b"corrupt"
            if upload.fault == "bad-body":
                body, header = other, content_md5(upload.declared)
            elif upload.fault == "no-md5":
                body, header = other, None
            elif upload.fault == "wrong-md5":
                body, header = other, content_md5(other)
            else:
                body, header = upload.declared, content_md5(upload.declared)
            status = storage_put(url, body, header, self.stats)
            if status == 200:
                upload.stored = body
                if upload.fault != "ok":
                    self.stats.problem(f"storage took a corrupt PUT ({upload.fault}) of {path}")
            else:
                self.stats.count("storage_refusals", status)
                if upload.fault == "ok":
                    self.stats.problem(f"storage refused a good PUT of {path}: {status}")

    def finish(self, archive: Archive, uploads: dict[str, Upload]) -> None:
        """Complete; a batch refused as incomplete is repaired and completed, or cancelled."""
        deadline = time.monotonic() + ANSWER_DEADLINE
        while True:
            response = self.api.once("POST", f"/api/zarr/{archive.zarr_id}/upload/complete/")
            # Storage holds this batch's bytes, or (PUT refused or never made) the archive's.
            bad = sorted(
                p
                for p, u in uploads.items()
                if (u.stored if u.stored is not None else archive.model.get(p)) != u.declared
            )
            if response is None or response.status_code >= 500:
                # The outcome is unknown: the batch either stayed open or was completed.
                self.stats.count("operations", "complete outcome resolved by asking")
                if not self.batch_open(archive):
                    self._completed(archive, uploads, bad)
                    return
            elif response.status_code == 200:
                self._completed(archive, uploads, bad)
                return
            elif response.status_code == 400:
                named = set(response.json().get("missing", [])) | {
                    m["path"] for m in response.json().get("mismatched", [])
                }
                if named != set(bad):
                    self.stats.problem(f"complete named {sorted(named)}, expected {bad}")
                self.stats.count("operations", "complete refused as incomplete")
                if self.rng.random() < 0.5:
                    self.cancel(archive, uploads)
                    return
                for path in bad:
                    uploads[path].fault = "ok"
                self.put_all(archive, uploads, only=bad)
            else:
                self.stats.problem(f"complete -> {response.status_code} {response.text[:200]}")
                self.cancel(archive, uploads)
                return
            if time.monotonic() > deadline:
                raise Unresolved(f"complete on {archive.zarr_id}")
            self.api.pause(response, self.rng)

    def _completed(self, archive: Archive, uploads: dict[str, Upload], bad: list[str]) -> None:
        if bad:
            self.stats.problem(f"a batch was completed with {bad} not as declared")
        for path, upload in uploads.items():
            archive.model[path] = upload.declared
        self.stats.count("operations", "batches completed")

    def cancel(self, archive: Archive, uploads: dict[str, Upload]) -> None:
        """Cancel the open batch; what it overwrote leaves the archive."""
        while True:
            response = self.api.once("DELETE", f"/api/zarr/{archive.zarr_id}/upload/")
            if response is not None and response.status_code == 204:
                break
            if response is not None and response.status_code < 500:
                self.stats.problem(f"cancel -> {response.status_code} {response.text[:200]}")
                return
            self.stats.count("operations", "cancel outcome resolved by asking")
            if not self.batch_open(archive):
                break
            self.api.pause(response, self.rng)
        self.stats.count("operations", "batches cancelled")
        for path, upload in uploads.items():
            if upload.stored is None:
                continue  # storage still holds what it held
            if archive.model.get(path) != upload.stored:
                archive.model.pop(path, None)

    def delete(self, archive: Archive) -> None:
        count = min(len(archive.model), self.rng.randint(1, 4))
        paths = self.rng.sample(sorted(archive.model), count)
        body = [{"path": p} for p in paths]
        url = f"/api/zarr/{archive.zarr_id}/files/"
        deadline = time.monotonic() + ANSWER_DEADLINE
        response = self.api.once("DELETE", url, body)
        repeated = False
        while response is None or response.status_code >= 500:
            # Unknown: repeat it; a 404 naming every path then says an earlier one was applied.
            self.stats.count("operations", "delete outcome resolved by repeating")
            if time.monotonic() > deadline:
                raise Unresolved(f"delete on {archive.zarr_id}")
            self.api.pause(response, self.rng)
            repeated = True
            response = self.api.once("DELETE", url, body)
        missing = set(response.json().get("missing", [])) if response.status_code == 404 else None
        if response.status_code != 204 and not (repeated and missing == set(paths)):
            self.stats.problem(f"delete -> {response.status_code} {response.text[:200]}")
            return
        for path in paths:
            archive.model.pop(path, None)

    def concurrent_starts(self, archive: Archive) -> None:
        """Three clients start a batch on one archive at once: one may win, the others get 409."""
        contenders = [self.new_uploads(archive) for _ in range(3)]
        answers: list[requests.Response | None] = [None] * 3
        barrier = threading.Barrier(3)

        def contend(i: int) -> None:
            barrier.wait()
            answers[i] = self.api.once(
                "POST", f"/api/zarr/{archive.zarr_id}/upload/", self.declaration(contenders[i])
            )

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [i for i, r in enumerate(answers) if r is not None and r.status_code == 200]
        refused = [r for r in answers if r is not None and r.status_code == 409]
        self.stats.count("operations", "concurrent starts refused with 409", len(refused))
        if len(winners) > 1:
            self.stats.problem(f"{len(winners)} concurrent starts on one archive all succeeded")
        if len(winners) == 1:
            uploads = contenders[winners[0]]
            response = answers[winners[0]]
            assert response is not None
            for target in response.json():
                self.urls[target["path"]] = target["upload_url"]
            self.put_all(archive, uploads)
            self.finish(archive, uploads)
        elif self.batch_open(archive):
            # A start whose answer was lost opened it: no URLs, nothing PUT; cancel it.
            self.cancel(archive, {})


# --- faults ---------------------------------------------------------------------------------


class Faults:
    """The fault schedule, run beside the clients; every fault counted."""

    def __init__(
        self, deployment: Production, s3: SeaweedS3, stats: Stats, server_database_url: str
    ) -> None:
        self.deployment = deployment
        self.s3 = s3
        self.stats = stats
        self.server_database_url = server_database_url
        self.stop = threading.Event()
        self.broker_down = threading.Event()
        self.broker_back = threading.Event()

    def celery_killer(self, rng: random.Random) -> None:
        """SIGKILL a Celery worker every few seconds, alternately, and start it again."""
        turn = 0
        while not self.stop.wait(CELERY_KILL_EVERY * (0.75 + rng.random() / 2)):
            worker = self.deployment.workers[turn % len(self.deployment.workers)]
            turn += 1
            worker.kill()
            self.stats.count("faults", "celery worker SIGKILLed")
            worker.start()

    def kill_web_worker(self, rng: random.Random) -> None:
        pids = self.deployment.web_worker_pids()
        assert pids, "gunicorn has no workers"
        os.kill(rng.choice(pids), 9)
        self.stats.count("faults", "gunicorn worker SIGKILLed")

    def lose_broker(self, during: Callable[[], None]) -> None:
        """SIGKILL Redis (no persistence), run ``during``, start it again empty."""
        self.deployment.redis.kill()
        self.stats.count("faults", "broker lost (Redis SIGKILLed, restarted empty)")
        during()
        time.sleep(2)
        self.deployment.redis.start()

    def cut_database(self) -> None:
        cut = terminate_connections(self.server_database_url, self.deployment.database_name)
        self.stats.count("faults", "database connections cut (pg_terminate_backend)")
        self.stats.count("faults", "  connections terminated", cut)

    def storage_outage(self) -> None:
        self.s3.stop()
        self.stats.count("faults", f"S3 server stopped for {S3_OUTAGE_SECONDS:.0f} s")
        time.sleep(S3_OUTAGE_SECONDS)
        self.s3.start()


# --- checks ---------------------------------------------------------------------------------


def wait_drained(api: Api, archives: list[Archive], rng: random.Random) -> float:
    """Seconds until every archive's tree is complete with no batch open (bounded)."""
    started = time.monotonic()
    waiting = list(archives)
    while waiting:
        archive = waiting[0]
        response = api.answer("GET", f"/api/zarr/{archive.zarr_id}/", rng=rng)
        detail = response.json()
        if detail["checksum_status"] == "complete" and not detail["upload_in_progress"]:
            waiting.pop(0)
            continue
        if time.monotonic() - started > DRAIN_DEADLINE:
            raise AssertionError(f"not drained within {DRAIN_DEADLINE} s: {detail}")
        time.sleep(0.3)
    return time.monotonic() - started


def check_archive(api: Api, archive: Archive, s3: Any, bucket: str, rng: random.Random) -> None:
    """The archive's checksum, storage and every .checksum against an independent
    recomputation from the client's model."""
    expected_dirs: dict[str, DirectoryListing] = {}
    summary = compute_tree(
        archive.expected_entries(),
        on_directory=lambda d, listing: expected_dirs.__setitem__(d, listing),
    )
    detail = api.answer("GET", f"/api/zarr/{archive.zarr_id}/", rng=rng).json()
    assert (detail["checksum"], detail["file_count"], detail["size"]) == (
        summary.digest,
        summary.count,
        summary.size,
    ), f"{archive.zarr_id}: the service's checksum differs from the clients' model"

    stored = {
        key[len(f"zarr/{archive.zarr_id}/") :]: (size, etag)
        for key, size, etag in list_bucket(s3, bucket, f"zarr/{archive.zarr_id}/")
    }
    expected = {p: (size, digest) for p, size, digest in archive.expected_entries()}
    other_bytes = sorted(p for p in stored.keys() & expected.keys() if stored[p] != expected[p])
    assert stored == expected, (
        f"{archive.zarr_id}: storage differs from the model: orphans "
        f"{sorted(stored.keys() - expected.keys())}, missing {sorted(expected.keys() - stored)}, "
        f"other bytes {other_bytes}"
    )

    prefix = f"zarr_checksums/{archive.zarr_id}/"
    listings = {}
    for key, _, _ in list_bucket(s3, bucket, prefix):
        relative = key[len(prefix) :]
        assert relative.endswith(".checksum"), key
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        listings[relative[: -len(".checksum")].rstrip("/")] = decode_checksum_file(body)
    if summary.count == 0:
        assert listings == {}, f"{archive.zarr_id}: an empty archive keeps {sorted(listings)}"
    else:
        assert sorted(listings) == sorted(expected_dirs), f"{archive.zarr_id}: .checksum files"
        for directory, listing in expected_dirs.items():
            assert listings[directory] == listing, f"{archive.zarr_id}: .checksum of {directory!r}"


def list_bucket(s3: Any, bucket: str, prefix: str = "") -> Iterator[tuple[str, int, str]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            yield item["Key"], item["Size"], item["ETag"].strip('"')


# --- the test -------------------------------------------------------------------------------


@pytest.mark.timeout(360)
def test_production_shape_under_faults(processes: Processes, tmp_path: Path) -> None:
    # processes: the production shape (tests.support.production) runs as processes.
    server_database_url = os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    rng = random.Random(SEED)
    stats = Stats()
    setup_started = time.monotonic()
    s3 = SeaweedS3(tmp_path / "seaweedfs")
    bucket = f"faults-{uuid.uuid4().hex[:12]}"
    try:
        with production(
            tmp_path / "deployment",
            server_database_url,
            s3,
            bucket,
            # A short beat schedule: lost tree updates are found after 4 s, every 2 s.
            DANDIZARR_RESUME_INTERVAL_SECONDS="2",
            DANDIZARR_STALLED_UPDATE_SECONDS="4",
            # A message of a SIGKILLed worker is redelivered after this long.
            DANDIZARR_CELERY_VISIBILITY_TIMEOUT="10",
        ) as deployment:
            try:
                stats.count("seconds", "setup", time.monotonic() - setup_started)
                run_under_faults(deployment, s3, bucket, stats, rng, server_database_url)
            except BaseException:
                print(deployment.logs_tail())
                raise
    finally:
        s3.stop()


def run_under_faults(
    deployment: Production,
    s3: SeaweedS3,
    bucket: str,
    stats: Stats,
    rng: random.Random,
    server_database_url: str,
) -> None:
    api = Api(deployment.url, deployment.token, stats)
    dandiset = api.answer("POST", "/api/dandisets/", {"name": "faults"}, rng=rng).json()
    archives = []
    for number in range(ARCHIVES + 1):
        response = api.answer(
            "POST",
            "/api/zarr/",
            {"name": f"a{number}.zarr", "dandiset": dandiset["identifier"]},
            rng=rng,
        )
        assert response.status_code == 201, response.text
        archives.append(Archive(response.json()["zarr_id"]))
    # The last archive is the fault schedule's own: one batch completed while the broker is
    # down and nothing after it, so only beat's resume task can bring its tree up to date.
    quiet, busy = archives[-1], archives[:-1]
    quiet_client = Client(api, [quiet], stats, SEED + 100)

    def complete_while_broker_down() -> None:
        with quiet.lock:
            uploads = quiet_client.new_uploads(quiet, ["a0/b0/c0", "a1/b1/c1"])
            assert quiet_client.start(quiet, uploads)
            quiet_client.put_all(quiet, uploads)
            # Its update cannot be queued; the batch is committed all the same.
            response = api.once("POST", f"/api/zarr/{quiet.zarr_id}/upload/complete/")
            assert response is not None and response.status_code == 200, response and response.text
            quiet_client._completed(quiet, uploads, [])

    faults = Faults(deployment, s3, stats, server_database_url)
    started = time.monotonic()
    until = started + CHAOS_SECONDS
    clients = [Client(api, busy, stats, SEED + i) for i in range(CLIENTS)]
    threads = [threading.Thread(target=c.run, args=(until,), daemon=True) for c in clients]
    killer = threading.Thread(target=faults.celery_killer, args=(random.Random(SEED),))
    for thread in [*threads, killer]:
        thread.start()

    schedule: list[tuple[float, Callable[[], None]]] = [
        (6, lambda: faults.kill_web_worker(rng)),
        (12, lambda: faults.lose_broker(complete_while_broker_down)),
        (22, faults.cut_database),
        (28, lambda: faults.kill_web_worker(rng)),
        (34, faults.storage_outage),
    ]
    for at, fault in schedule:
        time.sleep(max(0.0, started + at - time.monotonic()))
        fault()
    for thread in threads:
        thread.join(timeout=until - time.monotonic() + 2 * ANSWER_DEADLINE)
        assert not thread.is_alive(), "a client never finished its operation"
    chaos_seconds = time.monotonic() - started
    faults.stop.set()
    killer.join()
    for worker in deployment.workers:
        if not worker.running():
            worker.start()
    deployment.wait_for_web()

    drain_seconds = wait_drained(api, archives, rng)
    checks_started = time.monotonic()
    s3_client = s3.client()
    for archive in archives:
        check_archive(api, archive, s3_client, bucket, rng)
    known = {a.zarr_id for a in archives}
    strays = [
        key
        for key, _, _ in list_bucket(s3_client, bucket)
        if key.split("/")[0] not in {"zarr", "zarr_checksums"} or key.split("/")[1] not in known
    ]
    assert strays == [], f"objects outside every archive: {strays[:10]}"
    audit = deployment.manage("audit_zarr")
    assert audit.strip().splitlines()[-2:] == [
        "0 archive(s) had drift",
        "0 unreferenced archive(s) in storage",
    ], audit

    summary = {
        "operations": dict(stats.operations),
        "faults": dict(stats.faults),
        "responses": dict(stats.statuses),
        "storage refusals of corrupt PUTs": dict(stats.storage_refusals),
        "files per archive": [len(a.model) for a in archives],
        "seconds": {
            "setup": round(stats.seconds["setup"], 1),
            "chaos": round(chaos_seconds, 1),
            "drain": round(drain_seconds, 1),
            "checks": round(time.monotonic() - checks_started, 1),
        },
    }
    print("\nproduction under faults:", json.dumps(summary, indent=1, sort_keys=True))
    assert stats.problems == [], stats.problems
    # Not a speed test: only that the clients and the faults really ran (a loaded machine
    # completes a few dozen batches in the time).
    assert stats.operations["batches completed"] >= 5, summary
    assert stats.faults["celery worker SIGKILLed"] >= 5, summary
