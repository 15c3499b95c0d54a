"""Sending loose batches (main thread): start one, PUT its files (many at once, through
libcurl), complete it. Against a service with ``POST upload/add/`` a batch grows while its
PUTs run (``send_growing``: a thread asks for the next URLs a step ahead), so no PUT waits for
the service until the batch is completed. Files changed on disk are dropped and expired URLs
renewed by starting the batch again."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dandizarr.client.batch_session import BatchSession
from dandizarr.client.errors import ClientError
from dandizarr.client.producer import Produced, get_unless_stopped, put_unless_stopped
from dandizarr.client.progress import Progress
from dandizarr.client.results import UploadResult
from dandizarr.client.storage_puts import (
    FileBody,
    Handover,
    PutOutcome,
    PutStatus,
    StoragePuts,
    file_body,
)
from dandizarr.client.upload_types import MAX_BATCH_RESTARTS, LocalFile


class LooseBatchSender:
    def __init__(
        self,
        root: Path,
        session: BatchSession,
        puts: StoragePuts,
        result: UploadResult,
        progress: Progress,
    ) -> None:
        self.root = root
        self.session = session
        self.puts = puts
        self.result = result
        self.progress = progress

    def send(self, entries: list[LocalFile]) -> None:
        """One batch of at most ``batch_limit`` files: start, PUT, complete."""
        pending = entries
        restarts = 0
        while pending:
            started = time.perf_counter()
            urls = self.start_urls(pending)
            self.result.add_time("start", started)
            started = time.perf_counter()
            outcomes = self.puts.put_files(self.root, pending, urls, self._stored)
            self.result.add_time("put", started)
            again = self._troubles(pending, outcomes)
            if again is not None:
                restarts += 1
                if restarts > MAX_BATCH_RESTARTS and again.expired:
                    raise again.give_up()
                pending = again.files
                continue
            self._completed(pending, urls)
            return

    def send_growing(
        self, first: list[LocalFile], produced: queue.Queue[Produced], limits: GrowthLimits
    ) -> Produced | NotTaken:
        """Loose batches from ``produced`` (``first`` the one already taken) sent as one batch
        that grows while its PUTs run: started with the first, the next ones added
        (``POST upload/add/``) as the PUTs go, so no PUT waits for a request to the service,
        then completed once, up to ``limits``. Returns the first item of ``produced`` not sent
        (the next batch's, a pack batch, the end, or an error), or ``NOT_TAKEN``.

        When files changed on disk or storage refused URLs, the batch is cancelled and its
        files are sent again one batch at a time (``send``), as they always were."""
        growing = _GrowingBatch(self, first, produced, limits)
        growing.start()
        started = time.perf_counter()
        try:
            entries, urls, outcomes = self.puts.put_stream(self.root, growing, self._stored)
        finally:
            growing.stop.set()
        self.result.add_time("put", started)
        if growing.error is not None:
            raise growing.error
        again = self._troubles(entries, outcomes)
        if again is not None:
            for at in range(0, len(again.files), limits.per_request):
                self.send(again.files[at : at + limits.per_request])
        else:
            self._completed(entries, urls)
        return growing.next_item

    def _troubles(
        self, pending: list[LocalFile], outcomes: Sequence[PutOutcome[LocalFile]]
    ) -> _Again | None:
        """None when every PUT stored its file; else the batch is cancelled (after files
        changed on disk, or URLs storage refused) and what to send again returned. Raises when
        a PUT failed for good."""
        changed = [o.entry for o in outcomes if o.status is PutStatus.CHANGED]
        expired = [o for o in outcomes if o.status is PutStatus.EXPIRED]
        failed = [o for o in outcomes if o.status is PutStatus.FAILED]
        done = [o.entry for o in outcomes if o.status is PutStatus.OK]
        for entry in changed:
            self.result.changed_files.append(entry.path)
            self.progress.message(f"{entry.path} changed on disk after it was hashed; not uploaded")
        if failed:
            first = failed[0]
            more = f" (and {len(failed) - 1} more files)" if len(failed) > 1 else ""
            raise ClientError(f"uploading {first.entry.path} failed: {first.error}{more}")
        if not changed and not expired:
            return None
        # The server cannot drop files from an open batch, and refused URLs need new ones:
        # cancel it and send what remains in a fresh one.
        self.session.cancel()
        self._unadvance(done)
        self.result.batch_restarts += 1
        if expired:
            self.progress.message(
                f"{len(expired)} upload URLs were refused ({expired[0].error}); "
                "starting the batch again with fresh ones"
            )
        changed_paths = {e.path for e in changed}
        return _Again([e for e in pending if e.path not in changed_paths], expired)

    def _completed(self, pending: Sequence[LocalFile], urls: Sequence[str]) -> None:
        started = time.perf_counter()
        self._complete(pending, urls)
        self.result.add_time("complete", started)
        self.result.batches += 1
        self.result.uploaded_files += len(pending)
        self.result.uploaded_bytes += sum(e.size for e in pending)

    def start_urls(self, pending: Sequence[LocalFile]) -> list[str]:
        body = [(e.path, e.md5) for e in pending]
        client, zarr_id = self.session.client, self.session.zarr_id
        return self.session.start(
            lambda: client.start_batch(zarr_id, body),
            files=len(pending),
            paths=[e.path for e in pending],
            kind="batch",
        )

    def more_urls(self, more: Sequence[LocalFile]) -> list[str]:
        return self.session.client.add_to_batch(
            self.session.zarr_id, [(e.path, e.md5) for e in more]
        )

    def _complete(self, pending: Sequence[LocalFile], urls: Sequence[str]) -> None:
        def resend(missing: set[str]) -> None:
            again = [(e, u) for e, u in zip(pending, urls, strict=True) if e.path in missing]
            outcomes = self.puts.put_files(self.root, [e for e, _ in again], [u for _, u in again])
            bad = [o for o in outcomes if o.status is not PutStatus.OK]
            if bad:
                raise ClientError(f"uploading {bad[0].entry.path} again failed: {bad[0].error}")

        self.session.complete(resend, kind="batch")

    def _stored(self, entry: LocalFile) -> None:
        self.progress.advance(1, entry.size)

    def _unadvance(self, entries: Iterable[LocalFile]) -> None:
        entries = list(entries)
        self.progress.advance(-len(entries), -sum(e.size for e in entries))


@dataclass(frozen=True)
class GrowthLimits:
    """How far one growing batch goes: files per request (the service's batch limit), and
    files and bytes in all before it is completed (``files``; but a rest of the upload up to
    a quarter of that joins it, within the service's ``most_files``, rather than being sent
    in a small batch of its own). ``local_files``: how many the upload has in all."""

    per_request: int
    files: int
    bytes: int
    most_files: int
    local_files: int


@dataclass
class _Again:
    files: list[LocalFile]
    expired: list[PutOutcome[LocalFile]]

    def give_up(self) -> ClientError:
        first = self.expired[0]
        return ClientError(
            f"storage kept refusing the upload URLs of {first.entry.path} "
            f"and {len(self.expired) - 1} more: {first.error}"
        )


class NotTaken:
    """``send_growing`` stopped at its limits without taking the next item."""


NOT_TAKEN = NotTaken()
_END = object()
# A chunk's files are read ahead (by the URL thread) when together at most this large: at most
# two chunks are held, the one handed over and the one being read.
READ_AHEAD_BYTES = 32 << 20


class _GrowingBatch(threading.Thread):
    """Asks the service for the URLs of the next loose batches (the first starts the batch,
    the others are added to it) a step ahead of the PUTs, and hands them over (a ``FileFeed``).

    One batch of URLs waits at most: URLs are signed just before their PUTs, never long
    enough ahead to expire."""

    def __init__(
        self,
        sender: LooseBatchSender,
        first: list[LocalFile],
        produced: queue.Queue[Produced],
        limits: GrowthLimits,
    ) -> None:
        super().__init__(name="dandizarr-urls", daemon=True)
        self.sender = sender
        self.first = first
        self.produced = produced
        self.limits = limits
        self.ready: queue.Queue[Handover | object] = queue.Queue(1)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.next_item: Produced | NotTaken = NOT_TAKEN

    def run(self) -> None:
        chunk = self.first
        files = size = 0
        try:
            while True:
                started = time.perf_counter()
                urls = self.sender.start_urls(chunk) if not files else self.sender.more_urls(chunk)
                self.sender.result.add_time("start" if not files else "add", started)
                if not self._hand_over(Handover(chunk, urls, self._bodies(chunk))):
                    return
                files += len(chunk)
                size += sum(e.size for e in chunk)
                if files + self.limits.per_request > self.limits.files and not self._rest_joins(
                    files
                ):
                    return
                if size >= self.limits.bytes:
                    return
                item = self._next()
                if not isinstance(item, list):
                    self.next_item = item
                    return
                chunk = item
        except BaseException as error:
            self.error = error
        finally:
            self._hand_over(_END)

    def _bodies(self, chunk: list[LocalFile]) -> list[FileBody] | None:
        """The chunk's files read (and checked against their md5s) here, off the thread that
        drives the PUTs, when they are small enough to hold a chunk ahead."""
        if sum(e.size for e in chunk) > READ_AHEAD_BYTES:
            return None
        return [file_body(self.sender.root, e) for e in chunk]

    def _rest_joins(self, files: int) -> bool:
        """Whether the files the upload has left (at most) join this batch."""
        done = self.sender.result
        left = self.limits.local_files - done.uploaded_files - done.skipped_files - files
        return left <= self.limits.files // 4 and files + left <= self.limits.most_files

    def _hand_over(self, item: object) -> bool:
        return put_unless_stopped(self.ready, item, self.stop)

    def _next(self) -> Produced:
        return get_unless_stopped(self.produced, self.stop)

    def take(self, wait: float) -> Handover | None:
        try:
            item = self.ready.get(timeout=wait) if wait > 0 else self.ready.get_nowait()
        except queue.Empty:
            return Handover([], [])
        if item is _END:
            return None
        assert isinstance(item, Handover)
        return item
