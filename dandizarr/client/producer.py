"""The producer thread of an upload: hashes the local files (in parallel), skips those the
server already holds with the same md5, cuts the rest into loose batches and, with ``pack``,
has the ``ShardBuilder`` build pack batches of the chunk files. Each batch goes on a queue the
main thread takes them from, then ``None`` (no more), or the exception that stopped it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from dandizarr.checksums.local import md5_files
from dandizarr.client.models import ServiceInfo
from dandizarr.client.pack_types import PackBatch
from dandizarr.client.progress import Progress
from dandizarr.client.remote_listing import RemoteListing
from dandizarr.client.results import UploadResult
from dandizarr.client.upload_types import LocalFile, LocalListing, UploadOptions, hash_jobs

if TYPE_CHECKING:
    from dandizarr.client.shards import ShardBuilder

# What the queue carries: a loose batch, a pack batch, None at the end, or the error.
Produced: TypeAlias = list[LocalFile] | PackBatch | BaseException | None


_T = TypeVar("_T")


def put_unless_stopped(out: queue.Queue[_T], item: _T, stop: threading.Event) -> bool:
    """``out.put(item)``, unless ``stop`` is set first (then False)."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def get_unless_stopped(source: queue.Queue[_T], stop: threading.Event) -> _T | None:
    """``source.get()``, unless ``stop`` is set first (then None)."""
    while not stop.is_set():
        try:
            return source.get(timeout=0.1)
        except queue.Empty:
            continue
    return None


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
        # Files over the service's multipart threshold, set aside: sent in parts, in a batch
        # of their own, once the rest is sent (dandizarr.client.big_files).
        self.big: list[LocalFile] = []

    def put(self, item: Produced) -> bool:
        """Queue an item, unless the upload stops first (then False)."""
        return put_unless_stopped(self.out, item, self.stop)

    def run(self, listing: LocalListing, remote: RemoteListing, info: ServiceInfo) -> None:
        """Hash the files of ``listing`` (its sizes and md5s are set as they are hashed) and
        queue the batches of those to send.

        Chunk files the server does not hold are not hashed here: each is read once, as its
        shard is built, and hashed from the bytes that go into the shard (``ShardBuilder``).
        Reading a million small files twice was most of a packed upload's time."""
        jobs = hash_jobs(self.options.hash_jobs)
        paths = listing.paths
        # The chunk files to pack once hashing is done, a byte per file: first those the server
        # does not hold (not hashed here), then also those hashed that differ from its copy.
        to_pack = bytearray(len(paths))
        if self.packer is not None:
            for i, path in enumerate(paths):
                if not remote.holds(i) and self.packer.is_chunk(path):
                    to_pack[i] = 1
        hashed = md5_files(self.root, (p for i, p in enumerate(paths) if not to_pack[i]), jobs=jobs)
        holding = any(to_pack)
        batch: list[LocalFile] = []
        batch_bytes = 0

        def add_loose(entry: LocalFile) -> bool:
            nonlocal batch, batch_bytes
            if info.multipart_threshold_bytes is not None and (
                entry.size > info.multipart_threshold_bytes
            ):
                self.big.append(entry)
                return True
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

        def hash_unhashed(positions: Iterable[int]) -> None:
            unhashed = [i for i in positions if not listing.is_hashed(i)]
            for i, (_, size, md5) in zip(
                unhashed,
                md5_files(self.root, [paths[i] for i in unhashed], jobs=jobs),
                strict=True,
            ):
                listing.set_hashed(i, size, md5)

        try:
            for i in range(len(paths)):
                if self.stop.is_set():
                    return
                if to_pack[i]:
                    continue
                path, size, md5 = next(hashed)
                listing.set_hashed(i, size, md5)
                if remote.state(i) == (size, md5):
                    self.result.skipped_files += 1
                    self.result.skipped_bytes += size
                    self.progress.advance(1, size)
                    continue
                if self.packer is not None and self.packer.is_chunk(path):
                    to_pack[i], holding = 1, True
                elif not add_loose(listing.file(i)):
                    return
            if holding:
                assert self.packer is not None  # only the packer holds files back
                plans, loose = self.packer.plan_shards(listing, to_pack)
                hash_unhashed(loose)
                for i in loose:
                    if not add_loose(listing.file(i)):
                        return
                # The loose files go first: metadata before the chunks that need it.
                if batch and not self.put(batch):
                    return
                batch = []
                if not self.packer.build_batches(plans, listing, info, self.put):
                    return
                # Chunk files too big for a shard (one over the service's threshold, or the
                # members of a shard that would be): loose, the biggest in parts.
                unpacked = self.packer.take_unpacked()
                hash_unhashed(unpacked)
                for i in unpacked:
                    if not add_loose(listing.file(i)):
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
