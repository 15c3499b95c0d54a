"""Upload a directory into an archive: the ``Uploader`` runs the whole pipeline.

Resolve (or create) the archive, settle a batch left open, list both sides, then run the
pipeline: a producer thread (``dandizarr.client.producer``) hashes files and queues batches;
the main thread sends one batch at a time (the server allows one open batch per archive),
loose ones by ``dandizarr.client.loose_batches`` and, with ``pack`` (docs/sharded.md), pack
batches of shards by ``dandizarr.client.pack_batches``, their PUTs in a thread pool. Hashing
runs ahead, and a loose batch grows while its PUTs run (up to ``max_batch_files``), so only
its start and its completion are serial. At the end the server's checksum is compared with the
one the local files give.

Every loose file is read again for its PUT and its md5 compared with the one declared in the
batch: a file that changed on disk since it was hashed is not uploaded but reported. A chunk
file packed into a shard is read once, when its shard is built, and declared with the md5 of
the bytes packed (one hashed before, to compare with the server's copy, is checked likewise).
"""

from __future__ import annotations

import heapq
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from dandizarr.checksums.local import iter_local_files, iter_local_paths
from dandizarr.client.api import ApiClient
from dandizarr.client.archive_target import ensure_asset, resolve_archive
from dandizarr.client.batch_session import BatchSession
from dandizarr.client.big_files import BigBatchLimits, BigFileSender
from dandizarr.client.digests import tree_checksum
from dandizarr.client.errors import ClientError, TokenRequired
from dandizarr.client.loose_batches import GrowthLimits, LooseBatchSender, NotTaken
from dandizarr.client.models import Archive, ServiceInfo
from dandizarr.client.pack_batches import PackBatchSender
from dandizarr.client.pack_types import PackBatch, PreparedShard
from dandizarr.client.producer import BatchProducer, Produced
from dandizarr.client.progress import Progress
from dandizarr.client.remote_listing import RemoteListing
from dandizarr.client.results import UploadResult
from dandizarr.client.storage_puts import StoragePuts
from dandizarr.client.upload_types import LocalListing, UploadOptions

if TYPE_CHECKING:
    from dandizarr.client.shards import ShardBuilder


class Uploader:
    def __init__(
        self, client: ApiClient, root: Path, options: UploadOptions, progress: Progress
    ) -> None:
        self.client = client
        self.root = root
        self.options = options
        self.progress = progress
        self.result = UploadResult(server=client.server)
        self.archive: Archive | None = None
        self.batches: BatchSession | None = None
        # Set when the upload stops: the producer and the shard builders give up.
        self._stop = threading.Event()
        # Called with each shard once built, before its batch starts (tests corrupt members).
        self.after_build: Callable[[PreparedShard], None] | None = None
        # The pack path's planning and building, with ``pack``.
        self.packer: ShardBuilder | None = None
        if options.pack:
            # Here, not at the top: planning shards needs numpy, which a loose upload does not
            # load (a quarter of a second of every start).
            from dandizarr.client.shards import ShardBuilder

            jobs = max(1, min(client.jobs, os.cpu_count() or 1, 16))
            self.packer = ShardBuilder(root, options, self.result, progress, self._stop, jobs=jobs)

    @property
    def zarr_id(self) -> str:
        assert self.archive is not None
        return self.archive.zarr_id

    def run(self) -> UploadResult:
        started = time.perf_counter()
        if not self.root.is_dir():
            raise ClientError(f"{self.root} is not a directory")
        if not self.client.token:
            raise TokenRequired("uploading needs an API token")
        info = self.client.info()
        self.archive = self._resolve_archive()
        self.result.zarr_id, self.result.name = self.archive.zarr_id, self.archive.name
        self.result.dandiset = self.archive.dandiset
        self.batches = BatchSession(
            self.client, self.zarr_id, self.progress, wait_timeout=self.options.checksum_timeout
        )
        big_files = self._big_file_sender(info)
        if big_files is not None:
            big_files.resume()  # a batch of big files a killed run left: its missing parts
        self.batches.settle_leftover(cancel_others=self.options.cancel_open_batch)
        # A batch completed just before (by a killed run, say) may still be propagating; the
        # listing must include it, or its files would be uploaded again.
        self.client.wait_for_checksum(
            self.zarr_id, timeout=self.options.checksum_timeout, progress=self.progress
        )
        self.progress.message(f"listing zarr archive {self.zarr_id} on {self.client.server}...")
        scan_started = time.perf_counter()
        # A packed upload reads every file before it sends it, and learns the sizes then: its
        # listing looks at no file (most are chunk files, and most of a cold walk of them
        # went to reading their inodes for a size).
        listing = (
            LocalListing.of_paths(iter_local_paths(self.root))
            if self.packer is not None
            else LocalListing(iter_local_files(self.root))
        )
        remote: RemoteListing | None = None
        try:
            remote = RemoteListing(
                listing.paths, len(listing), self.client.iter_files(self.zarr_id)
            )
            self.result.local_files = len(listing)
            remote_only = len(remote.only_paths)
            if remote_only and self.options.sync:
                self.progress.message(f"deleting {remote_only:,} files absent locally...")
                self.client.delete_files(self.zarr_id, remote.only_paths)
                self.result.deleted_files = remote_only
            else:
                self.result.remote_only_files = remote_only
                if remote_only:
                    self.progress.message(
                        f"{remote_only:,} files on the server are absent locally and are kept "
                        "(an upload with sync deletes them)"
                    )
            if self.packer is not None:
                self.packer.after_build = self.after_build
                self.packer.plan_layouts(listing.paths, info)
            self.result.add_time("scan", scan_started)
            self.progress.start(self.result.local_files, listing.total_bytes)
            try:
                self._pipeline(listing, remote, info)
            finally:
                self.progress.close()
                if self.packer is not None:
                    self.packer.cleanup()
            self.result.local_bytes = listing.known_bytes  # every file hashed by now
            verify_started = time.perf_counter()
            kept = None if self.options.sync or not remote_only else remote
            self._verify(listing, kept)
            self.result.add_time("verify", verify_started)
            if self.result.ok:
                self._ensure_asset()
        finally:
            listing.close()  # its temporary files
            if remote is not None:
                remote.close()
        self.result.retries = self.client.retries.count
        self.result.elapsed_seconds = time.perf_counter() - started
        return self.result

    def _ensure_asset(self) -> None:
        assert self.archive is not None
        self.result.asset_id = ensure_asset(self.client, self.archive, self.progress)

    def _resolve_archive(self) -> Archive:
        return resolve_archive(self.client, self.options, self.root.resolve().name, self.progress)

    def _verify(self, hashed: LocalListing, kept: RemoteListing | None) -> None:
        """``hashed``: every local file as hashed; ``kept``: what the server held before, whose
        files absent locally stay (None: there are none, or they were deleted)."""
        # Both in path order, so the checksums stream: no tuple per file held.
        self.result.local_checksum = tree_checksum(hashed.entries())
        self.result.expected_checksum = (
            tree_checksum(heapq.merge(hashed.entries(), kept.only_entries()))
            if kept is not None
            else self.result.local_checksum
        )
        archive = self.client.wait_for_checksum(
            self.zarr_id, timeout=self.options.checksum_timeout, progress=self.progress
        )
        self.result.server_checksum = archive.checksum
        if (
            archive.checksum is None
            and archive.file_count == 0
            and not len(hashed)
            and kept is None
        ):
            self.result.server_checksum = self.result.expected_checksum

    def _pipeline(self, listing: LocalListing, remote: RemoteListing, info: ServiceInfo) -> None:
        """Hash (into ``listing``) and send every batch."""
        assert self.batches is not None
        produced: queue.Queue[Produced] = queue.Queue(maxsize=4)
        producer = BatchProducer(
            self.root, self.options, self.result, self.progress, self._stop, produced, self.packer
        )
        thread = threading.Thread(
            target=producer.run, args=(listing, remote, info), name="dandizarr-hash", daemon=True
        )
        thread.start()
        puts = StoragePuts(self.client, self.result, self.client.jobs)
        loose = LooseBatchSender(self.root, self.batches, puts, self.result, self.progress)
        packed = PackBatchSender(
            self.batches,
            puts,
            self.result,
            self.progress,
            apply_timeout=self.options.checksum_timeout,
        )
        pool = ThreadPoolExecutor(max_workers=self.client.jobs, thread_name_prefix="dandizarr-put")
        growth = self._growth_limits(info, len(listing))
        try:
            item: Produced | NotTaken = produced.get()
            while item is not None:
                if isinstance(item, NotTaken):
                    item = produced.get()
                elif isinstance(item, BaseException):
                    if isinstance(item, ClientError):
                        raise item
                    raise ClientError(f"reading the local files failed: {item}") from item
                elif isinstance(item, PackBatch):
                    assert self.packer is not None
                    try:
                        packed.send(item, pool)
                    finally:
                        item.discard()
                        self.packer.release_slot()
                    item = produced.get()
                elif growth is not None:
                    item = loose.send_growing(item, produced, growth)
                else:
                    loose.send(item)
                    item = produced.get()
            packed.finish()
            if producer.big:
                sender = self._big_file_sender(info)
                assert sender is not None  # only a service with a threshold has big files
                sender.send(producer.big)
        except BaseException:
            puts.aborted.set()
            pool.shutdown(wait=True, cancel_futures=True)
            # The journal also covers an interruption between "POST upload" reaching the
            # server and its answer reaching us.
            if self.batches.may_be_open:
                self._cancel_quietly()
            raise
        finally:
            self._stop.set()
            pool.shutdown(wait=True)
            puts.close()
            thread.join(timeout=5)
            while True:  # shards built ahead and never sent
                try:
                    left = produced.get_nowait()
                except queue.Empty:
                    break
                if isinstance(left, PackBatch):
                    left.discard()

    def _big_file_sender(self, info: ServiceInfo) -> BigFileSender | None:
        """Files over the service's threshold go in parts; None: it takes any in one PUT."""
        if info.multipart_threshold_bytes is None or self.batches is None:
            return None
        return BigFileSender(
            self.root,
            self.client,
            self.batches,
            self.result,
            self.progress,
            part_bytes=info.multipart_part_bytes or 0,
            wait_timeout=self.options.checksum_timeout,
            limits=BigBatchLimits(
                info.batch_limit,
                info.batch_declared_bytes_limit,
                info.batch_declared_parts_limit,
            ),
            url_lifetime=info.presigned_url_expiry_seconds,
        )

    def _growth_limits(self, info: ServiceInfo, local_files: int) -> GrowthLimits | None:
        """How far a loose batch grows while its PUTs run; None when the service cannot add
        files to a batch (older than ``POST upload/add/``)."""
        if not info.open_batch_file_limit or info.open_batch_file_limit <= info.batch_limit:
            return None
        most = info.open_batch_file_limit
        files = min(most, self.options.max_batch_files)
        return GrowthLimits(
            info.batch_limit, files, self.options.max_batch_bytes, most, local_files
        )

    def _cancel_quietly(self) -> None:
        """Cancel our batch on the way out of a failure; the original error matters more."""
        if self.batches is not None:
            self.batches.cancel_quietly()
