"""How ``ArchiveStore`` writes: into one write session of the service (docs/writing.md).

Each ``set`` hashes its bytes, gets an upload URL bound to their md5 and PUTs them to storage
at once: nothing waits for the commit, so memory holds only the writes in flight. URLs are
asked for many files at a time: a thread gathers the files waiting for one (up to the
service's ``batch_limit``) into one request, so zarr's concurrent chunk writes cost one API
request per few hundred chunks. Deletions are recorded in the session likewise.

The session's changes are read back for the writer's reads (read your writes): this
process's own small writes from memory, anything else the session holds (another process's
writes: Dask workers) from the service's record of the session.
"""

from __future__ import annotations

import base64
import hashlib
import io
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from dandizarr.client.api import ApiClient
from dandizarr.client.errors import ClientError
from dandizarr.client.retry import final_status_message
from dandizarr.client.store_reads import DirectoryListing, FileEntry
from dandizarr.client.store_streams import ExactReader, Source, stream_in_parts

# Bytes of this process's own writes kept to answer its reads (metadata, mostly): small files
# only, the oldest forgotten first.
CACHE_BYTES = 16 << 20
CACHED_FILE_BYTES = 1 << 20
# How long the URL thread waits for more files before it asks for what it has.
GATHER_SECONDS = 0.005


@dataclass(frozen=True)
class _Wanted:
    path: str
    md5: str
    size: int
    url: Future[str]


class SessionWrites:
    """The writes of one process into session ``session_id`` of archive ``zarr_id``."""

    def __init__(self, client: ApiClient, zarr_id: str, session_id: str) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.session_id = session_id
        self._lock = threading.Lock()
        # What this process changed: an entry (size, md5), or None for a deletion.
        self._changed: dict[str, FileEntry | None] = {}
        self._cached: OrderedDict[str, bytes] = OrderedDict()
        self._cached_bytes = 0
        self._wanted: queue.Queue[_Wanted] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.ended = False

    # --- writing -------------------------------------------------------------------------

    def write(self, key: str, data: bytes) -> None:
        """Stage ``data`` at ``key``: PUT to storage now, under the session's key for it (in
        parts past the service's multipart threshold)."""
        self._require_open()
        if self._is_big(len(data)):
            self.put_stream(key, io.BytesIO(data), len(data))
            return
        md5 = hashlib.md5(data, usedforsecurity=False)
        url = self.upload_url(key, md5.hexdigest(), len(data))
        header = base64.b64encode(md5.digest()).decode()
        response = self.client.storage_request(
            "PUT", url, data=data, headers={"Content-MD5": header}
        )
        if response.status_code != 200:
            said = final_status_message(response.status_code, response.text.strip()[:200])
            raise ClientError(f"writing {key} of archive {self.zarr_id} to storage: {said}")
        with self._lock:
            self._changed[key] = FileEntry(len(data), md5.hexdigest())
            self._forget_bytes(key)
            if len(data) <= CACHED_FILE_BYTES:
                self._cached[key] = data
                self._cached_bytes += len(data)
                while self._cached_bytes > CACHE_BYTES:
                    _, old = self._cached.popitem(last=False)
                    self._cached_bytes -= len(old)

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
        """Stage ``key`` with this md5 and size: the URL of its one PUT (asked for together
        with other threads' files, a request's worth at a time)."""
        self._require_open()
        wanted = _Wanted(key, md5, size, Future())
        self._start_thread()
        self._wanted.put(wanted)
        return wanted.url.result()

    def delete(self, keys: Sequence[str]) -> None:
        self._require_open()
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

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._ask_for_urls, name="archive-store-urls", daemon=True
                )
                self._thread.start()

    def _ask_for_urls(self) -> None:
        """For ever: the files waiting for a URL, a request's worth at a time (a path once
        per request: a second write of it waits for the next)."""
        carried: _Wanted | None = None
        while True:
            first = carried or self._wanted.get()
            carried = None
            batch = {first.path: first}
            limit = self.client.info().batch_limit
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
                    self.zarr_id, self.session_id, [(w.path, w.md5, w.size) for w in wanted]
                )
            except BaseException as error:  # handed to each writer, which raises it
                for w in wanted:
                    w.url.set_exception(error)
                continue
            for w, url in zip(wanted, urls, strict=True):
                w.url.set_result(url)

    # --- reading one's writes -------------------------------------------------------------

    def cached(self, key: str) -> bytes | None:
        with self._lock:
            return self._cached.get(key)

    def lookup(self, key: str, *, with_url: bool) -> tuple[bool, FileEntry | None]:
        """(whether the session changed ``key``, its entry: None for a deletion). With
        ``with_url``, the entry of a staged file has its download URL."""
        with self._lock:
            known = key in self._changed
            entry = self._changed.get(key)
        if known and (entry is None or not with_url):
            return True, entry
        change = self.client.session_change(self.zarr_id, self.session_id, key, urls=with_url)
        if change is None:
            return known, entry
        if change["deleted"]:
            return True, None
        return True, FileEntry(int(change["size"]), str(change["md5"]), change.get("download_url"))

    def changes(self, prefix: str) -> Iterator[tuple[str, FileEntry | None]]:
        """Every change of the session (of every process) below ``prefix``, in path order."""
        for change in self.client.session_changes(self.zarr_id, self.session_id, prefix):
            entry = None if change["deleted"] else FileEntry(change["size"], change["md5"])
            yield change["path"], entry

    # --- ending ---------------------------------------------------------------------------

    def commit(self) -> str:
        """Commit the session; the archive's checksum once its batch is applied."""
        self._require_open()
        answer: dict[str, Any] = self.client.commit_session(self.zarr_id, self.session_id)
        self.ended = True
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
        self.client.abort_session(self.zarr_id, self.session_id)
        self.ended = True


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
