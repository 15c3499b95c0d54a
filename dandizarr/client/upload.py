"""Upload a directory into an archive: plan, hash, batch, PUT in parallel, complete, verify.

The pipeline: a producer thread hashes files (``checksums.local.md5_files``, in parallel) and
cuts what the server lacks into batches; the main thread runs one batch at a time (the server
allows one open batch per archive) and PUTs its files through a thread pool. Hashing runs
ahead, so per batch only "POST upload" and "POST complete" are serial.

Every file is read again for its PUT and its md5 compared with the one declared in the batch:
a file that changed on disk since it was hashed is not uploaded but reported.

With ``pack`` (docs/sharded.md) the chunk files of the arrays are not PUT one by one but
packed into shards and sent in pack batches: that path is ``dandizarr.client.pack``, whose
``PackUploader`` the ``Uploader`` hands the chunk files (producer thread) and the pack batches
(main thread). Metadata and files off the chunk grids go first, in ordinary batches.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import requests

from dandizarr.client.api import DandizarrClient
from dandizarr.client.errors import (
    ApiError,
    BatchConflict,
    ChecksumMismatch,
    ClientError,
    NotFound,
    TransientError,
)
from dandizarr.client.journal import BatchJournal
from dandizarr.client.models import Archive, RemoteFile
from dandizarr.client.progress import Progress
from dandizarr.client.retry import request_with_retry

if TYPE_CHECKING:
    from dandizarr.client.pack import PackUploader, PreparedShard

_Started = TypeVar("_Started")

# Files up to this size are read whole (hashed before the PUT, so a changed file is never
# sent); larger ones are streamed and hashed while sent.
STREAM_THRESHOLD = 16 << 20
# A batch's PUTs must finish before its URLs expire; bounding its bytes keeps that likely.
DEFAULT_MAX_BATCH_BYTES = 2 << 30
# Fresh URLs for one batch (expired URLs, files changed on disk) at most this many times.
MAX_BATCH_RESTARTS = 4


@dataclass(frozen=True)
class LocalFile:
    path: str
    size: int
    md5: str


@dataclass(frozen=True)
class UploadOptions:
    dandiset: str | None = None
    name: str | None = None
    zarr_id: str | None = None
    sync: bool = False
    cancel_open_batch: bool = False
    hash_jobs: int | None = None
    checksum_timeout: float = 600.0
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    # Chunk files go into shard objects (docs/sharded.md); a new archive is created sharded.
    pack: bool = False
    # Uncompressed chunk bytes a shard aims at (None: sharding.packing's default, 64 MiB).
    shard_target_bytes: int | None = None


@dataclass
class UploadResult:
    server: str
    zarr_id: str = ""
    name: str = ""
    dandiset: str = ""
    local_files: int = 0
    local_bytes: int = 0
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    skipped_files: int = 0
    skipped_bytes: int = 0
    deleted_files: int = 0
    # Present on the server, absent locally, and kept (no --sync).
    remote_only_files: int = 0
    changed_files: list[str] = field(default_factory=list)
    batches: int = 0
    batch_restarts: int = 0
    # Of the uploaded files, those sent as members of shards, the shards and pack batches
    # (pack batches count in ``batches`` too).
    packed_files: int = 0
    packed_bytes: int = 0
    shards: int = 0
    pack_batches: int = 0
    put_requests: int = 0
    retries: int = 0
    elapsed_seconds: float = 0.0
    # Wall time of the serial steps: "scan" (listing both sides), "start" and "complete"
    # (the batch calls), "put" (waiting for a batch's PUTs), "verify" (the final checksum);
    # with pack, "build" (waiting for shards to be built) and "apply" (the server's check).
    phase_seconds: dict[str, float] = field(default_factory=dict)
    local_checksum: str | None = None
    expected_checksum: str | None = None
    server_checksum: str | None = None

    @property
    def ok(self) -> bool:
        return (
            not self.changed_files
            and self.expected_checksum is not None
            and self.server_checksum == self.expected_checksum
        )

    @property
    def files_per_second(self) -> float:
        return self.uploaded_files / self.elapsed_seconds if self.elapsed_seconds else 0.0

    @property
    def bytes_per_second(self) -> float:
        return self.uploaded_bytes / self.elapsed_seconds if self.elapsed_seconds else 0.0

    def check(self) -> UploadResult:
        """Raise unless ``ok``: ChecksumMismatch, or ClientError naming the changed files."""
        if self.changed_files:
            raise ClientError(
                f"{len(self.changed_files)} files changed on disk during the upload and were not "
                f"uploaded, e.g. {self.changed_files[0]}"
            )
        if not self.ok:
            raise ChecksumMismatch(
                f"checksum mismatch: the server holds {self.server_checksum}, the local files "
                f"give {self.expected_checksum}",
                expected=self.expected_checksum or "",
                actual=self.server_checksum,
            )
        return self

    def add_time(self, phase: str, since: float) -> None:
        self.phase_seconds[phase] = round(
            self.phase_seconds.get(phase, 0.0) + time.perf_counter() - since, 3
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            ok=self.ok,
            files_per_second=round(self.files_per_second, 2),
            bytes_per_second=round(self.bytes_per_second, 1),
        )
        return data

    def summary(self) -> str:
        line = f"uploaded {self.uploaded_files:,} files ({format_bytes(self.uploaded_bytes)})"
        if self.shards:
            line += f", {self.packed_files:,} of them in {self.shards:,} shards"
        line += f", skipped {self.skipped_files:,} already on the server"
        if self.deleted_files:
            line += f", deleted {self.deleted_files:,}"
        line += (
            f"; {self.elapsed_seconds:.1f} s, {self.files_per_second:,.1f} files/s, "
            f"{format_bytes(self.bytes_per_second)}/s"
        )
        if self.ok:
            line += f"; checksum {self.server_checksum} verified"
        return line


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def content_md5(md5_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(md5_hex)).decode("ascii")


def tree_checksum(entries: Iterable[tuple[str, int, str]]) -> str:
    """The archive checksum ``md5-count--size`` of these files, as the server computes it."""
    from checksums import compute_tree

    summary = compute_tree(sorted(entries))
    digest = str(summary.digest)
    return digest if "--" in digest else f"{digest}-{summary.count}--{summary.size}"


class PutStatus(Enum):
    OK = "ok"
    CHANGED = "changed"  # the file on disk is no longer what was hashed
    EXPIRED = "expired"  # storage refused the URL: a fresh batch is needed
    FAILED = "failed"  # any other error, after retries
    ABORTED = "aborted"  # not tried: the batch is being abandoned


@dataclass(frozen=True)
class PutOutcome:
    entry: Any  # LocalFile, or pack.PreparedShard for a pack batch
    status: PutStatus
    error: str = ""


def _raise_unless_open_batch(error: BatchConflict) -> None:
    """A 409 for another reason than an open batch (a loose archive refusing shards, a
    conversion into shards running) is told as the server says it."""
    if "batch" not in error.detail:
        raise ClientError(f"the server refused the batch: {error.detail}") from None


class FileChangedError(Exception):
    pass


class HashingReader:
    """A file body for a streamed PUT that hashes what it sends and stops at the declared size."""

    def __init__(self, path: Path, size: int) -> None:
        self._file = path.open("rb")
        self._remaining = size
        self._size = size
        self.md5 = hashlib.md5()

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if self._remaining <= 0:
            self._file.close()
            return b""
        n = self._remaining if n is None or n < 0 else min(n, self._remaining)
        data = self._file.read(n)
        if not data:
            self._file.close()
            raise FileChangedError("the file is shorter than when it was hashed")
        self._remaining -= len(data)
        self.md5.update(data)
        return data

    def close(self) -> None:
        self._file.close()


def _storage_refused(response: requests.Response) -> bool:
    """Storage turned the URL down as such (expired, or signed wrongly), not the body."""
    if response.status_code == 403:
        return True
    return response.status_code == 400 and "expired" in response.text.lower()


def _bad_digest(response: requests.Response) -> bool:
    return response.status_code == 400 and (
        "BadDigest" in response.text or "InvalidDigest" in response.text
    )


_DONE = object()


def _no_chunk(path: str) -> bool:
    """The chunk test of an upload without ``pack``: every file is loose."""
    return False


def _refused(item: Any, response: requests.Response) -> PutOutcome:
    """The outcome of a PUT storage did not accept."""
    if _bad_digest(response):
        # What was read matched the hash, so storage got other bytes than were sent.
        return PutOutcome(
            item, PutStatus.FAILED, f"storage saw a different md5: HTTP {response.status_code}"
        )
    text = response.text.strip().replace("\n", " ")[:200]
    if _storage_refused(response):
        return PutOutcome(item, PutStatus.EXPIRED, f"HTTP {response.status_code}: {text}")
    return PutOutcome(item, PutStatus.FAILED, f"HTTP {response.status_code}: {text}")


class Uploader:
    def __init__(
        self, client: DandizarrClient, root: Path, options: UploadOptions, progress: Progress
    ) -> None:
        self.client = client
        self.root = root
        self.options = options
        self.progress = progress
        self.result = UploadResult(server=client.server)
        self.archive: Archive | None = None
        self.journal: BatchJournal | None = None
        self._batch_open = False
        self._batch_number = 0
        self._abort = threading.Event()
        self._stop = threading.Event()
        self._counter_lock = threading.Lock()
        self._entries: list[LocalFile] = []
        # Called with each shard once built, before its batch starts (tests corrupt members).
        self.after_build: Callable[[PreparedShard], None] | None = None
        # The pack path (dandizarr.client.pack), with ``pack``.
        self.packer: PackUploader | None = None
        if options.pack:
            from dandizarr.client.pack import PackUploader

            self.packer = PackUploader(self)

    @property
    def zarr_id(self) -> str:
        assert self.archive is not None
        return self.archive.zarr_id

    # --- the whole run -----------------------------------------------------------------------

    def run(self) -> UploadResult:
        from checksums.local import iter_local_files

        started = time.perf_counter()
        if not self.root.is_dir():
            raise ClientError(f"{self.root} is not a directory")
        if not self.client.token:
            raise ClientError("uploading needs an API token: give --token or set DANDIZARR_TOKEN")
        info = self.client.info()
        self.archive = self._resolve_archive()
        self.result.zarr_id, self.result.name = self.archive.zarr_id, self.archive.name
        self.result.dandiset = self.archive.dandiset
        self.journal = BatchJournal(self.client.server, self.zarr_id)
        self._settle_open_batch()
        # A batch completed just before (by a killed run, say) may still be propagating; the
        # listing must include it, or its files would be uploaded again.
        self.client.wait_for_checksum(
            self.zarr_id, timeout=self.options.checksum_timeout, progress=self.progress
        )
        self.progress.message(f"listing zarr archive {self.zarr_id} on {self.client.server}...")
        scan_started = time.perf_counter()
        remote = {f.path: f for f in self.client.iter_files(self.zarr_id)}
        local = list(iter_local_files(self.root))
        self.result.local_files = len(local)
        self.result.local_bytes = sum(size for _, size in local)
        local_paths = {path for path, _ in local}
        remote_only = [path for path in remote if path not in local_paths]
        if remote_only and self.options.sync:
            self.progress.message(f"deleting {len(remote_only):,} files absent locally...")
            self.client.delete_files(self.zarr_id, remote_only)
            self.result.deleted_files = len(remote_only)
        else:
            self.result.remote_only_files = len(remote_only)
            if remote_only:
                self.progress.message(
                    f"{len(remote_only):,} files on the server are absent locally and are kept "
                    "(--sync deletes them)"
                )
        if self.packer is not None:
            self.packer.plan_layouts([path for path, _ in local], info)
        self.result.add_time("scan", scan_started)
        self.progress.start(self.result.local_files, self.result.local_bytes)
        try:
            self._pipeline([path for path, _ in local], remote, info)
        finally:
            self.progress.close()
            if self.packer is not None:
                self.packer.cleanup()
        verify_started = time.perf_counter()
        self._verify(remote if not self.options.sync else {}, local_paths)
        self.result.add_time("verify", verify_started)
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    def _resolve_archive(self) -> Archive:
        options = self.options
        if options.zarr_id:
            archive = self.client.get_archive(options.zarr_id)
            if options.dandiset and archive.dandiset != options.dandiset:
                raise ClientError(
                    f"zarr archive {archive.zarr_id} belongs to dandiset {archive.dandiset}, "
                    f"not {options.dandiset}"
                )
        else:
            if not options.dandiset:
                raise ClientError("give --dandiset (and optionally --name), or --zarr-id")
            self.client.get_dandiset(options.dandiset)  # "does not exist" before anything else
            name = options.name or self.root.resolve().name
            found = self.client.find_archive(options.dandiset, name)
            if found is None:
                try:
                    found = self.client.create_archive(
                        options.dandiset, name, layout="sharded" if options.pack else None
                    )
                    layout = ", sharded" if options.pack else ""
                    self.progress.message(f"created zarr archive {found.zarr_id} ({name}{layout})")
                except ApiError as error:
                    # Someone created it between our look-up and our POST.
                    found = self.client.find_archive(options.dandiset, name)
                    if found is None:
                        raise error from None
            archive = found
        if archive.frozen:
            raise ClientError(
                f"zarr archive {archive.zarr_id} is frozen (a version of its dandiset was "
                "published); it cannot be changed"
            )
        if options.pack and archive.layout != "sharded":
            raise ClientError(
                f"zarr archive {archive.zarr_id} is {archive.layout}: --pack needs a sharded "
                "archive (one created by an upload with --pack, or converted with POST pack/); "
                "upload without --pack, or into a new archive"
            )
        return archive

    def _settle_open_batch(self) -> None:
        """Deal with a batch left open on the archive before starting our own."""
        assert self.journal is not None
        if not self.client.batch_open(self.zarr_id):
            self.journal.clear()
            return
        if self.journal.is_mine_to_resume():
            self.progress.message("finishing this machine's batch left open by an earlier run")
            try:
                response = self.client.complete_batch(self.zarr_id)
            except NotFound:
                response = None
            if response is not None and response.status_code != 200:
                self.progress.message("  its files are not all there; cancelling it")
                self.client.cancel_batch(self.zarr_id)
            elif response is not None:
                self._wait_for_leftover_pack(response)
            self.journal.clear()
            return
        if self.options.cancel_open_batch:
            self.progress.message("cancelling the batch another client left open")
            self.client.cancel_batch(self.zarr_id)
            return
        raise BatchConflict(
            f"zarr archive {self.zarr_id} has an upload batch open that this machine did not "
            "start (another upload is running, or one was interrupted elsewhere). Wait for it "
            "to finish, or rerun with --cancel-open-batch to cancel it (which deletes the files "
            "it uploaded).",
            status=409,
            method="GET",
            url=self.client.url(f"/api/zarr/{self.zarr_id}/upload/"),
        )

    def _wait_for_leftover_pack(self, response: requests.Response) -> None:
        """A pack batch completed on resume is applied by the server's worker: wait for it,
        so the listing that follows includes its files (a failed one is simply redone)."""
        body = response.json() if response.content else {}
        batch_id = body.get("batch") if isinstance(body, dict) else None
        if not isinstance(batch_id, int):
            return
        with contextlib.suppress(NotFound):
            batch = self.client.wait_for_batch(
                self.zarr_id,
                batch_id,
                timeout=self.options.checksum_timeout,
                progress=self.progress,
            )
            if batch.get("state") == "failed":
                self.progress.message(
                    f"  the server refused that batch ({batch.get('error')}); its files are "
                    "sent again"
                )

    def _verify(self, remote: dict[str, RemoteFile], local_paths: set[str]) -> None:
        entries = [(e.path, e.size, e.md5) for e in self._entries]
        self.result.local_checksum = tree_checksum(entries)
        kept = [(f.path, f.size, f.digest) for p, f in remote.items() if p not in local_paths]
        self.result.expected_checksum = (
            tree_checksum(entries + kept) if kept else self.result.local_checksum
        )
        archive = self.client.wait_for_checksum(
            self.zarr_id, timeout=self.options.checksum_timeout, progress=self.progress
        )
        self.result.server_checksum = archive.checksum
        if archive.checksum is None and archive.file_count == 0 and not entries + kept:
            self.result.server_checksum = self.result.expected_checksum

    # --- hashing and batching ----------------------------------------------------------------

    def _pipeline(self, paths: list[str], remote: dict[str, RemoteFile], info: Any) -> None:
        from dandizarr.client.pack import PackBatch

        batches: queue.Queue[Any] = queue.Queue(maxsize=4)
        producer = threading.Thread(
            target=self._produce,
            args=(paths, remote, info, batches),
            name="dandizarr-hash",
            daemon=True,
        )
        producer.start()
        pool = ThreadPoolExecutor(max_workers=self.client.jobs, thread_name_prefix="dandizarr-put")
        try:
            while True:
                item = batches.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    if isinstance(item, ClientError):
                        raise item
                    raise ClientError(f"reading the local files failed: {item}") from item
                if isinstance(item, PackBatch):
                    assert self.packer is not None
                    self.packer.upload_batch(item, pool)
                else:
                    self._upload_batch(item, pool)
        except BaseException:
            self._abort.set()
            pool.shutdown(wait=True, cancel_futures=True)
            # The journal also covers an interruption between "POST upload" reaching the
            # server and its answer reaching us.
            if self._batch_open or (self.journal is not None and self.journal.exists()):
                self._cancel_quietly()
            raise
        finally:
            self._stop.set()
            pool.shutdown(wait=True)
            producer.join(timeout=5)
            while True:  # shards built ahead and never sent
                try:
                    left = batches.get_nowait()
                except queue.Empty:
                    break
                if isinstance(left, PackBatch):
                    left.discard()

    def _produce(
        self,
        paths: list[str],
        remote: dict[str, RemoteFile],
        info: Any,
        out: queue.Queue[Any],
    ) -> None:
        from checksums.local import md5_files

        batch_limit: int = info.batch_limit

        def put(item: Any) -> bool:
            while not self._stop.is_set():
                try:
                    out.put(item, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        jobs = self.options.hash_jobs or min(8, os.cpu_count() or 1)
        hashed = md5_files(self.root, paths, jobs=jobs)
        is_chunk = self.packer.chunk_test() if self.packer is not None else _no_chunk
        held: list[LocalFile] = []  # chunk files, packed once hashing is done
        try:
            batch: list[LocalFile] = []
            batch_bytes = 0

            def add_loose(entry: LocalFile) -> bool:
                nonlocal batch, batch_bytes
                if batch and (
                    len(batch) >= batch_limit
                    or batch_bytes + entry.size > self.options.max_batch_bytes
                ):
                    if not put(batch):
                        return False
                    batch, batch_bytes = [], 0
                batch.append(entry)
                batch_bytes += entry.size
                return True

            for path, size, md5 in hashed:
                if self._stop.is_set():
                    return
                entry = LocalFile(str(path), int(size), md5)
                self._entries.append(entry)
                known = remote.get(entry.path)
                if known is not None and known.size == entry.size and known.digest == entry.md5:
                    self.result.skipped_files += 1
                    self.result.skipped_bytes += entry.size
                    self.progress.advance(1, entry.size)
                    continue
                if is_chunk(entry.path):
                    held.append(entry)
                elif not add_loose(entry):
                    return
            if held:
                assert self.packer is not None
                plans, loose = self.packer.plan_shards([e.path for e in held])
                by_path = {e.path: e for e in held}
                for path in loose:
                    if not add_loose(by_path[path]):
                        return
                if batch and not put(batch):
                    return
                batch = []
                if not self.packer.produce(plans, by_path, info, put):
                    return
            if batch and not put(batch):
                return
            put(_DONE)
        except BaseException as error:
            put(error)
        finally:
            close = getattr(hashed, "close", None)
            if close is not None:
                close()

    # --- one batch ---------------------------------------------------------------------------

    def _upload_batch(self, entries: list[LocalFile], pool: ThreadPoolExecutor) -> None:
        pending = entries
        restarts = 0
        while pending:
            started = time.perf_counter()
            urls = self._start(pending)
            self.result.add_time("start", started)
            started = time.perf_counter()
            outcomes = list(pool.map(self._put_one, pending, urls))
            self.result.add_time("put", started)
            changed = [o.entry for o in outcomes if o.status is PutStatus.CHANGED]
            expired = [o for o in outcomes if o.status is PutStatus.EXPIRED]
            failed = [o for o in outcomes if o.status is PutStatus.FAILED]
            done = [o.entry for o in outcomes if o.status is PutStatus.OK]
            for entry in changed:
                self.result.changed_files.append(entry.path)
                self.progress.message(
                    f"{entry.path} changed on disk after it was hashed; not uploaded"
                )
            if failed:
                first = failed[0]
                more = f" (and {len(failed) - 1} more files)" if len(failed) > 1 else ""
                raise ClientError(f"uploading {first.entry.path} failed: {first.error}{more}")
            if changed or expired:
                # The server cannot drop files from an open batch, and refused URLs need new
                # ones: cancel it and send what remains in a fresh one.
                self._cancel()
                self._unadvance(done)
                restarts += 1
                self.result.batch_restarts += 1
                if expired and restarts > MAX_BATCH_RESTARTS:
                    raise ClientError(
                        f"storage kept refusing the upload URLs of {expired[0].entry.path} "
                        f"and {len(expired) - 1} more: {expired[0].error}"
                    )
                if expired:
                    self.progress.message(
                        f"{len(expired)} upload URLs were refused ({expired[0].error}); "
                        "starting the batch again with fresh ones"
                    )
                changed_paths = {e.path for e in changed}
                pending = [e for e in pending if e.path not in changed_paths]
                continue
            started = time.perf_counter()
            self._complete(pending, urls)
            self.result.add_time("complete", started)
            self.result.batches += 1
            self.result.uploaded_files += len(pending)
            self.result.uploaded_bytes += sum(e.size for e in pending)
            return

    def _start(self, pending: Sequence[LocalFile]) -> list[str]:
        body = [(e.path, e.md5) for e in pending]
        return self._open_batch(
            lambda: self.client.start_batch(self.zarr_id, body),
            files=len(pending),
            paths=[e.path for e in pending],
            kind="batch",
        )

    def _open_batch(
        self, send: Callable[[], _Started], *, files: int, paths: list[str], kind: str
    ) -> _Started:
        """POST a batch start (``send``: a loose or a pack batch), recorded in the journal.

        A 409 is another client's open batch, unless the POST was retried: then our first
        try opened the batch and its answer was lost, so it is cancelled and sent again. A
        400 naming paths is told with them.
        """
        assert self.journal is not None
        self.journal.record(files)
        retries_before = self.client.retries.count
        try:
            started = send()
        except BatchConflict as error:
            if self.client.retries.count == retries_before:
                self.journal.clear()
                _raise_unless_open_batch(error)
                raise BatchConflict(
                    f"another upload batch was opened on zarr archive {self.zarr_id} while this "
                    "upload was running; another client is uploading to it",
                    status=409,
                    method="POST",
                    url=self.client.url(f"/api/zarr/{self.zarr_id}/upload/"),
                ) from None
            self.client.cancel_batch(self.zarr_id)
            started = send()
        except ApiError as error:
            self.journal.clear()
            named = error.body.get("paths") if isinstance(error.body, dict) else None
            if named:
                shown = ", ".join(map(str, named[:5])) + (" ..." if len(named) > 5 else "")
                message = f"the server refused the {kind}: {error.detail}: {shown}"
                raise ClientError(message) from None
            raise
        self._batch_opened(paths)
        return started

    def _complete(self, pending: Sequence[LocalFile], urls: Sequence[str]) -> None:
        assert self.journal is not None
        for attempt in range(2):
            try:
                response = self.client.complete_batch(self.zarr_id)
            except NotFound:
                # An earlier try completed it and its answer was lost; the final checksum
                # comparison catches anything else.
                response = None
            if response is None or response.status_code == 200:
                self._batch_closed()
                return
            body = response.json() if response.content else {}
            missing = set(body.get("missing", []))
            missing.update(m["path"] for m in body.get("mismatched", []))
            if attempt == 1 or not missing:
                raise ClientError(
                    f"the server did not accept the batch: {body.get('detail', body)}"
                    + (f" ({', '.join(sorted(missing)[:5])})" if missing else "")
                )
            # Storage lost or garbled some PUTs that it had acknowledged: send them again.
            again = [(e, u) for e, u in zip(pending, urls, strict=True) if e.path in missing]
            outcomes = list(map(lambda eu: self._put_one(*eu, count=False), again))
            bad = [o for o in outcomes if o.status is not PutStatus.OK]
            if bad:
                raise ClientError(f"uploading {bad[0].entry.path} again failed: {bad[0].error}")

    def _batch_opened(self, paths: list[str]) -> None:
        """Our batch (loose or pack) is open on the server, with these files."""
        self._batch_open = True
        self._batch_number += 1
        self.progress.batch(self._batch_number, paths)

    def _batch_closed(self) -> None:
        """Our batch is completed or cancelled: nothing to clean up on the way out."""
        assert self.journal is not None
        self._batch_open = False
        self.journal.clear()

    def _cancel(self) -> None:
        assert self.journal is not None
        self.client.cancel_batch(self.zarr_id)
        self._batch_closed()

    def _cancel_quietly(self) -> None:
        """Cancel our batch on the way out of a failure; the original error matters more."""
        with contextlib.suppress(Exception):
            self._cancel()

    def _unadvance(self, entries: Iterable[LocalFile]) -> None:
        entries = list(entries)
        self.progress.advance(-len(entries), -sum(e.size for e in entries))

    # --- one file ----------------------------------------------------------------------------

    def _put_one(self, entry: LocalFile, url: str, *, count: bool = True) -> PutOutcome:
        if self._abort.is_set():
            return PutOutcome(entry, PutStatus.ABORTED)
        full = self.root / entry.path
        reader: HashingReader | None = None
        body_factory: Callable[[], Any]
        try:
            if entry.size <= STREAM_THRESHOLD:
                data = full.read_bytes()
                if len(data) != entry.size or hashlib.md5(data).hexdigest() != entry.md5:
                    return PutOutcome(entry, PutStatus.CHANGED, "content differs from its hash")

                def body_factory() -> Any:
                    return data
            else:

                def body_factory() -> Any:
                    nonlocal reader
                    if reader is not None:
                        reader.close()
                    reader = HashingReader(full, entry.size)
                    return reader
        except FileNotFoundError:
            return PutOutcome(entry, PutStatus.CHANGED, "deleted")
        except OSError as error:
            return PutOutcome(entry, PutStatus.FAILED, str(error))
        try:
            response = self._send_put(url, entry.md5, body_factory)
        except FileChangedError as error:
            return PutOutcome(entry, PutStatus.CHANGED, str(error))
        except TransientError as error:
            return PutOutcome(entry, PutStatus.FAILED, str(error))
        except requests.RequestException as error:
            if isinstance(error.__context__, FileChangedError):
                return PutOutcome(entry, PutStatus.CHANGED, str(error.__context__))
            return PutOutcome(entry, PutStatus.FAILED, str(error))
        finally:
            if reader is not None:
                reader.close()
        if reader is not None and reader.md5.hexdigest() != entry.md5:
            return PutOutcome(entry, PutStatus.CHANGED, "content differs from its hash")
        if response.ok:
            if count:
                self.progress.advance(1, entry.size)
            return PutOutcome(entry, PutStatus.OK)
        return _refused(entry, response)

    def _send_put(
        self, url: str, md5_hex: str, body_factory: Callable[[], Any]
    ) -> requests.Response:
        """One presigned PUT (a file or a shard) with its Content-MD5, retried when transient."""
        response = request_with_retry(
            self.client.storage_session,
            "PUT",
            url,
            self.client.retry,
            counter=self.client.retries,
            body_factory=body_factory,
            headers={
                "Content-MD5": content_md5(md5_hex),
                "Content-Type": "application/octet-stream",
            },
            timeout=self.client.timeout,
        )
        with self._counter_lock:
            self.result.put_requests += 1
        return response
