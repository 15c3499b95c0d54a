"""How ``ArchiveStore`` writes: into one write session of the service (docs/writing.md).

Each ``set`` hashes its bytes and hands them to a pipeline: a thread gathers the files waiting
for an upload URL (up to the service's ``batch_limit``) into one request for URLs bound to
their md5, and one thread PUTs them to storage with their ``Content-MD5``, many at once, on
libcurl's multi interface (``curl_transfers``: about a tenth of the CPU a PUT through
``requests`` costs, which on a small machine is the CPU storage needs); a PUT that fails for a
passing reason is sent again through ``requests`` under the client's retry policy. zarr-python
runs at most ``async.concurrency`` (10) ``set`` calls at a time; were each to wait for its
URL and its PUT, the service's round trip would sit in every chunk's time and each request
would carry 10 files. So the store that began the session writes behind (``behind``): a
``set`` returns once its bytes are queued, up to ``BEHIND_BYTES`` / ``BEHIND_FILES`` in
flight (then it waits: memory stays bounded), and ``flush()`` (which ``commit()``, deletions
and reads of the service's record call first) waits for every one. A write that failed in
the background fails every later ``set``, ``flush`` and the commit. A copy of the store
joining a session begun elsewhere (a Dask worker's) writes through: its ``set`` returns once
the bytes are in storage, since no one flushes it before the caller commits.

The session's changes are read back for the writer's reads (read your writes): this
process's own small writes from memory (those in flight too), anything else the session
holds (another process's writes: Dask workers) from the service's record of the session.
"""

from __future__ import annotations

import hashlib
import io
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from dandizarr.client.api import ApiClient
from dandizarr.client.curl_transfers import CurlTransfers, Reply, Transfer
from dandizarr.client.digests import content_md5
from dandizarr.client.errors import ClientError
from dandizarr.client.retry import final_status_message, is_transient_status
from dandizarr.client.store_reads import DirectoryListing, FileEntry
from dandizarr.client.store_streams import ExactReader, Source, stream_in_parts

# Bytes of this process's own writes kept to answer its reads (metadata, mostly): small files
# only, the oldest forgotten first.
CACHE_BYTES = 16 << 20
CACHED_FILE_BYTES = 1 << 20
# How long the URL thread waits for more files before it asks for what it has.
GATHER_SECONDS = 0.005
# Writing behind: at most this many bytes and files queued or being PUT (a set waits for room;
# one file bigger than the bytes is let through alone).
BEHIND_BYTES = 32 << 20
BEHIND_FILES = 2000


@dataclass(eq=False)
class _Wanted:
    path: str
    md5: bytes  # the digest
    data: bytes
    done: Future[None] = field(default_factory=Future)

    @property
    def hexdigest(self) -> str:
        return self.md5.hex()


class SessionWrites:
    """The writes of one process into session ``session_id`` of archive ``zarr_id``;
    ``behind``: ``write`` returns before the bytes are in storage (``flush`` waits)."""

    def __init__(
        self,
        client: ApiClient,
        zarr_id: str,
        session_id: str,
        *,
        behind: bool = False,
        jobs: int = 32,
    ) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.session_id = session_id
        self.behind = behind
        self.jobs = jobs
        self._lock = threading.Condition()
        # What this process changed: an entry (size, md5), or None for a deletion.
        self._changed: dict[str, FileEntry | None] = {}
        self._cached: OrderedDict[str, bytes] = OrderedDict()
        self._cached_bytes = 0
        # Writes queued or being PUT: their bytes by path (the latest write of each), counts.
        self._in_flight: dict[str, _Wanted] = {}
        self._flying_bytes = 0
        self._flying_files = 0
        self._failure: BaseException | None = None  # the first background write that failed
        self._wanted: queue.Queue[_Wanted] = queue.Queue()
        self._thread: threading.Thread | None = None
        # Writes with their URLs, for the PUT thread; None: no more (the session ended).
        self._ready: queue.Queue[tuple[_Wanted, str] | None] = queue.Queue()
        self._retries: ThreadPoolExecutor | None = None
        self.ended = False

    # --- writing -------------------------------------------------------------------------

    def write(self, key: str, data: bytes) -> None:
        """Stage ``data`` at ``key``: PUT to storage under the session's key for it, now
        (``behind``: soon; ``flush`` waits for it)."""
        self._require_open()
        self._raise_failure()
        if self._is_big(len(data)):  # in parts past the service's multipart threshold
            self.put_stream(key, io.BytesIO(data), len(data))
            return
        wanted = _Wanted(key, hashlib.md5(data, usedforsecurity=False).digest(), data)
        with self._lock:
            while self._flying_files and (
                self._flying_files >= BEHIND_FILES or self._flying_bytes + len(data) > BEHIND_BYTES
            ):
                self._lock.wait()
            self._flying_files += 1
            self._flying_bytes += len(data)
            self._in_flight[key] = wanted
            self._changed[key] = FileEntry(len(data), wanted.hexdigest)
            self._forget_bytes(key)
        self._start_threads()
        self._wanted.put(wanted)
        if not self.behind:
            wanted.done.result()

    def flush(self) -> None:
        """Wait until every write of this process is in storage; the first that failed is
        raised (``ClientError``)."""
        with self._lock:
            while self._flying_files:
                self._lock.wait()
        self._raise_failure()

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            raise ClientError(
                f"a write into session {self.session_id} of archive {self.zarr_id} failed "
                f"({failure}): abort the session and write again"
            ) from failure

    def _put(self, wanted: _Wanted, url: str) -> None:
        """One PUT through ``requests`` under the client's retry policy (a PUT the engine
        could not make for a passing reason)."""
        response = self.client.storage_request(
            "PUT", url, data=wanted.data, headers={"Content-MD5": content_md5(wanted.hexdigest)}
        )
        if response.status_code != 200:
            said = final_status_message(response.status_code, response.text.strip()[:200])
            raise ClientError(f"writing {wanted.path} of archive {self.zarr_id} to storage: {said}")

    def _finished(self, wanted: _Wanted, error: BaseException | None) -> None:
        """A write is in storage (or failed): its room freed, its bytes kept if small."""
        data = wanted.data
        with self._lock:
            self._flying_files -= 1
            self._flying_bytes -= len(data)
            latest = self._in_flight.get(wanted.path) is wanted
            if latest:
                del self._in_flight[wanted.path]
            if error is not None:
                if self.behind and self._failure is None:
                    self._failure = error
            elif latest and len(data) <= CACHED_FILE_BYTES:
                self._forget_bytes(wanted.path)
                self._cached[wanted.path] = data
                self._cached_bytes += len(data)
                while self._cached_bytes > CACHE_BYTES:
                    _, old = self._cached.popitem(last=False)
                    self._cached_bytes -= len(old)
            self._lock.notify_all()
        if error is None:
            wanted.done.set_result(None)
        else:
            wanted.done.set_exception(error)

    def _put_and_finish(self, wanted: _Wanted, url: str) -> None:
        try:
            self._put(wanted, url)
        except BaseException as error:  # handed to the writer (or kept for the flush)
            self._finished(wanted, error)
        else:
            self._finished(wanted, None)

    def _is_big(self, size: int) -> bool:
        threshold = self.client.info().multipart_threshold_bytes
        return threshold is not None and size > threshold

    def put_stream(self, key: str, source: Source, size: int) -> str:
        """Stage ``size`` bytes read from ``source`` (a binary file-like object, or an
        iterable of byte chunks) at ``key``; their md5. Past the service's multipart threshold
        they go to storage in parts as they are read (``store_streams``): memory holds a few
        parts, never the file; at or under it, read whole, then one PUT."""
        self._require_open()
        if not self._is_big(size):
            reader = ExactReader(source, f"the stream for {key}")
            data = reader.take(size)
            reader.require_end()
            self.write(key, data)
            return hashlib.md5(data, usedforsecurity=False).hexdigest()
        md5 = stream_in_parts(self.client, self.zarr_id, self.session_id, key, source, size)
        with self._lock:
            self._changed[key] = FileEntry(size, md5)
            self._forget_bytes(key)
        return md5

    def upload_url(self, key: str, md5: str, size: int) -> str:
        """Stage ``key`` with this md5 and size: the URL of its one PUT, which the caller
        makes (a body streamed from elsewhere: ``dandizarr upload URL``'s files bigger than a
        piece). One request per file: small files go through ``write``'s pipeline."""
        self._require_open()
        url = self.client.stage_files(self.zarr_id, self.session_id, [(key, md5, size)])[0]
        with self._lock:
            self._changed[key] = FileEntry(size, md5)
            self._forget_bytes(key)
        return url

    def delete(self, keys: Sequence[str]) -> None:
        self._require_open()
        self.flush()  # a write of one of these paths still in flight is staged first
        limit = self.client.info().batch_limit
        for start in range(0, len(keys), limit):
            chunk = list(dict.fromkeys(keys[start : start + limit]))
            self.client.stage_deletions(self.zarr_id, self.session_id, chunk)
            with self._lock:
                for key in chunk:
                    self._changed[key] = None
                    self._forget_bytes(key)

    def _forget_bytes(self, key: str) -> None:
        old = self._cached.pop(key, None)
        if old is not None:
            self._cached_bytes -= len(old)

    def _require_open(self) -> None:
        if self.ended:
            raise ValueError(f"write session {self.session_id} has ended (committed or aborted)")

    def _start_threads(self) -> None:
        with self._lock:
            if self._thread is None:
                self._retries = ThreadPoolExecutor(2, thread_name_prefix="archive-store-retry")
                for target, name in ((self._send, "puts"), (self._ask_for_urls, "urls")):
                    thread = threading.Thread(
                        target=target, name=f"archive-store-{name}", daemon=True
                    )
                    thread.start()
                self._thread = thread

    def _send(self) -> None:
        """The PUT thread: every write with its URL, ``jobs`` at once, until the end."""
        sent: dict[int, tuple[_Wanted, str]] = {}  # by the engine's number (in hand-over order)
        handed = [0]
        ready = self._ready

        class Feed:  # the engine's: what the URL thread handed over, as PUTs
            def take(self, wait: float) -> list[Transfer] | None:
                taken: list[tuple[_Wanted, str] | None] = []
                try:
                    taken.append(ready.get(timeout=wait) if wait > 0 else ready.get_nowait())
                    while len(taken) < 1000:
                        taken.append(ready.get_nowait())
                except queue.Empty:
                    pass
                transfers = []
                for item in taken:
                    if item is None:
                        return None
                    wanted, url = item
                    sent[handed[0]] = item
                    handed[0] += 1
                    headers = {"Content-MD5": content_md5(wanted.hexdigest)}
                    transfers.append(Transfer(url, headers, wanted.data, len(wanted.data)))
                return transfers

        def on_reply(number: int, reply: Reply) -> None:
            wanted, url = sent.pop(number)
            if reply.ok:
                self._finished(wanted, None)
            elif (reply.status == 0 or is_transient_status(reply.status)) and self._retries:
                self._retries.submit(self._put_and_finish, wanted, url)
            else:
                said = final_status_message(reply.status, reply.text.strip()[:200])
                error = ClientError(f"writing {wanted.path} of archive {self.zarr_id} to "
                                    f"storage: {said}")  # fmt: skip
                self._finished(wanted, error)

        engine = CurlTransfers(self.jobs, self.client.timeout)
        try:
            engine.run(Feed(), on_reply)
        finally:
            engine.close()

    def _ask_for_urls(self) -> None:
        """For ever: the files waiting for a URL, a request's worth at a time (a path once
        per request: a second write of it waits for the next), each handed to the PUT
        thread once its URL is there."""
        carried: _Wanted | None = None
        while True:
            first = carried or self._wanted.get()
            carried = None
            batch = {first.path: first}
            try:
                limit = self.client.info().batch_limit
            except BaseException as error:
                self._finished(first, error)
                continue
            while len(batch) < limit:
                try:
                    more = self._wanted.get(timeout=GATHER_SECONDS)
                except queue.Empty:
                    break
                if more.path in batch:
                    carried = more
                    break
                batch[more.path] = more
            wanted = list(batch.values())
            try:
                urls = self.client.stage_files(
                    self.zarr_id,
                    self.session_id,
                    [(w.path, w.hexdigest, len(w.data)) for w in wanted],
                )
            except BaseException as error:  # handed to each writer, which raises it
                for w in wanted:
                    self._finished(w, error)
                continue
            for w, url in zip(wanted, urls, strict=True):
                self._ready.put((w, url))

    # --- reading one's writes -------------------------------------------------------------

    def cached(self, key: str) -> bytes | None:
        with self._lock:
            flying = self._in_flight.get(key)
            return flying.data if flying is not None else self._cached.get(key)

    def lookup(self, key: str, *, with_url: bool) -> tuple[bool, FileEntry | None]:
        """(whether the session changed ``key``, its entry: None for a deletion). With
        ``with_url``, the entry of a staged file has its download URL."""
        with self._lock:
            known = key in self._changed
            entry = self._changed.get(key)
        if known and (entry is None or not with_url):
            return True, entry
        self.flush()  # the service's record of this process's writes is whole
        change = self.client.session_change(self.zarr_id, self.session_id, key, urls=with_url)
        if change is None:
            return known, entry
        if change["deleted"]:
            return True, None
        return True, FileEntry(int(change["size"]), str(change["md5"]), change.get("download_url"))

    def changes(self, prefix: str) -> Iterator[tuple[str, FileEntry | None]]:
        """Every change of the session (of every process) below ``prefix``, in path order."""
        self.flush()
        for change in self.client.session_changes(self.zarr_id, self.session_id, prefix):
            entry = None if change["deleted"] else FileEntry(change["size"], change["md5"])
            yield change["path"], entry

    # --- ending ---------------------------------------------------------------------------

    def commit(self) -> str:
        """Commit the session; the archive's checksum once its batch is applied."""
        self._require_open()
        self.flush()
        answer: dict[str, Any] = self.client.commit_session(self.zarr_id, self.session_id)
        self.ended = True
        self._stop_puts()
        batch = self.client.wait_for_batch(self.zarr_id, int(answer["batch"]))
        if batch.get("state") != "applied":
            raise ClientError(
                f"write session {self.session_id} was committed as batch {answer['batch']}, "
                f"which ended {batch.get('state')}: {batch.get('error') or 'no error given'}"
            )
        checksum = self.client.get_archive(self.zarr_id).checksum
        if checksum is None:
            raise ClientError(f"zarr archive {self.zarr_id} has no checksum after the commit")
        return checksum

    def abort(self) -> None:
        self._require_open()
        # Nothing still being PUT once the service deletes what the session staged.
        with self._lock:
            while self._flying_files:
                self._lock.wait()
        self.client.abort_session(self.zarr_id, self.session_id)
        self.ended = True
        self._stop_puts()

    def _stop_puts(self) -> None:
        self._ready.put(None)
        if self._retries is not None:
            self._retries.shutdown(wait=False)


# --- listings: the draft's with the session's changes over them -------------------------------

Change = tuple[str, FileEntry | None]


def files_with_changes(
    found: Iterable[tuple[str, int]], changes: Iterable[Change]
) -> list[tuple[str, int]]:
    """The draft's (key, size) below a prefix with the session's changes there over them."""
    merged = dict(found)
    for key, entry in changes:
        if entry is None:
            merged.pop(key, None)
        else:
            merged[key] = entry.size
    return sorted(merged.items())


def names_with_changes(
    directory: DirectoryListing,
    below: str,
    changes: Iterable[Change],
    is_empty: Callable[[str], bool],
) -> set[str]:
    """The names in a directory of the draft (``below``: its path and a slash) with the
    session's changes there over them; a subdirectory where the session deleted files is gone
    when ``is_empty`` says nothing is left below it."""
    names = set(directory.files) | directory.directories
    emptied: set[str] = set()
    for key, entry in changes:
        name, nested, _ = key[len(below) :].partition("/")
        if entry is not None:
            names.add(name)
        elif not nested:
            names.discard(name)
        else:
            emptied.add(name)
    for name in emptied & directory.directories:
        if is_empty(f"{below}{name}/"):
            names.discard(name)
    return names
