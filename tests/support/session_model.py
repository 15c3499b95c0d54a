"""Write sessions (docs/writing.md) in the versions model walk (tests/support/versions_model.py):
rules that begin sessions, stage files into them (presigned PUTs with Content-MD5), delete
paths and directories in them, commit, abort, or leave them (a writer that crashed) for the
sweep to expire, several open at once, interleaved with the walk's uploads, publishes, resets
and garbage collection.

The model of a session is the draft as it was when the session began and the session's own
changes. It predicts:

* a session's reads (``GET .../changes/?path=``, else the draft): the draft as it was when
  the session began, overlaid with the session's changes (snapshot isolation);
* a commit: 409 ``session_conflict`` naming the paths (nothing changes, the session stays open)
  exactly when a batch sequenced since the session began changed a path the session changed,
  or a file where the session put a directory or the reverse (``session_commits``); else the
  draft as it is now overlaid with the session's changes, whose checksum the walk checks;
* an abort: nothing visible, the session's staged objects gone from storage at once;
* a crash then the sweep: the session expired, its staged objects gone, a commit 409
  ``session_ended``.

And after every step, for every open session: nothing of it in the draft or any version (the
walk's check, which reads every path a session changed too), its view as predicted, every staged
file's bytes read back (garbage collection keeps what an open session needs); for every ended
session without a commit, storage holds none of its staged objects.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import requests
from zarr.core.buffer import default_buffer_prototype

from dandizarr.checksums.paths import directories_above
from dandizarr.client.store import ArchiveStore
from tests.support.api import md5, put
from tests.support.model_api import Answer, quoted
from tests.support.version_reads import checksum_of, ok

if TYPE_CHECKING:
    from tests.support.versions_model import VersionsWalk

# Paths only sessions write: a file below the walk's file "top", and a file where the walk
# has the directory "e/f/" (so commits meet file/directory clashes, and the walk's own uploads
# must keep clear of what a commit made).
SESSION_PATHS = ["top/inner", "e/f", "a/b"]
MAX_OPEN = 3
# What a reader of a session gives: each path's bytes (None: absent), and the paths listed.
Reads = tuple[dict[str, bytes | None], set[str]]


def clashes(path: str, others: Iterable[str]) -> bool:
    """``path`` is a directory of one of ``others`` or has one of them as a directory."""
    above = directories_above([path])
    return any(o in above or path in directories_above([o]) for o in others)


@dataclass
class Session:
    name: str  # s1, s2, ... in the walk's log
    session_id: str
    read_id: str  # the draft as it began (its snapshot), what its reads go through
    base: dict[str, bytes]  # the draft when it began
    base_batch: int  # how many batches had changed the draft when it began
    changes: dict[str, bytes | None] = field(default_factory=dict)  # None: deleted
    crashed: bool = False  # its writer stopped: only the sweep ends it

    def view(self) -> dict[str, bytes]:
        return overlay(self.base, self.changes)


def overlay(files: dict[str, bytes], changes: dict[str, bytes | None]) -> dict[str, bytes]:
    """``files`` with ``changes`` made (None: deleted)."""
    result = dict(files)
    for path, body in changes.items():
        if body is None:
            result.pop(path, None)
        else:
            result[path] = body
    return result


@dataclass
class SessionHarness:
    """What the session rules need of a shape beyond the API."""

    # session ids: each session's expiry passes, then the sweep runs (as beat's task would).
    expire: Callable[[list[str]], None]
    # (zarr_id, session_id): the keys storage holds under the session's staging prefix.
    staged_objects: Callable[[str, str], list[str]]
    # (zarr_id, session_id): a read-only ArchiveStore on the session, where the shape serves
    # HTTP (its reads are checked as the API's are).
    store: Callable[[str, str], ArchiveStore] | None = None


class SessionRules:
    """The session rules of one walk: ``rules()`` gives them to the walk's draw, ``changed()``
    hears of every batch the walk's other rules make, ``check()`` runs after every step."""

    def __init__(
        self, walk: VersionsWalk, harness: SessionHarness, paths: list[str], weight: int
    ) -> None:
        self.walk = walk
        self.walk_paths = paths  # the walk's own
        self.h = harness
        self.rng: random.Random = walk.rng
        self.open: list[Session] = []
        self.ended: list[Session] = []  # aborted or expired: nothing of theirs in storage
        self.batches: list[set[str]] = []  # the paths each batch changed, in sequence order
        self.begun = 0
        self.weight = weight  # of the session rules against the walk's
        self.acted: Session | None = None  # the session the last step acted on
        self.outcomes: Counter[str] = Counter()

    def rules(self) -> list[tuple[int, Callable[[], str]]]:
        rules = [
            (2, self.begin),
            (4, self.write),
            (2, self.delete),
            (3, self.commit),
            (1, self.abort),
            (1, self.crash),
            (1, self.expire),
        ]
        return [(w * self.weight, rule) for w, rule in rules]

    def tally(self) -> str:
        """How many of each outcome the walk met (what a seed exercised)."""
        return ", ".join(f"{n} {what}" for what, n in sorted(self.outcomes.items()))

    def changed(self, paths: Iterable[str]) -> None:
        """A batch that changed these paths of the draft was sequenced."""
        self.batches.append(set(paths))

    def paths(self) -> set[str]:
        """Every path an open session changed: the walk's check reads them in every state."""
        return {p for s in self.open for p in s.changes}

    # --- rules -----------------------------------------------------------------------------

    def _writing(self) -> Session | None:
        live = [s for s in self.open if not s.crashed]
        self.acted = self.rng.choice(live) if live else None
        return self.acted

    def begin(self) -> str:
        if len(self.open) >= MAX_OPEN:
            return self.walk.instead(
                self.expire if any(s.crashed for s in self.open) else self.commit
            )
        answer = ok(self._request("POST", "sessions/"), 201).json()
        assert answer["state"] == "open", answer
        self.begun += 1
        session = Session(
            f"s{self.begun}",
            answer["session_id"],
            answer["read_id"],
            dict(self.walk.model.draft),
            len(self.batches),
        )
        self.open.append(session)
        self.acted = session
        return f"begin session {session.name}"

    def write(self) -> str:
        session = self._writing()
        if session is None:
            return self.walk.instead(self.begin)
        # Not where the draft (less the session's deletions) or the session's own files have
        # a file above or below: the service refuses those at once (or at the commit). Nor
        # where the draft has a directory the session emptied: the service refuses a file
        # there too (write_sessions: only deletions at the path and above count; a known
        # limit, docs/writing.md).
        draft = self.walk.model.draft
        kept = {p for p in draft if session.changes.get(p, b"") is not None}
        written = {p for p, b in session.changes.items() if b is not None}
        free = [
            p
            for p in self.walk_paths + SESSION_PATHS
            if not clashes(p, kept | written) and p not in directories_above(draft)
        ]
        files = self.walk.draw_files(3, free, clear=False)
        declared = [{"path": p, "etag": md5(b), "size": len(b)} for p, b in files.items()]
        targets = ok(self._request("POST", f"sessions/{session.session_id}/files/", declared), 200)
        urls = {t["path"]: t["upload_url"] for t in targets.json()}
        assert set(urls) == set(files), (sorted(urls), sorted(files))
        for path, body in files.items():
            response = put(urls[path], body)  # Content-MD5 as the URL is bound to
            assert response.status_code == 200, (path, response.status_code, response.text[:300])
        session.changes.update(files)
        return f"session {session.name} writes {self.walk.describe(files)}"

    def delete(self) -> str:
        session = self._writing()
        if session is None:
            return self.walk.instead(self.begin)
        view = sorted(session.view())
        directories = sorted(directories_above(view))
        if directories and self.rng.random() < 0.4:
            # delete_dir: every key the session's view holds below the directory.
            directory = self.rng.choice(directories)
            paths = [p for p in view if p.startswith(directory + "/")]
            what = f"directory {directory}/"
            self.outcomes["directory deletions"] += 1
        else:
            pool = [*view, "never/was"]
            paths = self.rng.sample(pool, self.rng.randint(1, min(2, len(pool))))
            what = ", ".join(paths)
        body = [{"path": p} for p in paths]
        ok(self._request("POST", f"sessions/{session.session_id}/deletions/", body), 204)
        session.changes.update(dict.fromkeys(paths))
        return f"session {session.name} deletes {what}"

    def commit(self) -> str:
        session = self._writing()
        if session is None:
            return self.walk.instead(self.begin)
        conflicts = self._conflicts(session)
        answer = self._request("POST", f"sessions/{session.session_id}/commit/")
        if conflicts:
            assert answer.status == 409, (answer.status, answer.body[:500], sorted(conflicts))
            refused = answer.json()
            assert refused["code"] == "session_conflict", refused
            assert sorted(refused["paths"]) == sorted(conflicts), refused
            state = ok(self._request("GET", f"sessions/{session.session_id}/"), 200).json()
            assert state["state"] == "open", state
            self.outcomes["conflicts"] += 1
            return f"session {session.name} commit refused: conflict at {sorted(conflicts)}"
        ok(answer, 200)
        assert answer.json()["state"] == "committed", answer.json()
        batch = answer.json()["batch"]
        self.walk.settle()
        applied = ok(self._request("GET", f"batches/{batch}/"), 200).json()
        assert applied["state"] == "applied", applied
        self.open.remove(session)
        self.changed(session.changes)
        draft = self.walk.model.draft = overlay(self.walk.model.draft, session.changes)
        # The checksum the commit leads to (what ArchiveStore.commit returns) is the model's.
        shown = ok(self._request("GET", ""), 200).json()
        assert shown["checksum"] == checksum_of(draft), (shown["checksum"], sorted(draft))
        self.outcomes["commits"] += 1
        return f"session {session.name} commits ({len(session.changes)} changes)"

    def _conflicts(self, session: Session) -> set[str]:
        """What ``session_commits._check_conflicts`` refuses, from the model's batches."""
        changed = set().union(*self.batches[session.base_batch :])
        written = {p for p, b in session.changes.items() if b is not None}
        touched = set(session.changes)
        return (
            (changed & touched)
            | (changed & directories_above(written))
            | (written & directories_above(changed))
        )

    def abort(self) -> str:
        session = self._writing()
        if session is None:
            return self.walk.instead(self.begin)
        ok(self._request("DELETE", f"sessions/{session.session_id}/"), 204)
        self.open.remove(session)
        self.ended.append(session)
        self._assert_nothing_staged(session, "after its abort")
        answer = self._request("POST", f"sessions/{session.session_id}/commit/")
        self._assert_ended(answer)
        self.outcomes["aborts"] += 1
        # Garbage collection with the other sessions open: the check after the step reads
        # back every file they staged.
        self.walk.h.collect_garbage(self.walk.zarr_id)
        return f"session {session.name} aborts; garbage collected"

    def crash(self) -> str:
        session = self._writing()
        if session is None:
            return self.walk.instead(self.begin)
        session.crashed = True
        return f"session {session.name}'s writer crashes (the session left open)"

    def expire(self) -> str:
        crashed = [s for s in self.open if s.crashed]
        if not crashed:
            return self.walk.instead(self.crash)
        self.h.expire([s.session_id for s in crashed])
        for session in crashed:
            self.open.remove(session)
            self.ended.append(session)
            state = ok(self._request("GET", f"sessions/{session.session_id}/"), 200).json()
            assert state["state"] == "expired", state
            self._assert_nothing_staged(session, "after the sweep expired it")
            self._assert_ended(self._request("POST", f"sessions/{session.session_id}/commit/"))
        self.outcomes["expiries"] += len(crashed)
        self.walk.h.collect_garbage(self.walk.zarr_id)  # as after an abort
        return (
            f"sessions {', '.join(s.name for s in crashed)} expire (the sweep); garbage collected"
        )

    # --- checks ----------------------------------------------------------------------------

    def check(self) -> None:
        for session in self.open:
            # Through ArchiveStore too for the session the step acted on (each store read is
            # a few requests: every session every step would double the walk's time).
            self._assert_view(session, through_store=session is self.acted)
        self.acted = None
        for session in self.ended:
            self._assert_nothing_staged(session, "once ended without a commit")

    def _assert_view(self, session: Session, *, through_store: bool) -> None:
        """The session reads as its model, through the API (its changes, else the draft) and
        through ``ArchiveStore`` on the session where the shape has one: each path's bytes
        (its staged bytes read back from storage), ``exists`` and the listing."""
        snapshot = session.view()
        # What a read of the draft as it is now (not as it was) would give: named apart in a
        # failure, the one difference snapshot isolation makes.
        committed = overlay(self.walk.model.draft, session.changes)
        every = sorted({*self.walk_paths, *SESSION_PATHS, *snapshot, *committed, *session.changes})
        readers = [("the API", self._api_view)]
        if self.h.store is not None and through_store:
            readers.append(("ArchiveStore", self._store_view))
        expected = snapshot
        for name, read in readers:
            got, listed = read(session, every)
            where = f"session {session.name} ({session.session_id}) through {name}"
            if got == {p: expected.get(p) for p in every} and listed == set(expected):
                continue
            if got == {p: committed.get(p) for p in every} and listed == set(committed):
                raise AssertionError(
                    f"{where} reads the draft as it is now, not as it was when the session "
                    f"began (snapshot isolation): paths changed since "
                    f"{sorted(p for p in every if snapshot.get(p) != committed.get(p))}"
                )
            detail = {
                p: (_short(got[p]), _short(snapshot.get(p)), _short(committed.get(p)))
                for p in every
                if got[p] != expected.get(p)
            }
            raise AssertionError(
                f"{where} reads (got, as it began with its changes, the draft now with its "
                f"changes): {detail}; listed {sorted(listed ^ set(expected))} wrongly"
            )

    def _api_view(self, session: Session, paths: list[str]) -> Reads:
        """Through the API as a session's reader reads: the session's changes (listed, each
        staged file's bytes from its URL), else the draft as the session began (listed, its
        bytes from ``/zarr/``, both by the session's ``read_id``)."""
        query = {"recursive": "true", "limit": "10000"}
        draft = ok(
            self.walk.h.writer.request("GET", f"/api/zarr/{session.read_id}/files/", params=query),
            200,
        )
        listed = {e["path"] for e in draft.json()["results"]}
        changes = {
            c["path"]: c
            for c in ok(
                self._request(
                    "GET",
                    f"sessions/{session.session_id}/changes/",
                    params={"limit": "10000", "urls": "true"},
                ),
                200,
            ).json()["results"]
        }
        got: dict[str, bytes | None] = {}
        for path in paths:
            change = changes.get(path)
            if change is not None:
                got[path] = None if change["deleted"] else _fetch(change["download_url"])
            elif path in listed:
                answer = self.walk.h.writer.request(
                    "GET", f"/zarr/{session.read_id}/{quoted(path)}"
                )
                got[path] = ok(answer, 200).body
            else:
                got[path] = None
        for path, change in changes.items():
            (listed.discard if change["deleted"] else listed.add)(path)
        return got, listed

    def _store_view(self, session: Session, paths: list[str]) -> Reads:
        assert self.h.store is not None
        store = self.h.store(self.walk.zarr_id, session.session_id)
        try:
            return asyncio.run(_store_reads(store, paths))
        finally:
            store.close()

    def _assert_nothing_staged(self, session: Session, when: str) -> None:
        left = self.h.staged_objects(self.walk.zarr_id, session.session_id)
        assert not left, f"session {session.name} {when}: storage still holds {left[:5]}"

    def _assert_ended(self, answer: Answer) -> None:
        assert answer.status == 409, (answer.status, answer.body[:500])
        assert answer.json()["code"] == "session_ended", answer.json()

    # --- the API ---------------------------------------------------------------------------

    def _path(self, rest: str) -> str:
        return f"/api/zarr/{self.walk.zarr_id}/{rest}"

    def _request(
        self, method: str, rest: str, body: object = None, params: dict[str, str] | None = None
    ) -> Answer:
        return self.walk.h.writer.request(method, self._path(rest), body=body, params=params)


def _fetch(url: str) -> bytes:
    response = requests.get(url, timeout=30)
    assert response.status_code == 200, (url, response.status_code)
    return response.content


def _short(body: bytes | None) -> str | None:
    return None if body is None else md5(body)[:6]


async def _store_reads(
    store: ArchiveStore, paths: list[str]
) -> tuple[dict[str, bytes | None], set[str]]:
    """Each path's bytes through ``store.get`` (``exists`` agreeing), and ``list_prefix``."""
    prototype = default_buffer_prototype()
    got: dict[str, bytes | None] = {}
    for path in paths:
        buffer = await store.get(path, prototype)
        got[path] = buffer.to_bytes() if buffer is not None else None
        assert await store.exists(path) == (buffer is not None), (path, "exists")
    return got, {key async for key in store.list_prefix("")}
