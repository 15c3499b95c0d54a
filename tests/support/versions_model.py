"""A model of one archive's draft and published versions, and a seeded random walk over the
service's API checking, after every step, that the draft and every version read exactly as
the model says (docs/versions.md, "Why a version never changes").

Steps: uploads (new and overwriting paths, nested and odd names), deletes, cancelled uploads,
pack batches, conversion into shards (``POST pack/``), publishes, resets to any version,
compaction, garbage collection (the harness runs it with no undelete window) and the release
of the (embargoed) dandiset. Checks, through every reader the harness gives (each web process
of a deployment): the checksum, the recursive listing, the DANDI listing, the tree digest of
every directory any state has, the ``/zarr/`` root index, the manifest's entries, and every
file's bytes through ``/zarr/{id}/...`` (404 where the state has none), and that strangers see
nothing while the dandiset is private.

The walk is ``random.Random(seed)``: a failure names the seed and the steps that led to it.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from dandizarr.client.store import ArchiveStore
from dandizarr.sharding.archive_packing import build_shard
from dandizarr_server.zarr_api.domain.keys import session_prefix
from dandizarr_server.zarr_api.models import Shard, WriteSession, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store
from dandizarr_server.zarr_api.services.compaction import shard_compact
from dandizarr_server.zarr_api.services.garbage import archive_garbage_collect
from dandizarr_server.zarr_api.services.session_cleanup import write_sessions_sweep
from tests.support.api import let_upload_urls_expire, md5, put
from tests.support.dandi import DANDI_NEWEST, DandiService, api_key_env, tree_of
from tests.support.model_api import Answer, Api
from tests.support.session_model import SessionHarness, SessionRules, clashes
from tests.support.version_reads import ancestors_of, assert_reads_as, ok

# No path is a directory of another, so every batch is valid as far as paths go.
PATHS = [
    "top",
    "a/x",
    "a/b/c.bin",
    "e/f/g",
    "deep/1/2/3/leaf",
    "caf\u00e9/na\u00efve \u00fc",
    "odd/a b+c=%41",
    "img/.zarray",
    "img/0.0",
    "img/0.1",
    "img/1.0",
    "img/1.1",
]
# A Zarr v2 array whose chunk files ``POST pack/`` packs into shards.
ZARRAY = json.dumps(
    {
        "zarr_format": 2,
        "shape": [4, 4],
        "chunks": [2, 2],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
).encode()
CONTENTS = [b"", b"one", b"two", b"three" * 50, bytes(range(256))]


@dataclass
class Harness:
    """What differs between the shapes the walk runs in."""

    writer: Api
    readers: list[Api]
    anonymous: Api
    collect_garbage: Callable[[str], None]  # zarr_id: every unreferenced object goes now
    compact: Callable[[str], None]  # zarr_id: every live shard rewritten
    # The upload URLs' lifetime passes (rows aged): every ended batch is reconciled with
    # storage, which then must agree with the draft (on S3; nothing to do on the local store).
    expire_upload_urls: Callable[[], None]
    # Until ``ready()`` is true (a deployment's workers apply changes in the background).
    wait: Callable[[Callable[[], bool], str], None]
    # Write sessions' rules join the walk's (tests/support/session_model.py) when given.
    sessions: SessionHarness | None = None


@dataclass
class Published:
    number: int
    zarr_id: str
    dandiset_version: str
    files: dict[str, bytes]


@dataclass
class Model:
    draft: dict[str, bytes] = field(default_factory=dict)
    versions: list[Published] = field(default_factory=list)
    private: bool = True


class VersionsWalk:
    def __init__(
        self,
        harness: Harness,
        seed: int,
        *,
        max_versions: int = 6,
        log: Callable[[str], None],
        session_weight: int = 1,
    ) -> None:
        self.h = harness
        self.seed = seed
        self.rng = random.Random(seed)
        self.max_versions = max_versions
        self.log = log
        self.model = Model()
        self.steps: list[str] = []
        self.count = 0
        self.ran: set[str] = set()  # the rules drawn so far, by name
        self.left = 0  # the steps ``run`` has still to take
        self.fell_back = False  # the rule drawn gave way to another (``instead``)
        self.sessions = (
            SessionRules(self, harness.sessions, PATHS, session_weight)
            if harness.sessions is not None
            else None
        )
        created = self._post("/api/dandisets/?embargo=true", {"name": f"versions model {seed}"})
        self.dandiset = str(created.json()["identifier"])
        archive = {"name": "model.zarr", "dandiset": self.dandiset, "layout": "sharded"}
        self.zarr_id = str(self._post("/api/zarr/", archive).json()["zarr_id"])
        assets = f"/api/dandisets/{self.dandiset}/versions/draft/assets/"
        self._post(assets, {"path": "model.zarr", "zarr_id": self.zarr_id})

    # --- driving ---------------------------------------------------------------------------

    def run(self, steps: int) -> Model:
        """``steps`` rules drawn by weight; a walk long enough to run every rule once runs each
        (the last steps go to the rules not yet drawn), and says so: a rare rule that never
        runs would prove nothing while the walk passed."""
        self.log(f"versions model walk: seed {self.seed}, {steps} steps, archive {self.zarr_id}")
        self.left = steps
        for _ in range(steps):
            self.step()
            self.left -= 1
        rules = {_name(rule) for _, rule in self.rules()}
        if steps >= len(rules):
            assert rules <= self.ran, f"rules that never ran: {sorted(rules - self.ran)}"
        return self.model

    def instead(self, rule: Callable[[], str]) -> str:
        """Another rule in the place of the one drawn, which cannot act in this state (that
        one has not run)."""
        self.fell_back = True
        return rule()

    def rules(self) -> list[tuple[int, Callable[[], str]]]:
        return [
            (6, self.upload),
            (3, self.delete),
            (1, self.cancel),
            (2, self.pack),
            (1, self.convert),
            (3, self.publish),
            (3, self.reset),
            (1, self.compact),
            (1, self.collect_garbage),
            (1, self.unembargo),
            (1, self.expire_upload_urls),
            *(self.sessions.rules() if self.sessions is not None else []),
        ]

    def step(self) -> None:
        rules = self.rules()
        unseen = [(w, r) for w, r in rules if _name(r) not in self.ran]
        if unseen and self.left <= 2 * len(unseen):
            # Few steps left for the rules that never ran: those (twice as many steps as them,
            # as one may have to give way to another first: a delete of an empty draft).
            rules = unseen
        rule = self.rng.choices([r for _, r in rules], weights=[w for w, _ in rules])[0]
        self.count += 1
        self.fell_back = False
        try:
            self.steps.append(f"{self.count}: {rule()}")
            if not self.fell_back:
                self.ran.add(_name(rule))
            self.log(f"  step {self.steps[-1]}")
            self.check()
        except AssertionError as error:
            history = "\n  ".join(self.steps[-12:])
            raise AssertionError(
                f"versions model, seed {self.seed}, step {self.count}; last steps:\n  {history}"
                f"\n{error}"
            ) from error

    # --- rules -----------------------------------------------------------------------------

    def draw_files(
        self, most: int, paths: list[str] = PATHS, *, clear: bool = True
    ) -> dict[str, bytes]:
        if clear:  # of the draft's files and directories (a session may have committed "e/f")
            paths = [p for p in paths if not clashes(p, self.model.draft)]
        chosen = self.rng.sample(paths, self.rng.randint(1, min(most, len(paths))))
        fresh = f"step {self.count}".encode()
        return {
            p: ZARRAY if p == "img/.zarray" else self.rng.choice([*CONTENTS, fresh]) for p in chosen
        }

    def describe(self, files: dict[str, bytes]) -> str:
        return ", ".join(f"{p}={md5(b)[:6]}" for p, b in sorted(files.items()))

    def upload(self) -> str:
        files = self.draw_files(4)
        urls = self._start(files)
        for path, body in files.items():
            _put(urls[path], body)
        self._post(f"/api/zarr/{self.zarr_id}/upload/complete/")
        self.settle()
        self.model.draft.update(files)
        self._changed(files)
        return f"upload {self.describe(files)}"

    def delete(self) -> str:
        if not self.model.draft:
            return self.instead(self.upload)
        paths = self.rng.sample(
            sorted(self.model.draft), self.rng.randint(1, min(3, len(self.model.draft)))
        )
        body = [{"path": p} for p in paths]
        ok(self._request("DELETE", f"/api/zarr/{self.zarr_id}/files/", body=body), 204)
        self.settle()
        for path in paths:
            del self.model.draft[path]
        self._changed(paths)
        return f"delete {', '.join(paths)}"

    def cancel(self) -> str:
        files = self.draw_files(3)
        urls = self._start(files)
        sent = {p: b for p, b in files.items() if self.rng.random() < 0.7}
        for path, body in sent.items():
            _put(urls[path], body)
        packed = self._packed()
        ok(self._request("DELETE", f"/api/zarr/{self.zarr_id}/upload/"), 204)
        unlisted: list[str] = []
        self.settle()
        for path, body in sent.items():
            # The PUT replaced a loose file's object; the cancel deletes it, old bytes and all
            # (the draft's: versions keep theirs). A packed file's bytes are in its shard.
            gone = path not in packed and self.model.draft.get(path) != body
            if gone and self.model.draft.pop(path, None) is not None:
                unlisted.append(path)
        if unlisted:
            self._changed(unlisted)  # the cancel's deletion batch
        return f"cancel after PUT of {self.describe(sent)}"

    def pack(self) -> str:
        # Not the array's metadata: conversion reads it as a loose object.
        files = self.draw_files(4, [p for p in PATHS if p != "img/.zarray"])
        paths = sorted(files)
        split = self.rng.randint(0, len(paths))
        declarations, bodies = [], {}
        for index, group in enumerate(g for g in (paths[:split], paths[split:]) if g):
            sink = io.BytesIO()
            built = build_shard(
                (len(group),), ((p, i, files[p]) for i, p in enumerate(group)), sink
            )
            bodies[f"shard{index}"] = sink.getvalue()
            members = [
                {"path": r.path, "md5": r.md5, "size": r.length, "offset": r.offset}
                for r in built.members
            ]
            declarations.append(
                {
                    "name": f"shard{index}",
                    "etag": md5(sink.getvalue()),
                    "size": len(sink.getvalue()),
                    "members": members,
                }
            )
        started = self._post(f"/api/zarr/{self.zarr_id}/upload/", {"shards": declarations})
        for target in started.json()["shards"]:
            _put(target["upload_url"], bodies[target["name"]])
        batch = self._post(f"/api/zarr/{self.zarr_id}/upload/complete/").json()["batch"]
        self.settle()
        state = self._get(f"/api/zarr/{self.zarr_id}/batches/{batch}/").json()
        assert state["state"] == "applied", state
        self.model.draft.update(files)
        self._changed(files)
        return f"pack {self.describe(files)} in {len(declarations)} shard(s)"

    def convert(self) -> str:
        self._post(f"/api/zarr/{self.zarr_id}/pack/", expected=202)
        self.settle()
        return "convert (POST pack/)"

    def publish(self) -> str:
        if len(self.model.versions) >= self.max_versions:
            return self.instead(self.reset)
        answer = self._post(f"/api/dandisets/{self.dandiset}/versions/draft/publish/")
        name = str(answer.json()["version"])
        number = len(self.model.versions) + 1
        found = self._get(f"/api/zarr/{self.zarr_id}/versions/{number}/").json()
        assert name in found["dandiset_versions"], found
        self.model.versions.append(
            Published(number, found["zarr_id"], name, dict(self.model.draft))
        )
        return f"publish {name} (version {number})"

    def reset(self) -> str:
        if not self.model.versions:
            return self.instead(self.publish)
        version = self.rng.choice(self.model.versions)
        self._post(f"/api/zarr/{self.zarr_id}/versions/{version.number}/reset/", expected=202)
        self.settle()
        draft = self.model.draft
        self._changed(p for p in {*draft, *version.files} if draft.get(p) != version.files.get(p))
        self.model.draft = dict(version.files)
        return f"reset to version {version.number}"

    def compact(self) -> str:
        self.h.compact(self.zarr_id)
        return "compact every shard"

    def collect_garbage(self) -> str:
        self.h.collect_garbage(self.zarr_id)
        return "collect garbage (no window)"

    def expire_upload_urls(self) -> str:
        self.h.expire_upload_urls()
        self.settle()
        return "upload URLs expire (reconciliation)"

    def unembargo(self) -> str:
        if not self.model.private:
            return self.instead(self.upload)
        self._post(f"/api/dandisets/{self.dandiset}/unembargo/", expected=202)

        def released() -> bool:
            shown = self._get(f"/api/dandisets/{self.dandiset}/").json()
            return bool(shown["embargo_status"] == "OPEN")

        self.h.wait(released, "the release of the dandiset")
        self.model.private = False
        return "unembargo"

    def _changed(self, paths: Iterable[str]) -> None:
        """A batch changed these paths (what a session's commit is checked against)."""
        if self.sessions is not None:
            self.sessions.changed(paths)

    # --- checks ----------------------------------------------------------------------------

    def check(self) -> None:
        states = [("draft", self.zarr_id, self.model.draft)] + [
            (f"version {v.number}", v.zarr_id, v.files) for v in self.model.versions
        ]
        # And every path an open session changed: none of it is in any state before its commit.
        held = sorted({p for _, _, files in states for p in files})
        directories = ancestors_of(held)
        staged = self.sessions.paths() if self.sessions is not None else set()
        every_path = sorted({*held, *staged})

        def through(index: int) -> None:
            for label, zarr_id, files in states:
                where = f"{label} ({zarr_id}) through reader {index}"
                reader = self.h.readers[index]
                assert_reads_as(reader, zarr_id, files, every_path, directories, where)

        if len(self.h.readers) == 1:
            through(0)  # in this thread: an in-process reader uses this thread's connection
        else:
            # Each reader (a web process of a deployment) in a thread of its own, at once.
            with ThreadPoolExecutor(len(self.h.readers)) as pool:
                for done in [pool.submit(through, i) for i in range(len(self.h.readers))]:
                    done.result()
        for _, zarr_id, _ in states:
            hidden = self.h.anonymous.request("GET", f"/api/zarr/{zarr_id}/").status
            assert hidden == (404 if self.model.private else 200), (zarr_id, "anonymous")
        if self.sessions is not None:
            self.sessions.check()

    # --- the API ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: object = None) -> Answer:
        return self.h.writer.request(method, path, body=body)

    def _get(self, path: str, **params: str) -> Answer:
        return ok(self.h.writer.request("GET", path, params=params or None), 200)

    def _post(self, path: str, body: object = None, *, expected: int | None = None) -> Answer:
        answer = self._request("POST", path, body)
        return ok(answer, *((expected,) if expected else (200, 201)))

    def _start(self, files: dict[str, bytes]) -> dict[str, str]:
        declared = [{"path": p, "etag": md5(b)} for p, b in files.items()]
        started = self._post(f"/api/zarr/{self.zarr_id}/upload/", declared)
        return {t["path"]: t["upload_url"] for t in started.json()}

    def _packed(self) -> set[str]:
        listed = self._get(
            f"/api/zarr/{self.zarr_id}/files/", recursive="true", urls="true", limit="10000"
        )
        return {e["path"] for e in listed.json()["results"] if e["shard"]}

    def settle(self) -> None:
        """Until the draft's changes are applied (and a conversion done)."""

        def settled() -> bool:
            shown = self._get(f"/api/zarr/{self.zarr_id}/").json()
            return bool(shown["checksum_status"] == "complete" and not shown["packing"])

        self.h.wait(settled, "the draft's changes to be applied")


def _name(rule: Callable[[], str]) -> str:
    return rule.__qualname__  # "VersionsWalk.delete", "SessionRules.delete"


def _put(url: str, body: bytes) -> None:
    response = put(url, body)
    assert response.status_code == 200, (url, response.status_code, response.text[:500])


def assert_every_version_downloads(url: str, token: str, walk: VersionsWalk, work: Path) -> int:
    """The real ``dandi download`` (the newest release) of the walk's draft and of every
    published version of its dandiset gives the model's files, byte for byte (the client
    checks each archive's checksum too); how many it downloaded. An empty archive has no
    files to compare: skipped."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    service = DandiService(url, token, walk.dandiset, home)
    states = {"draft": walk.model.draft} | {
        v.dandiset_version: v.files for v in walk.model.versions
    }
    downloaded = 0
    for number, (name, files) in enumerate(states.items()):
        if not files:
            continue
        into = work / f"download-{number}"
        into.mkdir()
        source = f"{url}/api/dandisets/{walk.dandiset}/versions/{name}/"
        service.dandi(
            DANDI_NEWEST, ["download", source, "-o", str(into)], cwd=work, **api_key_env(service)
        )
        got = tree_of(into / walk.dandiset / "model.zarr")
        assert got == {p: md5(b) for p, b in files.items()}, (name, sorted(got), sorted(files))
        downloaded += 1
    return downloaded


def in_process_harness(
    api: Api,
    anonymous: Api,
    *,
    sessions: bool = True,
    url: str | None = None,
    token: str | None = None,
) -> Harness:
    """The walk's harness for a service in this process (``api``: Django's test client, or the
    live test server over HTTP): garbage collection and compaction called directly, every task
    done (inline) when its request ends. With ``sessions``, write sessions' rules join the
    walk's; with the live server's ``url`` and the writer's ``token``, sessions are read
    through ``ArchiveStore`` too."""

    def collect_garbage(zarr_id: str) -> None:
        archive_garbage_collect(ZarrArchive.objects.get(zarr_id=zarr_id), dry_run=False)

    def compact(zarr_id: str) -> None:
        live = Shard.objects.filter(archive__zarr_id=zarr_id, state=Shard.State.LIVE)
        for pk in live.values_list("pk", flat=True):
            shard_compact(pk)

    def wait(ready: Callable[[], bool], what: str) -> None:
        assert ready(), f"not done when the request ended: {what}"

    return Harness(
        api,
        [api],
        anonymous,
        collect_garbage,
        compact,
        let_upload_urls_expire,
        wait,
        SessionHarness(
            sessions_expire,
            staged_objects,
            session_store(url, token) if url is not None else None,
        )
        if sessions
        else None,
    )


def sessions_expire(session_ids: list[str]) -> None:
    """The sessions' expiry passed (an UPDATE instead of a wait), then the sweep ran."""
    ended = timezone.now() - timedelta(seconds=1)
    WriteSession.objects.filter(session_id__in=session_ids).update(expires=ended)
    write_sessions_sweep()


def session_store(url: str, token: str | None) -> Callable[[str, str], ArchiveStore]:
    """A read-only ``ArchiveStore`` of the service at ``url`` on a session."""

    def store(zarr_id: str, session_id: str) -> ArchiveStore:
        return ArchiveStore(url, zarr_id, token, read_only=True, session_id=session_id)

    return store


def staged_objects(zarr_id: str, session_id: str) -> list[str]:
    return [i.key for i in get_store().list(session_prefix(zarr_id, session_id))]


def walk_settings(settings: Any) -> None:
    """No undelete window, compaction at the first dead byte, and rates no walk reaches (each
    step reads every version's listings)."""
    settings.DANDIZARR_GC_WINDOW_DAYS = 0
    settings.DANDIZARR_SHARD_COMPACT_PERCENT = 1
    rates = {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
        "expensive_user": "100000/min",
        "expensive_anon": "100000/min",
        "publishes": "100000/hour",
    }
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
