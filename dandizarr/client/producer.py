"""The producer thread of an upload: hashes the local files (in parallel), skips those the
server already holds with the same md5, cuts the rest into loose batches and, with ``pack``,
has the ``ShardBuilder`` build pack batches of the chunk files. Each batch goes on a queue the
main thread takes them from, then ``None`` (no more), or the exception that stopped it."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import TypeAlias

from checksums.local import md5_files
from dandizarr.client.models import RemoteFile, ServiceInfo
from dandizarr.client.progress import Progress
from dandizarr.client.results import UploadResult
from dandizarr.client.shards import PackBatch, ShardBuilder
from dandizarr.client.upload_types import LocalFile, UploadOptions

# What the queue carries: a loose batch, a pack batch, None at the end, or the error.
Produced: TypeAlias = list[LocalFile] | PackBatch | BaseException | None


class BatchProducer:
    def __init__(
        self,
        root: Path,
        options: UploadOptions,
        result: UploadResult,
        progress: Progress,
        stop: threading.Event,
        out: queue.Queue[Produced],
        packer: ShardBuilder | None,
    ) -> None:
        self.root = root
        self.options = options
        self.result = result
        self.progress = progress
        self.stop = stop
        self.out = out
        self.packer = packer
        # Every local file as hashed (for the expected checksum at the end).
        self.entries: list[LocalFile] = []

    def put(self, item: Produced) -> bool:
        """Queue an item, unless the upload stops first (then False)."""
        while not self.stop.is_set():
            try:
                self.out.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def run(self, paths: list[str], remote: dict[str, RemoteFile], info: ServiceInfo) -> None:
        jobs = self.options.hash_jobs or min(8, os.cpu_count() or 1)
        hashed = md5_files(self.root, paths, jobs=jobs)
        held: list[LocalFile] = []  # chunk files, packed once hashing is done
        batch: list[LocalFile] = []
        batch_bytes = 0

        def add_loose(entry: LocalFile) -> bool:
            nonlocal batch, batch_bytes
            if batch and (
                len(batch) >= info.batch_limit
                or batch_bytes + entry.size > self.options.max_batch_bytes
            ):
                if not self.put(batch):
                    return False
                batch, batch_bytes = [], 0
            batch.append(entry)
            batch_bytes += entry.size
            return True

        try:
            for path, size, md5 in hashed:
                if self.stop.is_set():
                    return
                entry = LocalFile(str(path), int(size), md5)
                self.entries.append(entry)
                known = remote.get(entry.path)
                if known is not None and known.size == entry.size and known.digest == entry.md5:
                    self.result.skipped_files += 1
                    self.result.skipped_bytes += entry.size
                    self.progress.advance(1, entry.size)
                    continue
                if self.packer is not None and self.packer.is_chunk(entry.path):
                    held.append(entry)
                elif not add_loose(entry):
                    return
            if held:
                assert self.packer is not None  # only the packer holds files back
                by_path = {e.path: e for e in held}
                del held[:]  # by_path holds them
                plans, loose = self.packer.plan_shards(by_path)
                for path in loose:
                    if not add_loose(by_path[path]):
                        return
                # The loose files go first: metadata before the chunks that need it.
                if batch and not self.put(batch):
                    return
                batch = []
                if not self.packer.build_batches(plans, by_path, info, self.put):
                    return
            if batch and not self.put(batch):
                return
            self.put(None)
        except BaseException as error:
            self.put(error)
        finally:
            close = getattr(hashed, "close", None)  # a generator: stops its hashing threads
            if close is not None:
                close()
