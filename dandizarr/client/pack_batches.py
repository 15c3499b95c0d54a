"""Sending pack batches (main thread, docs/sharded.md): start one, PUT its shards through the
pool, complete it; the server's worker then checks every member's md5 and applies it while the
next batch is started and PUT. Expired URLs are renewed by starting the batch again."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

from dandizarr.client.batch_session import BatchSession
from dandizarr.client.errors import ClientError
from dandizarr.client.pack_types import PackBatch, PreparedShard
from dandizarr.client.progress import Progress
from dandizarr.client.results import UploadResult
from dandizarr.client.storage_puts import Body, PutOutcome, PutStatus, StoragePuts, refused
from dandizarr.client.upload_types import MAX_BATCH_RESTARTS


@dataclass(frozen=True)
class _Completed:
    """A pack batch completed and not yet seen applied: what it counts for once it is."""

    batch_id: int
    shards: int
    files: int
    nbytes: int


class PackBatchSender:
    """Keeps at most one of our pack batches completed and unapplied: the next one is started
    and PUT meanwhile (the server's check and apply of 100,000 members took as long as the
    start, and the upload waited for both), and completed once that one is applied. ``finish``
    waits for the last."""

    def __init__(
        self,
        session: BatchSession,
        puts: StoragePuts,
        result: UploadResult,
        progress: Progress,
        *,
        apply_timeout: float,
    ) -> None:
        self.session = session
        self.puts = puts
        self.result = result
        self.progress = progress
        self.apply_timeout = apply_timeout
        self._completed: _Completed | None = None

    def send(self, batch: PackBatch, pool: ThreadPoolExecutor) -> None:
        """Start one pack batch and PUT its shards, wait until the server applied the one sent
        before (ClientError if it refused it), then complete this one."""
        shards = batch.shards
        restarts = 0
        while True:
            started = time.perf_counter()
            batch_id, urls = self._start(shards)
            self.result.add_time("start", started)
            started = time.perf_counter()
            outcomes = list(pool.map(self._put_shard, shards, urls))
            self.result.add_time("put", started)
            expired = [o for o in outcomes if o.status is PutStatus.EXPIRED]
            failed = [o for o in outcomes if o.status is PutStatus.FAILED]
            if failed:
                first = failed[0]
                more = f" (and {len(failed) - 1} more shards)" if len(failed) > 1 else ""
                raise ClientError(f"uploading shard {first.entry.name} failed: {first.error}{more}")
            if expired:
                self.session.cancel()
                for outcome in outcomes:
                    if outcome.status is PutStatus.OK:
                        shard = outcome.entry
                        self.progress.advance(-len(shard.members), -shard.member_bytes)
                restarts += 1
                self.result.batch_restarts += 1
                if restarts > MAX_BATCH_RESTARTS:
                    raise ClientError(
                        f"storage kept refusing the upload URLs of shard {expired[0].entry.name} "
                        f"and {len(expired) - 1} more: {expired[0].error}"
                    )
                self.progress.message(
                    f"{len(expired)} upload URLs were refused ({expired[0].error}); "
                    "starting the pack batch again with fresh ones"
                )
                continue
            # Our batch stays open meanwhile: a failure of the one before cancels it on the way
            # out, as any failure does.
            self.finish()
            started = time.perf_counter()
            batch_id = self._complete(shards, urls, batch_id)
            self.result.add_time("complete", started)
            self._completed = _Completed(
                batch_id,
                len(shards),
                sum(len(s.members) for s in shards),
                sum(s.member_bytes for s in shards),
            )
            return

    def finish(self) -> None:
        """Wait until the server applied our last completed pack batch; ClientError naming the
        batch and the server's reason when it refused it (a member not matching its md5)."""
        completed, self._completed = self._completed, None
        if completed is None:
            return
        started = time.perf_counter()
        client, zarr_id = self.session.client, self.session.zarr_id
        state = client.wait_for_batch(
            zarr_id, completed.batch_id, timeout=self.apply_timeout, progress=self.progress
        )
        self.result.add_time("apply", started)
        if state.get("state") != "applied":
            error = state.get("error") or f"the batch is {state.get('state')}"
            raise ClientError(
                f"the server refused pack batch {completed.batch_id} of zarr archive {zarr_id}: "
                f"{error}"
            )
        self.result.batches += 1
        self.result.pack_batches += 1
        self.result.shards += completed.shards
        self.result.uploaded_files += completed.files
        self.result.uploaded_bytes += completed.nbytes
        self.result.packed_files += completed.files
        self.result.packed_bytes += completed.nbytes

    def _start(self, shards: Sequence[PreparedShard]) -> tuple[int, list[str]]:
        body = [(s.name, s.declaration()) for s in shards]
        client, zarr_id = self.session.client, self.session.zarr_id
        return self.session.start(
            lambda: client.start_pack_batch(zarr_id, body),
            files=sum(len(s.members) for s in shards),
            paths=[m.path for s in shards for m in s.members],
            kind="pack batch",
        )

    def _complete(self, shards: Sequence[PreparedShard], urls: Sequence[str], batch_id: int) -> int:
        """Complete the pack batch (PUT again what storage lost, once); its id."""

        def resend(missing: set[str]) -> None:
            again = [(s, u) for s, u in zip(shards, urls, strict=True) if s.name in missing]
            outcomes = [self._put_shard(s, u, count=False) for s, u in again]
            bad = [o for o in outcomes if o.status is not PutStatus.OK]
            if bad:
                raise ClientError(
                    f"uploading shard {bad[0].entry.name} again failed: {bad[0].error}"
                )

        response = self.session.complete(resend, kind="pack batch")
        body = response.json() if response is not None and response.content else {}
        answered = body.get("batch") if isinstance(body, dict) else None
        return answered if isinstance(answered, int) else batch_id

    def _put_shard(
        self, shard: PreparedShard, url: str, *, count: bool = True
    ) -> PutOutcome[PreparedShard]:
        if self.puts.aborted.is_set():
            return PutOutcome(shard, PutStatus.ABORTED)
        opened: list[BinaryIO] = []

        def body_factory() -> Body:
            body = shard.body()
            if not isinstance(body, bytes):
                opened.append(body)
            return body

        try:
            response = self.puts.send(url, shard.md5, body_factory)
        except (ClientError, OSError) as error:  # retries ran out, or no body to send
            return PutOutcome(shard, PutStatus.FAILED, str(error))
        finally:
            for file in opened:
                file.close()
        if response.ok:
            if count:
                self.progress.advance(len(shard.members), shard.member_bytes)
            return PutOutcome(shard, PutStatus.OK)
        return refused(shard, response)
