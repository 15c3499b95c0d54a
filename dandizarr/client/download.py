"""Download an archive (or one directory of it) with parallel GETs, and verify its checksum.

Every file's URL (and a packed file's byte range of its shard) comes from the paged listing,
a page of signed URLs per request to the service; the GETs go straight to storage on
keep-alive connections, ``jobs`` at a time on one event loop (``storage_gets``); packed files
side by side in a shard come in one GET of their span (``download_files.shard_runs``). Each
file's bytes are hashed as they arrive; a file takes its name only once its size and md5 are
the ones the server's tree records (a few threads, ``FileWriter``, write it under a temporary
name and rename it). The tree checksum is computed from those verified md5s and
compared with the server's. A file whose bytes stay wrong after every try is reported, never
kept.

Files already present with the right size and md5 are kept, so an interrupted download
resumes.

A partial download (``PathSelection``: include and exclude patterns) takes the listed files
the patterns select, each verified as above; it proves those files, not the tree checksum
(docs/partial-work.md).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import requests

from dandizarr.client.api import ApiClient
from dandizarr.client.digests import tree_checksum
from dandizarr.client.download_files import Body, FileWriter, shard_runs, splitter
from dandizarr.client.errors import ClientError, NotFound
from dandizarr.client.file_gets import already_present, fetch_file, temp_path
from dandizarr.client.models import RemoteFile
from dandizarr.client.path_selection import PathSelection
from dandizarr.client.progress import Progress
from dandizarr.client.ranged_gets import RangedBody, RangedDownloads, RangeSlots, fetch_ranged
from dandizarr.client.results import DownloadResult
from dandizarr.client.retry import (
    is_transient_error,
)
from dandizarr.client.storage_gets import CHUNK, Answer, Connections, Fetch, proxied


class Downloader:
    def __init__(
        self,
        client: ApiClient,
        zarr_id: str,
        dest: Path,
        prefix: str,
        progress: Progress,
        selection: PathSelection | None = None,
        ranged: RangedDownloads | None = None,
    ) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.dest = dest
        self.prefix = prefix.strip("/")
        self.progress = progress
        self.result = DownloadResult(server=client.server, zarr_id=zarr_id, dest=str(dest))
        self.result.prefix = self.prefix
        self.selection = selection or PathSelection()
        self.result.includes = list(self.selection.includes)
        self.result.excludes = list(self.selection.excludes)
        self._entries: list[tuple[str, int, str]] = []
        self._writer: FileWriter | None = None
        self.ranged = ranged or RangedDownloads()
        self._slots: RangeSlots | None = None
        self._resuming = True
        self._lock = threading.Lock()

    def run(self) -> DownloadResult:
        started = time.perf_counter()
        archive = self.client.wait_for_checksum(self.zarr_id, progress=self.progress)
        if self.prefix:
            node = self.client.stat(self.zarr_id, self.prefix)
            if node.get("type") != "directory":
                raise ClientError(f"{self.prefix} is not a directory of {self.zarr_id}")
            expected = node["digest"]
            totals: tuple[int, int | None] = (
                int(node.get("file_count") or 0),
                int(node.get("size") or 0),
            )
        else:
            expected = archive.checksum
            totals = archive.file_count, archive.size
        # Each file's URL (and shard range) from the listing, a page signed at a time: no
        # request to the service per file unless its URL fails. The first page before the
        # first GET, the next ones while the GETs run.
        if self.selection.partial:
            pages = self._selected_pages()
            totals = (0, None)  # unknown until listed
        else:
            pages = self.client.iter_file_pages(self.zarr_id, self.prefix, urls=True)
        first = next(pages, [])
        # Into a new or empty directory: no file can be there already, none is looked for.
        self._resuming = self.dest.is_dir() and any(self.dest.iterdir())
        self.dest.mkdir(parents=True, exist_ok=True)
        self.progress.start(*totals)
        try:
            # Threads for what blocks: the next listing pages, hashing files already present,
            # asking the service for a fresh URL, and GETs through a proxy.
            with ThreadPoolExecutor(max_workers=self.client.jobs + 1) as threads:
                self._writer = FileWriter(backlog=self.client.jobs)
                try:
                    asyncio.run(self._fetch_all(first, pages, threads))
                finally:
                    self._writer.close()
        finally:
            self.progress.close()
        if self.result.failed_files:
            raise ClientError(
                f"{len(self.result.failed_files)} files could not be downloaded, e.g. "
                f"{self.result.failed_files[0]}; run the command again to resume"
            )
        if self.selection.partial:
            return self._partial_result(archive.checksum, started)
        # From the md5s verified above: the files on disk are those bytes.
        self.result.local_checksum = tree_checksum(self._entries)
        self.result.server_checksum = expected
        if expected is None and not self._entries:
            self.result.server_checksum = self.result.local_checksum
        if self.result.ok:
            self.result.verified = (
                f"each file's size and md5, and the tree checksum {self.result.server_checksum}"
            )
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    def _selected_pages(self) -> Iterator[list[RemoteFile]]:
        """The listing's pages, from the deepest directory every include lies under, with
        only the files the selection takes."""
        root = self.selection.listing_root()
        if self.prefix and not (root == self.prefix or root.startswith(self.prefix + "/")):
            if self.prefix.startswith(root + "/") or not root:
                root = self.prefix
            else:
                return  # the includes lie outside --path: nothing to take
        try:
            for page in self.client.iter_file_pages(self.zarr_id, root, urls=True):
                yield [f for f in page if self.selection.selects(f.path)]
        except NotFound:
            return  # no such directory: nothing under it to take

    def _partial_result(self, archive_checksum: str | None, started: float) -> DownloadResult:
        """What a partial download proves: every file taken has the size and md5 the
        service's listing gives it (the entries its tree checksum is computed from); the
        archive's checksum covers the whole tree, so a part cannot prove it."""
        if not self._entries:
            raise ClientError(
                f"no file of {self.zarr_id}"
                + (f" under {self.prefix}" if self.prefix else "")
                + " matches the include and exclude patterns"
            )
        self.result.server_checksum = archive_checksum
        self.result.verified = (
            f"partial: each of the {len(self._entries):,} files matches the server's size and "
            f"md5 (the archive checksum {archive_checksum} covers the whole tree and is not "
            "checked)"
        )
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    async def _fetch_all(
        self,
        first: list[RemoteFile],
        pages: Iterator[list[RemoteFile]],
        threads: ThreadPoolExecutor,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: deque[list[RemoteFile]] = deque()
        arrived = asyncio.Event()
        listed = False

        def add(page: list[RemoteFile]) -> None:
            queue.extend(shard_runs(page))
            self.result.files += len(page)
            self.result.bytes += sum(f.size for f in page)
            arrived.set()

        def list_the_rest() -> None:
            for page in pages:
                loop.call_soon_threadsafe(add, page)

        async def listing() -> None:
            nonlocal listed
            try:
                await loop.run_in_executor(threads, list_the_rest)
            finally:
                listed = True
                arrived.set()

        through_proxy = any(f.download_url and proxied(f.download_url) for f in first[:1])
        # Big files' range GETs, on connections of their own (ranged_gets).
        slots = []
        for _ in range(min(self.client.jobs, self.ranged.parallel)):
            if through_proxy:
                slots.append((self._threaded_fetch(threads), lambda: None))
            else:
                own = Connections(self.client.timeout)
                slots.append((own.get, own.close))
        self._slots = RangeSlots(slots)

        async def worker(number: int) -> None:
            connections = Connections(self.client.timeout)
            fetch: Fetch = self._threaded_fetch(threads) if through_proxy else connections.get
            try:
                while True:
                    if queue:
                        run = queue.popleft()
                        if len(run) == 1:
                            await self._fetch_one(run[0], number, fetch, threads)
                        else:
                            await self._fetch_run(run, number, fetch, threads)
                    elif listed:
                        return
                    else:
                        arrived.clear()
                        await arrived.wait()
            finally:
                connections.close()

        add(first)
        try:
            await asyncio.gather(listing(), *(worker(n) for n in range(self.client.jobs)))
        finally:
            self._slots.close()

    def _threaded_fetch(self, threads: ThreadPoolExecutor) -> Fetch:
        """``fetch`` through ``requests`` in a thread (it honours the proxy settings)."""
        session = self.client.storage_session
        timeout = self.client.timeout

        def blocking(
            url: str, headers: dict[str, str], expect: int, sink: Callable[[bytes], None]
        ) -> Answer:
            with session.get(url, headers=headers, stream=True, timeout=timeout) as response:
                answer = Answer(
                    response.status_code, {k.lower(): v for k, v in response.headers.items()}
                )
                if response.status_code != expect:
                    answer.error_body = response.raw.read(4096)
                    return answer
                for chunk in response.iter_content(CHUNK):
                    sink(chunk)
            return answer

        async def fetch(
            url: str, headers: dict[str, str], expect: int, sink: Callable[[bytes], None]
        ) -> Answer:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(threads, blocking, url, headers, expect, sink)

        return fetch

    def _target(self, path: str) -> tuple[str, Path]:
        relative = path[len(self.prefix) + 1 :] if self.prefix else path
        parts = PurePosixPath(relative).parts
        if not parts or any(part in {"", ".", ".."} for part in parts):
            raise ClientError(f"refusing to write the unsafe path {path!r}")
        return relative, self.dest.joinpath(*parts)

    async def _fetch_one(
        self, remote: RemoteFile, worker: int, fetch: Fetch, threads: ThreadPoolExecutor
    ) -> None:
        """Fetch one file (unless already present) and record it, or record its failure."""
        relative, target = self._target(remote.path)
        if self._resuming and await already_present(remote, target, threads):
            self.result.skipped_files += 1
            self._entries.append((relative, remote.size, remote.digest))
            self.progress.advance(1, remote.size)
            return
        try:
            body: Body | RangedBody
            if self.ranged.applies(remote):
                body = await self._download_ranged(remote, target, worker, threads)
            else:
                body = await fetch_file(
                    remote,
                    temp_path(target, worker),
                    fetch,
                    self._locator(remote, threads),
                    self.client.retry,
                    self.client.retries,
                )
        except (ClientError, OSError, requests.RequestException) as error:
            self._failed(remote, error)
            return
        self._write(remote, relative, target, body)

    async def _fetch_run(
        self, run: list[RemoteFile], worker: int, fetch: Fetch, threads: ThreadPoolExecutor
    ) -> None:
        """Packed files side by side in one shard: one GET of their span, each file's share
        verified on its own. Any file that does not arrive right this way (the GET failed,
        its md5 is wrong, it is there already) goes the way of a single file, retries and
        all."""
        targets = [self._target(remote.path) for remote in run]
        if self._resuming:
            for remote in run:
                await self._fetch_one(remote, worker, fetch, threads)
            return
        bodies = [Body(temp_path(target, worker)) for _, target in targets]
        first, last = run[0], run[-1]
        assert first.download_url is not None and first.shard_offset is not None
        assert last.shard_offset is not None
        span = f"bytes={first.shard_offset}-{last.shard_offset + last.size - 1}"
        feed = splitter(bodies, [remote.size for remote in run])
        try:
            answer: Answer | None = await fetch(first.download_url, {"Range": span}, 206, feed)
        except Exception as error:  # each file then tries on its own, under the retry policy
            if not is_transient_error(error):
                raise
            answer = None
        for remote, (relative, target), body in zip(run, targets, bodies, strict=True):
            if (
                answer is not None
                and answer.status == 206
                and body.size == remote.size
                and body.md5.hexdigest() == remote.digest
            ):
                self._write(remote, relative, target, body)
            else:
                body.discard()
                await self._fetch_one(remote, worker, fetch, threads)

    def _write(
        self, remote: RemoteFile, relative: str, target: Path, body: Body | RangedBody
    ) -> None:
        """Queue a verified body for writing; it is recorded once it is in place."""

        def placed(error: OSError | None) -> None:
            if error is not None:
                self._failed(remote, error)
                return
            with self._lock:
                self.result.downloaded_files += 1
                self.result.downloaded_bytes += remote.size
                self._entries.append((relative, remote.size, remote.digest))
            self.progress.advance(1, remote.size)

        assert self._writer is not None
        self._writer.put(body, target, placed)

    def _failed(self, remote: RemoteFile, error: BaseException) -> None:
        with self._lock:
            self.result.failed_files.append(remote.path)
        self.progress.message(f"{remote.path}: {error}")

    async def _download_ranged(
        self, remote: RemoteFile, target: Path, worker: int, threads: ThreadPoolExecutor
    ) -> RangedBody:
        """A big file's bytes in ranges at once, verified (``ranged_gets``)."""
        assert self._slots is not None
        body = await fetch_ranged(
            remote,
            temp_path(target, worker),
            self.ranged,
            self._slots,
            self._locator(remote, threads),
            self.client.retry,
            self.client.retries,
        )
        with self._lock:
            self.result.ranged_files += 1
        return body

    def _locator(
        self, remote: RemoteFile, threads: ThreadPoolExecutor
    ) -> Callable[[], Awaitable[RemoteFile]]:
        """Asks the service for a fresh URL of ``remote`` (the listing's may have expired)."""

        async def locate() -> RemoteFile:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                threads, self.client.locate, self.zarr_id, remote.path
            )

        return locate
