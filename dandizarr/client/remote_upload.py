"""``dandizarr upload URL``: a Zarr in a remote store (``remote_source``: s3://, https://, any
fsspec URL) streamed into one write session of the archive (docs/writing.md, "Uploading from a
remote store"), with no local copy.

Each file is read from the source in bounded pieces to learn its md5 (a file that fits in
one piece is kept and sent from memory; a bigger one is read again as the PUT's body, a
piece at a time), staged in the session with that md5 and size (its URL bound to them) and
PUT with its Content-MD5: a file storage received other bytes of is refused by storage.
Files the draft already holds with the same md5 are skipped, as a local upload skips them.
The commit makes everything visible at once; the server's checksum is then compared with the
tree checksum of the md5s streamed (and of the draft's files the source lacks, kept unless
``sync``).

A run killed at any moment leaves the draft as it was (nothing is visible before the
commit). A note in the state directory (``SessionNote``) names the session; the next run of
the same source into the same archive reuses it while it is open, and does not send again a
file the session already staged with the same md5 (it reads it again to know).
"""

from __future__ import annotations

import contextlib
import heapq
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dandizarr.client.api import ApiClient
from dandizarr.client.archive_target import ensure_asset, resolve_archive
from dandizarr.client.digests import content_md5, tree_checksum
from dandizarr.client.errors import ClientError, Conflict, TokenRequired
from dandizarr.client.models import RemoteFile
from dandizarr.client.progress import Progress
from dandizarr.client.remote_listing import RemoteListing
from dandizarr.client.remote_source import RemoteTree
from dandizarr.client.results import UploadResult
from dandizarr.client.session_note import SessionNote
from dandizarr.client.storage_puts import PutStatus, refused
from dandizarr.client.store_writes import SessionWrites
from dandizarr.client.upload_types import LocalListing, UploadOptions
from dandizarr.concurrency import ordered_map

# The md5 a resumed run gives a file its session staged but storage may not hold.
_UNSENT = "0" * 32


class RemoteUploader:
    """Upload ``tree`` into the archive ``options`` name, through one write session."""

    def __init__(
        self, client: ApiClient, tree: RemoteTree, options: UploadOptions, progress: Progress
    ) -> None:
        self.client = client
        self.tree = tree
        self.options = options
        self.progress = progress
        self.result = UploadResult(server=client.server)
        self._lock = threading.Lock()
        self._threshold: int | None = None
        self._note: SessionNote | None = None

    def run(self) -> UploadResult:
        started = time.perf_counter()
        if not self.client.token:
            raise TokenRequired("uploading needs an API token")
        if self.options.pack:
            raise ClientError("--pack reads local files; an upload from a URL sends them loose")
        # The source is checked and listed before anything changes on the server.
        self.tree.check_zarr()
        info = self.client.info()
        self._threshold = info.multipart_threshold_bytes
        self.progress.message(f"listing {self.tree.url}...")
        scan_started = time.perf_counter()
        files = self.tree.files()
        listing = LocalListing(files, sized=all(size >= 0 for _, size in files))
        remote: RemoteListing | None = None
        staged: RemoteListing | None = None
        try:
            archive = resolve_archive(self.client, self.options, self.tree.name, self.progress)
            self.result.zarr_id, self.result.name = archive.zarr_id, archive.name
            self.result.dandiset = archive.dandiset
            self.result.local_files = len(listing)
            zarr_id = archive.zarr_id
            remote = RemoteListing(listing.paths, len(listing), self.client.iter_files(zarr_id))
            note = self._note = SessionNote(self.client.server, zarr_id, self.tree.url)
            writes, staged = self._open_session(note, listing)
            self._stage_deletions(writes, remote, staged)
            self.result.add_time("scan", scan_started)
            self.progress.start(len(listing), listing.total_bytes)
            try:
                self._send_all(writes, listing, remote, staged)
            finally:
                self.progress.close()
            self.result.local_bytes = listing.known_bytes
            verify_started = time.perf_counter()
            self._commit(writes, note)
            kept = None if self.options.sync or not len(remote.only_paths) else remote
            self._verify(zarr_id, listing, kept)
            self.result.add_time("verify", verify_started)
            if self.result.ok:
                self.result.asset_id = ensure_asset(self.client, archive, self.progress)
        finally:
            if self._note is not None:
                self._note.close()
            listing.close()
            for opened in (remote, staged):
                if opened is not None:
                    opened.close()
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    def _open_session(
        self, note: SessionNote, listing: LocalListing
    ) -> tuple[SessionWrites, RemoteListing | None]:
        """The session a killed run of this upload left open (and what it staged, matched
        against the source's paths), else a new one."""
        zarr_id = self.archive_id
        left = note.load()
        if left is not None:
            try:
                state = self.client.get_session(zarr_id, left).get("state")
            except ClientError:
                state = None
            if state == "open":
                self.progress.message(f"resuming write session {left}")
                sent = note.sent()
                # A file staged but never PUT (the run killed between the two) takes an md5 no
                # file has: it is sent again.
                changes = (
                    RemoteFile(
                        str(c["path"]),
                        int(c["size"]),
                        str(c["md5"]) if (str(c["path"]), str(c["md5"])) in sent else _UNSENT,
                    )
                    for c in self.client.session_changes(zarr_id, left)
                    if not c["deleted"]
                )
                staged = RemoteListing(listing.paths, len(listing), changes)
                return SessionWrites(self.client, zarr_id, left), staged
        session_id = str(self.client.begin_session(zarr_id)["session_id"])
        note.record(session_id)
        return SessionWrites(self.client, zarr_id, session_id), None

    @property
    def archive_id(self) -> str:
        return self.result.zarr_id

    def _stage_deletions(
        self, writes: SessionWrites, remote: RemoteListing, staged: RemoteListing | None
    ) -> None:
        """With ``sync``, the draft's files the source lacks; always, files a killed run
        staged at paths the source no longer has."""
        gone = list(staged.only_paths) if staged is not None else []
        if self.options.sync and len(remote.only_paths):
            self.progress.message(f"deleting {len(remote.only_paths):,} files absent remotely...")
            gone += list(remote.only_paths)
            self.result.deleted_files = len(remote.only_paths)
        else:
            self.result.remote_only_files = len(remote.only_paths)
        if gone:
            writes.delete(sorted(set(gone)))

    def _send_all(
        self,
        writes: SessionWrites,
        listing: LocalListing,
        remote: RemoteListing,
        staged: RemoteListing | None,
    ) -> None:
        """Read, stage and PUT every file, ``jobs`` at once (each holding a piece or two)."""
        jobs = max(1, self.client.jobs)

        def send(i: int) -> tuple[int, int, str]:
            return (i, *self._send_one(writes, listing.paths[i], remote, staged, i))

        with ThreadPoolExecutor(jobs, thread_name_prefix="dandizarr-remote") as pool:
            done = ordered_map(pool, send, range(len(listing)), ahead=2 * jobs)
            for i, size, md5 in done:
                listing.set_hashed(i, size, md5)

    def _send_one(
        self,
        writes: SessionWrites,
        path: str,
        remote: RemoteListing,
        staged: RemoteListing | None,
        i: int,
    ) -> tuple[int, str]:
        """Send source file ``path`` (position ``i``) unless the session or the draft holds
        it: its size and md5 as read."""
        hashed = self.tree.hash(path)
        ours = (hashed.size, hashed.md5)
        in_session = staged.state(i) if staged is not None else None
        if in_session == ours or (in_session is None and remote.state(i) == ours):
            with self._lock:
                self.result.skipped_files += 1
                self.result.skipped_bytes += hashed.size
            self.progress.advance(1, hashed.size)
            return ours
        threshold = self._threshold
        if threshold is not None and hashed.size > threshold:
            # In parts as it is read again (put_stream: memory holds a few parts).
            md5 = writes.put_stream(path, self.tree.body(path, hashed.size), hashed.size)
            if md5 != hashed.md5:
                raise ClientError(f"{path} changed at the source while it was uploaded")
            self._sent(path, hashed.md5, hashed.size)
            return ours
        data = hashed.data
        if data is not None:  # one piece: the session's pipeline asks URLs for many at once
            writes.write(path, data)
            with self._lock:
                self.result.put_requests += 1
            self._sent(path, hashed.md5, hashed.size)
            return ours

        def body() -> Any:
            return data if data is not None else self.tree.body(path, hashed.size)

        headers = {"Content-MD5": content_md5(hashed.md5)}
        for attempt in range(2):
            url = writes.upload_url(path, hashed.md5, hashed.size)
            response = self.client.storage_request("PUT", url, body_factory=body, headers=headers)
            with self._lock:
                self.result.put_requests += 1
            if response.status_code == 200:
                break
            outcome = refused(path, response)
            if outcome.status is not PutStatus.EXPIRED or attempt:
                raise ClientError(f"storage refused {path}: {outcome.error}")
        self._sent(path, hashed.md5, hashed.size)
        return ours

    def _sent(self, path: str, md5: str, size: int) -> None:
        assert self._note is not None
        self._note.mark_sent(path, md5)
        with self._lock:
            self.result.uploaded_files += 1
            self.result.uploaded_bytes += size
        self.progress.advance(1, size)

    def _commit(self, writes: SessionWrites, note: SessionNote) -> None:
        """Commit the session (anything staged or deleted, by this run or a killed one); a
        session with no change is aborted instead, the draft already as wanted."""
        session = self.client.get_session(self.archive_id, writes.session_id)
        if int(session.get("files") or 0) + int(session.get("deletions") or 0) == 0:
            writes.abort()
            note.clear()
            return
        self.progress.message(f"committing write session {writes.session_id}...")
        try:
            writes.commit()
        except Conflict as error:
            # The draft changed since the session began at paths it wrote: committing it again
            # would conflict again, so a next run starts a new session.
            with contextlib.suppress(ClientError):
                writes.abort()
            note.clear()
            raise ClientError(
                f"{error}; the write session was discarded and the draft left as it is: run "
                "the upload again"
            ) from error
        note.clear()
        self.result.batches = 1

    def _verify(self, zarr_id: str, hashed: LocalListing, kept: RemoteListing | None) -> None:
        """The server's checksum against the one the streamed md5s give (with ``kept``'s
        files, the draft's that the source lacks and that stay)."""
        self.result.local_checksum = tree_checksum(hashed.entries())
        self.result.expected_checksum = (
            tree_checksum(heapq.merge(hashed.entries(), kept.only_entries()))
            if kept is not None
            else self.result.local_checksum
        )
        archive = self.client.wait_for_checksum(
            zarr_id, timeout=self.options.checksum_timeout, progress=self.progress
        )
        self.result.server_checksum = archive.checksum
