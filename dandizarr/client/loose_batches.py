"""Sending one loose batch (main thread): start it, PUT its files (many at once, through
libcurl), complete it; files changed on disk are dropped and expired URLs renewed by starting
it again."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from dandizarr.client.batch_session import BatchSession
from dandizarr.client.errors import ClientError
from dandizarr.client.progress import Progress
from dandizarr.client.results import UploadResult
from dandizarr.client.storage_puts import PutStatus, StoragePuts
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
        pending = entries
        restarts = 0
        while pending:
            started = time.perf_counter()
            urls = self._start(pending)
            self.result.add_time("start", started)
            started = time.perf_counter()
            outcomes = self.puts.put_files(self.root, pending, urls, self._stored)
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
                self.session.cancel()
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
        client, zarr_id = self.session.client, self.session.zarr_id
        return self.session.start(
            lambda: client.start_batch(zarr_id, body),
            files=len(pending),
            paths=[e.path for e in pending],
            kind="batch",
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
