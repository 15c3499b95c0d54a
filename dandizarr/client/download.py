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
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import requests

from dandizarr.client.api import DandizarrClient
from dandizarr.client.errors import ChecksumMismatch, ClientError, TransientError
from dandizarr.client.models import RemoteFile
from dandizarr.client.progress import Progress
from dandizarr.client.retry import TRANSIENT_EXCEPTIONS, request_with_retry
from dandizarr.client.upload import format_bytes, tree_checksum

CHUNK = 1 << 20


@dataclass
class DownloadResult:
    server: str
    zarr_id: str
    dest: str
    prefix: str = ""
    files: int = 0
    bytes: int = 0
    downloaded_files: int = 0
    downloaded_bytes: int = 0
    skipped_files: int = 0
    failed_files: list[str] = field(default_factory=list)
    retries: int = 0
    elapsed_seconds: float = 0.0
    local_checksum: str | None = None
    server_checksum: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed_files and self.local_checksum == self.server_checksum

    def check(self) -> DownloadResult:
        """Raise ChecksumMismatch unless the downloaded tree has the server's checksum."""
        if not self.ok:
            raise ChecksumMismatch(
                f"checksum mismatch: the server holds {self.server_checksum}, the downloaded "
                f"files give {self.local_checksum}",
                expected=self.server_checksum or "",
                actual=self.local_checksum,
            )
        return self

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def summary(self) -> str:
        rate = self.downloaded_files / self.elapsed_seconds if self.elapsed_seconds else 0.0
        line = (
            f"downloaded {self.downloaded_files:,} files ({format_bytes(self.downloaded_bytes)}), "
            f"kept {self.skipped_files:,} already present; {self.elapsed_seconds:.1f} s, "
            f"{rate:,.1f} files/s"
        )
        if self.ok:
            line += f"; checksum {self.server_checksum} verified"
        return line


class Downloader:
    def __init__(
        self,
        client: DandizarrClient,
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
        files = list(self.client.iter_files(self.zarr_id, self.prefix))
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
        if target.is_file() and target.stat().st_size == remote.size:
            from checksums.local import md5_file

            if md5_file(target) == remote.digest:
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
        policy = self.client.retry
        last: BaseException | None = None
        for attempt in range(1, policy.attempts + 1):
            if attempt > 1:
                self.client.retries.add()
                policy.sleep(policy.delay(attempt - 1))
            # A fresh presigned URL for every try: an old one may have expired.
            url = self.client.stat(self.zarr_id, remote.path)["download_url"]
            try:
                response = request_with_retry(
                    self.client.storage_session,
                    "GET",
                    url,
                    policy,
                    counter=self.client.retries,
                    stream=True,
                    timeout=self.client.timeout,
                )
                if response.status_code != 200:
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
            if size == remote.size and md5.hexdigest() == remote.digest:
                os.replace(tmp, target)
                return
            last = ClientError(
                f"got {size} bytes with md5 {md5.hexdigest()}, expected {remote.size} bytes "
                f"with md5 {remote.digest}"
            )
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise ClientError(f"download failed after {policy.attempts} tries: {last}")
