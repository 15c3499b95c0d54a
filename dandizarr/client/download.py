"""Download an archive (or one directory of it) with parallel GETs, and verify its checksum.

Every file's URL (and a packed file's byte range of its shard) comes from the paged listing,
a page of signed URLs per request to the service; the GETs go straight to storage on
keep-alive connections, ``jobs`` at a time on one event loop (``storage_gets``). Each body is
hashed as it arrives and its file is renamed into place only when its size and md5 are the
ones the server's tree records; the tree checksum is computed from those verified md5s and
compared with the server's. A file whose bytes stay wrong after every try is reported, never
kept.

Files already present with the right size and md5 are kept, so an interrupted download
resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import requests

from checksums.local import md5_file
from dandizarr.client.api import ApiClient
from dandizarr.client.digests import tree_checksum
from dandizarr.client.errors import ClientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.progress import Progress
from dandizarr.client.results import DownloadResult
from dandizarr.client.retry import TRANSIENT_EXCEPTIONS, is_transient_status, parse_retry_after
from dandizarr.client.storage_gets import (
    CHUNK,
    TRANSIENT_GET_ERRORS,
    Answer,
    Connections,
    proxied,
)

# A body up to this size is kept in memory until verified, then written with one call.
_IN_MEMORY = 8 << 20

# (url, headers, expected status, sink) -> the answer; the body goes to sink when expected.
Fetch = Callable[[str, dict[str, str], int, Callable[[bytes], None]], Awaitable[Answer]]


class _Body:
    """A file's bytes as they arrive: hashed, kept in memory, or spilled to ``tmp`` when
    large; placed at the target only through ``place`` (after verification)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.md5 = hashlib.md5()
        self.size = 0
        self._parts: list[bytes] = []
        self._fd: int | None = None

    def write(self, chunk: bytes) -> None:
        self.md5.update(chunk)
        self.size += len(chunk)
        if self._fd is None and self.size <= _IN_MEMORY:
            self._parts.append(chunk)
            return
        if self._fd is None:
            self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._parts, pending = [], self._parts
            for part in pending:
                _write_all(self._fd, part)
        _write_all(self._fd, chunk)

    def place(self, target: Path) -> None:
        if self._fd is None:
            self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            _write_all(self._fd, b"".join(self._parts))
            self._parts = []
        os.close(self._fd)
        self._fd = None
        os.replace(self.tmp, target)

    def discard(self) -> None:
        self._parts = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Downloader:
    def __init__(
        self,
        client: ApiClient,
        zarr_id: str,
        dest: Path,
        prefix: str,
        progress: Progress,
    ) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.dest = dest
        self.prefix = prefix.strip("/")
        self.progress = progress
        self.result = DownloadResult(server=client.server, zarr_id=zarr_id, dest=str(dest))
        self.result.prefix = self.prefix
        self._made_directories: set[Path] = set()
        self._entries: list[tuple[str, int, str]] = []

    def run(self) -> DownloadResult:
        started = time.perf_counter()
        archive = self.client.wait_for_checksum(self.zarr_id, progress=self.progress)
        if self.prefix:
            node = self.client.stat(self.zarr_id, self.prefix)
            if node.get("type") != "directory":
                raise ClientError(f"{self.prefix} is not a directory of {self.zarr_id}")
            expected = node["digest"]
        else:
            expected = archive.checksum
        # Each file's URL (and shard range) from the listing, a page signed at a time: no
        # request to the service per file unless its URL fails.
        files = list(self.client.iter_files(self.zarr_id, self.prefix, urls=True))
        self.result.files = len(files)
        self.result.bytes = sum(f.size for f in files)
        self.dest.mkdir(parents=True, exist_ok=True)
        self.progress.start(self.result.files, self.result.bytes)
        try:
            # Threads for what blocks: hashing files already present, asking the service
            # for a fresh URL, and GETs through a proxy.
            with ThreadPoolExecutor(max_workers=self.client.jobs) as threads:
                asyncio.run(self._fetch_all(files, threads))
        finally:
            self.progress.close()
        if self.result.failed_files:
            raise ClientError(
                f"{len(self.result.failed_files)} files could not be downloaded, e.g. "
                f"{self.result.failed_files[0]}; run the command again to resume"
            )
        # From the md5s verified above: the files on disk are those bytes.
        self.result.local_checksum = tree_checksum(self._entries)
        self.result.server_checksum = expected
        if expected is None and not self._entries:
            self.result.server_checksum = self.result.local_checksum
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    async def _fetch_all(self, files: list[RemoteFile], threads: ThreadPoolExecutor) -> None:
        queue = deque(files)
        through_proxy = any(f.download_url and proxied(f.download_url) for f in files[:1])

        async def worker(number: int) -> None:
            connections = Connections()
            fetch: Fetch = connections.get
            if through_proxy:
                fetch = self._threaded_fetch(threads)
            try:
                while queue:
                    await self._fetch_one(queue.popleft(), number, fetch, threads)
            finally:
                connections.close()

        await asyncio.gather(*(worker(n) for n in range(min(self.client.jobs, len(files)))))

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
        if await self._present(remote, target, threads):
            self.result.skipped_files += 1
        else:
            try:
                await self._download(remote, target, worker, fetch, threads)
            except (ClientError, OSError, requests.RequestException) as error:
                self.result.failed_files.append(remote.path)
                self.progress.message(f"{remote.path}: {error}")
                return
            self.result.downloaded_files += 1
            self.result.downloaded_bytes += remote.size
        self._entries.append((relative, remote.size, remote.digest))
        self.progress.advance(1, remote.size)

    @staticmethod
    async def _present(remote: RemoteFile, target: Path, threads: ThreadPoolExecutor) -> bool:
        """Whether ``target`` already holds this file (a resumed download)."""
        try:
            if os.stat(target).st_size != remote.size:
                return False
        except OSError:
            return False
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(threads, md5_file, target) == remote.digest

    def _directory(self, directory: Path) -> None:
        if directory not in self._made_directories:
            directory.mkdir(parents=True, exist_ok=True)
            self._made_directories.add(directory)

    async def _download(
        self,
        remote: RemoteFile,
        target: Path,
        worker: int,
        fetch: Fetch,
        threads: ThreadPoolExecutor,
    ) -> None:
        self._directory(target.parent)
        tmp = target.with_name(f".{target.name}.dandizarr-{os.getpid()}-{worker}")
        if remote.size == 0 and remote.shard_offset is not None:
            # An empty packed file: no bytes in its shard to ask for.
            self._verify_and_place(remote, _Body(tmp), target)
            return
        policy = self.client.retry
        loop = asyncio.get_running_loop()
        last: BaseException | None = None
        retry_after: float | None = None
        located = remote
        relocate = located.download_url is None
        for attempt in range(1, policy.attempts + 1):
            if attempt > 1:
                self.client.retries.add()
                await asyncio.sleep(policy.delay(attempt - 1, retry_after))
                retry_after = None
            if relocate:
                # A fresh URL from the service: the listing's may have expired.
                located = await loop.run_in_executor(
                    threads, self.client.locate, self.zarr_id, remote.path
                )
                relocate = False
            assert located.download_url is not None
            ranged = located.range_header()
            body = _Body(tmp)
            try:
                async with asyncio.timeout(self.client.timeout):
                    answer = await fetch(
                        located.download_url,
                        {"Range": ranged} if ranged else {},
                        206 if ranged else 200,
                        body.write,
                    )
            except (*TRANSIENT_GET_ERRORS, *TRANSIENT_EXCEPTIONS) as error:
                body.discard()
                last = error
                continue
            if answer.status != (206 if ranged else 200):
                body.discard()
                last = ClientError(
                    f"storage answered HTTP {answer.status}: {answer.error_body[:200]!r}"
                )
                if is_transient_status(answer.status):
                    retry_after = parse_retry_after(answer.headers.get("retry-after"))
                else:
                    relocate = True  # refused (an expired URL, for one): ask for a new one
                continue
            try:
                self._verify_and_place(remote, body, target)
                return
            except ClientError as error:
                last = error
                relocate = True
        raise ClientError(f"download failed after {policy.attempts} tries: {last}")

    @staticmethod
    def _verify_and_place(remote: RemoteFile, body: _Body, target: Path) -> None:
        """Put the bytes at ``target`` if they are the file the tree records; else discard
        them and raise ClientError."""
        if body.size == remote.size and body.md5.hexdigest() == remote.digest:
            body.place(target)
            return
        body.discard()
        raise ClientError(
            f"got {body.size} bytes with md5 {body.md5.hexdigest()}, expected {remote.size} "
            f"bytes with md5 {remote.digest}"
        )
