"""Shards of an upload with ``pack`` (docs/sharded.md): which local files are chunk files, the
shards they go into, and building those shards into pack batches (producer thread).

The chunk files of the arrays (found from the local ``.zarray`` / ``zarr.json``) are held back
while the other files are hashed; then they are planned into shards
(``dandizarr.sharding.archive_packing``), each shard is built locally (each member file read once
and
hashed from the bytes packed; one hashed before, to compare with the server's copy, checked
against that md5) and the shards are grouped into ``PackBatch``es for
``dandizarr.client.pack_batches`` to send.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import shutil
import tempfile
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dandizarr.client.errors import ClientError
from dandizarr.client.member_reads import MemberReader, TooBig
from dandizarr.client.models import ServiceInfo
from dandizarr.client.pack_types import PackBatch, PreparedShard
from dandizarr.client.progress import Progress
from dandizarr.client.results import UploadResult
from dandizarr.client.upload_types import LocalListing, UploadOptions
from dandizarr.concurrency import ordered_map
from dandizarr.sharding.archive_packing import (
    METADATA_NAMES,
    IndexedShardPlan,
    LayoutLookup,
    PackingError,
    ShardLayout,
    build_shard,
    default_chunks_per_shard,
    find_grids,
    plan_shard_positions,
)

# Members per pack batch when the service does not say (older services have no pack batches).
DEFAULT_PACK_MEMBER_LIMIT = 100_000
# Pack batches built ahead of the one being uploaded (each up to ``max_batch_bytes``).
PACK_BATCHES_AHEAD = 1
# Shards up to this size are built in memory, larger ones in a temporary directory (so at most
# two pack batches' worth of temporary disk, and little memory, is used).
SHARD_IN_MEMORY = 1 << 20


def fit_chunks_per_shard(chunks_per_shard: Sequence[int], limit: int) -> tuple[int, ...]:
    """Shrink a shard shape (first dimensions first: shards grow from the last) until a shard
    has at most ``limit`` slots, so one shard always fits in a pack batch."""
    cps = [int(n) for n in chunks_per_shard]
    while len(cps) and math.prod(cps) > max(1, limit):
        d = next(i for i, n in enumerate(cps) if n > 1)
        cps[d] = max(1, min(cps[d] // 2, cps[d] - 1))
    return tuple(cps)


def _size_bound(plan: IndexedShardPlan) -> int:
    """About the most a shard's bytes can be, before its members are read (a packed upload's
    listing has no sizes): each slot's chunk at its uncompressed size, and the index (16 bytes
    a slot, 4 of checksum). A compressed chunk is smaller; a chunk of a codec that grows
    incompressible data is larger by a few bytes."""
    slots = plan.layout.slots()
    return slots * plan.layout.grid.chunk_nbytes() + 16 * slots + 4


def _read_size_hint(plan: IndexedShardPlan) -> int:
    """The bytes to read a member file in at once: its uncompressed size, at most 1 MiB (a
    larger file is read on in pieces)."""
    return min(plan.layout.grid.chunk_nbytes(), 1 << 20)


class ShardBuilder:
    """Plans and builds the shards of one upload.

    ``plan_layouts`` before hashing starts (main thread); then, on the producer thread,
    ``is_chunk`` for each hashed file, ``plan_shards`` for the held-back chunk files and
    ``build_batches``; ``release_slot`` (main thread) once a pack batch is sent; ``cleanup``
    at the end. ``stop`` is the upload's "give up" signal.
    """

    def __init__(
        self,
        root: Path,
        options: UploadOptions,
        result: UploadResult,
        progress: Progress,
        stop: threading.Event,
        *,
        jobs: int,
    ) -> None:
        self.root = root
        self.options = options
        self.result = result
        self.progress = progress
        self.stop = stop
        self.jobs = jobs
        self.layouts: list[ShardLayout] = []
        self.scratch: Path | None = None  # where shards above SHARD_IN_MEMORY are built
        # Called with each shard once built, before its batch starts (tests corrupt members).
        self.after_build: Callable[[PreparedShard], None] | None = None
        self._lookup = LayoutLookup([])
        # Bounded look-ahead: a pack batch is built only when a slot is free.
        self._slots = threading.Semaphore(PACK_BATCHES_AHEAD + 1)
        self._changed_lock = threading.Lock()
        self._reader = MemberReader(os.fspath(root))
        # The service's multipart threshold (None: storage takes any file in one PUT): no
        # shard is bigger, since a shard goes in one PUT. A member over it, and the members of
        # a shard that would be, are not packed but sent loose (``take_unpacked``), the
        # biggest of them in parts (docs/api.md, "Big files").
        self.shard_limit: int | None = None
        self._unpacked: list[int] = []

    def cleanup(self) -> None:
        self._reader.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # --- planning ----------------------------------------------------------------------------

    def plan_layouts(self, paths: Iterable[str], info: ServiceInfo) -> None:
        """The shard layout of every array found in the local metadata files."""
        member_limit = info.pack_member_limit or DEFAULT_PACK_MEMBER_LIMIT
        self.shard_limit = info.multipart_threshold_bytes
        metadata = {}
        for path in paths:
            if path.rpartition("/")[2] in METADATA_NAMES:
                try:
                    metadata[path] = (self.root / path).read_bytes()
                except OSError as error:
                    raise ClientError(f"cannot read {path}: {error}") from error
        try:
            grids = find_grids(metadata)
        except PackingError as error:
            raise ClientError(f"cannot pack: {error}") from None
        target = self.options.shard_target_bytes
        self.layouts = [
            ShardLayout(
                grid,
                fit_chunks_per_shard(
                    default_chunks_per_shard(grid, target)
                    if target
                    else default_chunks_per_shard(grid),
                    member_limit,
                ),
            )
            for grid in grids
        ]
        self._lookup = LayoutLookup(self.layouts)
        if not self.layouts:
            self.progress.message("no zarr arrays found: every file is uploaded loose")
        else:
            self.scratch = Path(tempfile.mkdtemp(prefix="dandizarr-shards-"))

    def is_chunk(self, path: str) -> bool:
        """Whether a path is a chunk file of one of the arrays (so it goes into a shard)."""
        return self._lookup.chunk_of(path) is not None

    def plan_shards(
        self, listing: LocalListing, held: bytearray
    ) -> tuple[list[IndexedShardPlan], array[int]]:
        """The shards the chunk files of ``listing`` marked in ``held`` go into (members as
        positions in ``listing``), and the positions of those that fit no shard (loose)."""
        return plan_shard_positions(
            self.layouts, ((i, path) for i, path in enumerate(listing.paths) if held[i])
        )

    # --- building (producer thread) ----------------------------------------------------------

    def build_batches(
        self,
        plans: Sequence[IndexedShardPlan],
        listing: LocalListing,
        info: ServiceInfo,
        put: Callable[[PackBatch], bool],
    ) -> bool:
        """Build the shards in plan order, a few ahead on ``jobs`` threads, and hand them to
        ``put`` in pack batches as they come: a batch takes shards while the service's shard
        and member limits and ``max_batch_bytes`` allow, by the size each shard was built to.
        At most two batches are built and unsent (a slot each); False when the upload
        stopped first (or ``put`` refused)."""
        shard_limit = info.batch_limit
        member_limit = info.pack_member_limit or DEFAULT_PACK_MEMBER_LIMIT
        batch: list[PreparedShard] = []
        members = nbytes = 0

        def send() -> bool:
            nonlocal batch, members, nbytes
            sending, batch, members, nbytes = batch, [], 0, 0
            if put(PackBatch(sending)):
                return True  # its slot is released once it is sent
            for shard in sending:
                shard.discard()
            return False

        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="dandizarr-pack") as pool:
            built = ordered_map(
                pool, lambda plan: self._build_shard(plan, listing), plans, ahead=2 * self.jobs
            )
            try:
                for shard in built:
                    if shard is None:
                        continue
                    overflows = (
                        members + len(shard.members) > member_limit
                        or nbytes + shard.size > self.options.max_batch_bytes
                    )
                    sent = not (batch and overflows) or send()
                    if not sent or (not batch and not self._take_slot()):
                        shard.discard()
                        return False
                    batch.append(shard)
                    members += len(shard.members)
                    nbytes += shard.size
                    full = len(batch) >= shard_limit or members >= member_limit
                    if full and not send():  # full: sent now, not when the next shard comes
                        return False
                return not batch or send()
            finally:
                for shard in batch:  # built and never handed on (the upload stopped)
                    shard.discard()
                built.close()  # the builds queued ahead are cancelled

    def _take_slot(self) -> bool:
        """Wait until a pack batch may be built; False if the upload stops first."""
        while not self._slots.acquire(timeout=0.2):
            if self.stop.is_set():
                return False
        if self.stop.is_set():
            self._slots.release()
            return False
        return True

    def release_slot(self) -> None:
        """A pack batch was sent (or given up): the next one may be built."""
        self._slots.release()

    def _build_shard(self, plan: IndexedShardPlan, listing: LocalListing) -> PreparedShard | None:
        """Build one shard from the member files on disk, each read once. A member hashed
        before (to compare with the server's copy) that no longer has that md5 is left out and
        reported (as a loose upload does); the others get the md5 of the bytes packed."""
        if self.stop.is_set():
            return None
        paths = [listing.paths[i] for i in plan.positions]
        packed = array("q")  # the positions of the members, in the shard's order

        def members() -> Iterator[tuple[str, int | None, bytes]]:
            hint = _read_size_hint(plan)
            sizes = [listing.size(i) if listing.is_hashed(i) else hint for i in plan.positions]
            read = self._reader.read(paths, sizes, self.shard_limit)
            for i, path, slot, data in zip(plan.positions, paths, plan.slots, read, strict=True):
                if data is None:
                    self._report_changed(path, "deleted")
                    continue
                if isinstance(data, TooBig):
                    with self._changed_lock:
                        self._unpacked.append(i)
                    continue
                if listing.is_hashed(i) and (
                    (len(data), hashlib.md5(data).digest()) != listing.record(i)
                ):
                    self._report_changed(path, "content differs from its hash")
                    continue
                packed.append(i)
                yield path, slot, data

        cps = plan.layout.chunks_per_shard
        if _size_bound(plan) <= SHARD_IN_MEMORY or self.scratch is None:
            sink = io.BytesIO()
            built = build_shard(cps, members(), sink)
            shard = PreparedShard(plan.name, built.size, built.md5, built.members, sink.getvalue())
        else:
            target = self.scratch / f"{hashlib.sha1(plan.name.encode()).hexdigest()}.shard"
            with target.open("wb") as file:
                built = build_shard(cps, members(), file)
            shard = PreparedShard(plan.name, built.size, built.md5, built.members, file=target)
        listing.set_hashed_many(
            (i, member.length, member.md5)
            for i, member in zip(packed, built.members, strict=True)
            if not listing.is_hashed(i)
        )
        shard.chunks_per_shard = tuple(cps)
        if self.shard_limit is not None and shard.size > self.shard_limit:
            # Members each under the limit, together over it: loose, each in one PUT.
            with self._changed_lock:
                self._unpacked.extend(packed)
            shard.discard()
            return None
        if not shard.members:
            shard.discard()
            return None
        if self.after_build is not None:
            self.after_build(shard)
        return shard

    def take_unpacked(self) -> list[int]:
        """The positions of the chunk files left out of their shards for their size (once
        every shard is built), in listing order; to be sent loose."""
        with self._changed_lock:
            taken, self._unpacked = sorted(self._unpacked), []
        return taken

    def _report_changed(self, path: str, why: str) -> None:
        with self._changed_lock:
            self.result.changed_files.append(path)
        self.progress.message(f"{path} changed on disk after it was hashed ({why}); not sent")
