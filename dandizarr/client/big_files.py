"""Files over the service's multipart threshold, sent in parts (docs/api.md, "Big files").

The producer sets them aside; they go in batches of their own once the others are sent (as
many as the service's caps on what one batch declares in parts take). Each file is read once
to hash its parts (and its whole md5 again, so a file changed since the producer hashed it is
not declared with a stale md5), declared with its size and parts, and its parts are PUT several
at once, each with its Content-MD5, streamed from the file, their URLs asked for a page at a
time as the PUTs come to them (``part_urls``). A journal beside the batch journal
(``BatchJournal``) records every finished part: a run killed midway is resumed by the next one
(``resume``), which declares the files again (the service keeps their uploads) and sends only
the parts not yet recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dandizarr.client.api import ApiClient
from dandizarr.client.batch_session import BatchSession
from dandizarr.client.digests import content_md5
from dandizarr.client.errors import ClientError
from dandizarr.client.journal import BatchJournal
from dandizarr.client.part_urls import PartUrls
from dandizarr.client.progress import Progress
from dandizarr.client.results import UploadResult
from dandizarr.client.storage_puts import PutStatus, refused
from dandizarr.client.upload_types import LocalFile
from dandizarr.concurrency import ordered_map
from dandizarr.objectstore.multipart import part_count, part_ranges, part_size

# Bytes read at a time when hashing a file's parts and when streaming a part.
READ_BLOCK = 8 << 20
# Part md5s one start declares at most, whatever the service's caps: about 36 bytes each in its
# body, well within the 32 MiB the service reads.
MAX_PARTS_PER_START = 500_000


@dataclass(frozen=True)
class BigBatchLimits:
    """How far one batch of big files goes: files per request (the service's batch limit),
    and the service's caps on the bytes and parts one batch declares in parts (None: a service
    without them)."""

    files: int
    bytes: int | None = None
    parts: int | None = None


def big_batches(
    files: Sequence[LocalFile], part_bytes: int, limits: BigBatchLimits
) -> Iterator[list[LocalFile]]:
    """``files`` in order, cut into batches within ``limits`` (a file past them alone is a
    batch of its own, which the service refuses by name)."""
    most_parts = min(limits.parts or MAX_PARTS_PER_START, MAX_PARTS_PER_START)
    group: list[LocalFile] = []
    size = parts = 0
    for f in files:
        count = part_count(f.size, part_size(f.size, part_bytes))
        if group and (
            len(group) >= limits.files
            or (limits.bytes is not None and size + f.size > limits.bytes)
            or parts + count > most_parts
        ):
            yield group
            group, size, parts = [], 0, 0
        group.append(f)
        size += f.size
        parts += count
    if group:
        yield group


@dataclass(frozen=True)
class BigFile:
    """A file as declared in parts: its entry of the batch start."""

    path: str
    md5: str
    size: int
    part_size: int
    parts: list[str]

    def declaration(self) -> dict[str, Any]:
        return {"path": self.path, "etag": self.md5, "size": self.size, "parts": self.parts}


def hash_in_parts(file: Path, size: int, part_bytes: int) -> tuple[str, list[str]]:
    """The md5 of the file and of each of its parts, in one read."""
    whole = hashlib.md5(usedforsecurity=False)
    parts = []
    with open(file, "rb") as handle:
        for start, end in part_ranges(size, part_bytes):
            part = hashlib.md5(usedforsecurity=False)
            left = end - start
            while left:
                data = handle.read(min(READ_BLOCK, left))
                if not data:
                    raise ClientError(f"{file} is shorter than when it was listed")
                part.update(data)
                whole.update(data)
                left -= len(data)
            parts.append(part.hexdigest())
        if handle.read(1):
            raise ClientError(f"{file} is longer than when it was listed")
    return whole.hexdigest(), parts


class FileSlice:
    """``[start, end)`` of a file as a streamed PUT body."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self._path, self._start, self._left = path, start, end - start
        self._size = end - start
        self._file: Any = None

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if self._file is None:
            self._file = open(self._path, "rb")  # noqa: SIM115  # closed when drained
            self._file.seek(self._start)
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._file.read(n) if n else b""
        self._left -= len(data)
        if not data:
            self._file.close()
        return data


class PartJournal:
    """The parts of a batch of big files finished so far, beside its ``BatchJournal``: a
    header line with the declared files, then a line per finished part (appended)."""

    def __init__(self, batch_journal: BatchJournal) -> None:
        self.batch_journal = batch_journal
        self.path = batch_journal.path.with_suffix(".parts.jsonl")
        self._lock = threading.Lock()

    def begin(self, files: Sequence[BigFile]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        header = {"files": [f.__dict__ for f in files]}
        tmp.write_text(json.dumps(header) + "\n")
        os.replace(tmp, self.path)

    def done(self, path: str, number: int) -> None:
        line = json.dumps({"path": path, "part": number}) + "\n"
        with self._lock, open(self.path, "a") as handle:
            handle.write(line)

    def load(self) -> tuple[list[BigFile], set[tuple[str, int]]] | None:
        try:
            lines = self.path.read_text().splitlines()
            files = [BigFile(**f) for f in json.loads(lines[0])["files"]]
        except (FileNotFoundError, IndexError, ValueError, TypeError, KeyError):
            return None
        finished = set()
        for line in lines[1:]:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                record = json.loads(line)
                finished.add((str(record["path"]), int(record["part"])))
        return files, finished

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


class BigFileSender:
    """Sends big files in parts in batches of their own, and resumes one a killed run left."""

    def __init__(
        self,
        root: Path,
        client: ApiClient,
        batches: BatchSession,
        result: UploadResult,
        progress: Progress,
        *,
        part_bytes: int,
        wait_timeout: float,
        limits: BigBatchLimits,
        url_lifetime: float,
    ) -> None:
        self.root = root
        self.client = client
        self.batches = batches
        self.result = result
        self.progress = progress
        self.part_bytes = part_bytes
        self.wait_timeout = wait_timeout
        self.limits = limits
        self.url_lifetime = url_lifetime
        self.journal = PartJournal(batches.journal)
        self._lock = threading.Lock()

    def send(self, files: Sequence[LocalFile]) -> None:
        """Send ``files`` in parts, in batches within the service's caps."""
        for group in big_batches(files, self.part_bytes, self.limits):
            self._send_batch(group)

    def _send_batch(self, files: Sequence[LocalFile]) -> None:
        """Declare ``files`` in parts, PUT every part, complete, and wait for the service to
        prove their md5s (ClientError naming a file that does not prove)."""
        big = []
        for f in files:
            size = part_size(f.size, self.part_bytes)
            md5, parts = hash_in_parts(self.root / f.path, f.size, size)
            if md5 != f.md5:
                raise ClientError(f"{f.path} changed while it was being uploaded; upload again")
            big.append(BigFile(f.path, md5, f.size, size, parts))
        self.progress.message(f"sending {len(big)} big file(s) in parts...")
        self.journal.begin(big)
        answer = self.batches.start(
            lambda: self.client.start_batch_in_parts(
                self.batches.zarr_id, [b.declaration() for b in big]
            ),
            files=len(big),
            paths=[b.path for b in big],
            kind="batch of big files",
        )
        self._put_and_complete(big, answer, set())

    def resume(self) -> bool:
        """Finish the batch of big files a killed run of this machine left open, sending only
        the parts it had not finished; False when there is none to resume."""
        loaded = self.journal.load()
        if loaded is None:
            return False
        files, finished = loaded
        if not (
            self.batches.journal.is_mine_to_resume()
            and self.client.has_open_batch(self.batches.zarr_id)
        ):
            self.journal.clear()
            return False
        for f in files:
            local = self.root / f.path
            if not local.is_file() or local.stat().st_size != f.size:
                self.journal.clear()
                return False  # changed since: the leftover batch is settled as any other
        self.progress.message(
            f"resuming {len(files)} big file(s): {len(finished)} part(s) were sent before"
        )
        answer = self.client.add_in_parts(self.batches.zarr_id, [f.declaration() for f in files])
        self.batches.journal.record(len(files))  # ours now (this process)
        self.batches.is_open = True
        self._put_and_complete(files, answer, finished)
        return True

    def _put_and_complete(
        self, files: Sequence[BigFile], answer: list[dict[str, Any]], finished: set[tuple[str, int]]
    ) -> None:
        urls = PartUrls(
            self.client,
            self.batches.zarr_id,
            answer,
            {f.path: len(f.parts) for f in files},
            fresh_for=self.url_lifetime / 2,
        )
        todo = (
            (f, number)
            for f in files
            for number in range(1, len(f.parts) + 1)
            if (f.path, number) not in finished
        )

        def put(job: tuple[BigFile, int]) -> None:
            f, number = job
            start = (number - 1) * f.part_size
            end = min(start + f.part_size, f.size)

            def attempt(url: str) -> Any:
                return self.client.storage_request(
                    "PUT",
                    url,
                    body_factory=lambda: FileSlice(self.root / f.path, start, end),
                    headers={"Content-MD5": content_md5(f.parts[number - 1])},
                )

            response = attempt(urls.url(f.path, number))
            if response.status_code != 200 and refused(job, response).status is PutStatus.EXPIRED:
                # Its URL expired or was refused as such: a fresh page, once.
                response = attempt(urls.url(f.path, number, renew=True))
            if response.status_code != 200:
                raise ClientError(
                    f"storage refused part {number} of {f.path} ({response.status_code}): "
                    f"{response.text[:200]}"
                )
            self.journal.done(f.path, number)
            with self._lock:
                self.result.put_requests += 1
                self.result.uploaded_bytes += end - start
                self.progress.advance(0, end - start)

        # A bounded look-ahead: neither futures nor URLs are held for every part at once.
        jobs = self.client.jobs
        with ThreadPoolExecutor(jobs, thread_name_prefix="dandizarr-part") as pool:
            for _ in ordered_map(pool, put, todo, ahead=2 * jobs):
                pass

        def resend(missing: set[str]) -> None:
            # "path (part N)": the server names what it did not find as declared.
            again = {(f, n) for f in files for n in range(1, len(f.parts) + 1)}
            wanted = [job for job in again if job[0].path in missing or _part_name(job) in missing]
            with ThreadPoolExecutor(self.client.jobs) as pool:
                list(pool.map(put, wanted))

        response = self.batches.complete(resend, kind="batch of big files")
        self.journal.clear()
        self.result.uploaded_files += len(files)
        self.progress.advance(len(files), 0)
        batch_id = (response.json() or {}).get("batch") if response is not None else None
        if isinstance(batch_id, int):
            self.progress.message("waiting for the server to prove the big files' md5s...")
            batch = self.client.wait_for_batch(
                self.batches.zarr_id, batch_id, timeout=self.wait_timeout, progress=self.progress
            )
            if batch.get("state") != "applied":
                raise ClientError(
                    f"the server did not apply the big files: {batch.get('error') or batch}"
                )


def _part_name(job: tuple[BigFile, int]) -> str:
    return f"{job[0].path} (part {job[1]})"
