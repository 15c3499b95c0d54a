"""Download an archive (or one directory of it) with parallel GETs, and verify its checksum.

Files already present with the right size and md5 are kept, so an interrupted download
resumes. Each file is written to a temporary name, hashed while written, and renamed into
place only when its md5 is the one the server's tree records.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import requests

from checksums.local import md5_file
from dandizarr.client.api import ApiClient
from dandizarr.client.digests import tree_checksum
from dandizarr.client.errors import ClientError, TransientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.progress import Progress
from dandizarr.client.results import DownloadResult
from dandizarr.client.retry import TRANSIENT_EXCEPTIONS, request_with_retry

CHUNK = 1 << 20


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
        self._lock = threading.Lock()

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
        entries: list[tuple[str, int, str]] = []
        try:
            with ThreadPoolExecutor(max_workers=self.client.jobs) as pool:
                for remote, relative in zip(files, pool.map(self._fetch_one, files), strict=True):
                    if relative is not None:
                        entries.append((relative, remote.size, remote.digest))
        finally:
            self.progress.close()
        if self.result.failed_files:
            raise ClientError(
                f"{len(self.result.failed_files)} files could not be downloaded, e.g. "
                f"{self.result.failed_files[0]}; run the command again to resume"
            )
        self.result.local_checksum = tree_checksum(entries)
        self.result.server_checksum = expected
        if expected is None and not entries:
            self.result.server_checksum = self.result.local_checksum
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    def _target(self, path: str) -> tuple[str, Path]:
        relative = path[len(self.prefix) + 1 :] if self.prefix else path
        parts = PurePosixPath(relative).parts
        if not parts or any(part in {"", ".", ".."} for part in parts):
            raise ClientError(f"refusing to write the unsafe path {path!r}")
        return relative, self.dest.joinpath(*parts)

    def _fetch_one(self, remote: RemoteFile) -> str | None:
        """Fetch one file (unless already present); the path relative to the prefix."""
        relative, target = self._target(remote.path)
        if (
            target.is_file()
            and target.stat().st_size == remote.size
            and md5_file(target) == remote.digest
        ):
            with self._lock:
                self.result.skipped_files += 1
            self.progress.advance(1, remote.size)
            return relative
        try:
            self._download(remote, target)
        except (ClientError, OSError, requests.RequestException) as error:
            with self._lock:
                self.result.failed_files.append(remote.path)
            self.progress.message(f"{remote.path}: {error}")
            return None
        with self._lock:
            self.result.downloaded_files += 1
            self.result.downloaded_bytes += remote.size
        self.progress.advance(1, remote.size)
        return relative

    def _download(self, remote: RemoteFile, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.dandizarr-{os.getpid()}-{threading.get_ident()}")
        if remote.size == 0 and remote.shard_offset is not None:
            # An empty packed file: no bytes in its shard to ask for.
            tmp.write_bytes(b"")
            self._verify_and_place(remote, tmp, target, 0, hashlib.md5())
            return
        policy = self.client.retry
        last: BaseException | None = None
        located = remote
        for attempt in range(1, policy.attempts + 1):
            if attempt > 1:
                self.client.retries.add()
                policy.sleep(policy.delay(attempt - 1))
            if attempt > 1 or located.download_url is None:
                # A fresh URL from the service: the listing's may have expired.
                located = self.client.locate(self.zarr_id, remote.path)
            assert located.download_url is not None
            ranged = located.range_header()
            try:
                response = request_with_retry(
                    self.client.storage_session,
                    "GET",
                    located.download_url,
                    policy,
                    counter=self.client.retries,
                    stream=True,
                    timeout=self.client.timeout,
                    headers={"Range": ranged} if ranged else None,
                )
                if response.status_code != (206 if ranged else 200):
                    last = ClientError(f"storage answered HTTP {response.status_code}")
                    response.close()
                    continue
                md5 = hashlib.md5()
                size = 0
                with response, tmp.open("wb") as out:
                    for chunk in response.iter_content(CHUNK):
                        md5.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            except TRANSIENT_EXCEPTIONS as error:
                last = error
                continue
            except TransientError as error:
                last = error
                continue
            try:
                self._verify_and_place(remote, tmp, target, size, md5)
                return
            except ClientError as error:
                last = error
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise ClientError(f"download failed after {policy.attempts} tries: {last}")

    @staticmethod
    def _verify_and_place(
        remote: RemoteFile, tmp: Path, target: Path, size: int, md5: hashlib._Hash
    ) -> None:
        """Rename ``tmp`` into place if it is the file the tree records; else ClientError."""
        if size == remote.size and md5.hexdigest() == remote.digest:
            os.replace(tmp, target)
            return
        raise ClientError(
            f"got {size} bytes with md5 {md5.hexdigest()}, expected {remote.size} bytes "
            f"with md5 {remote.digest}"
        )
