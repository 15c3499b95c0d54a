"""The pack path of an upload (docs/sharded.md): chunk files go into shards, not one PUT each.

The chunk files of the arrays (found from the local ``.zarray`` / ``zarr.json``) are held back
while hashing; once hashing is done they are planned into shards (``sharding.packing``), each
shard is built locally (member files read again and checked against their md5), and the shards
go in *pack batches* (start, parallel PUTs, complete, then the server's worker checks every
member's md5 and applies the batch). Metadata and files off the chunk grids go first, in the
ordinary batches of ``dandizarr.client.upload``.

``PackUploader`` is the ``Uploader``'s collaborator for this: the Uploader's producer thread
asks it which files are chunks and has it build and queue the pack batches; the Uploader's main
thread hands each pack batch back to it to send. It shares the Uploader's client, options,
progress, result and open-batch bookkeeping (one batch open per archive, whichever kind).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from dandizarr.client.errors import ClientError, NotFound, TransientError
from dandizarr.client.upload import (
    MAX_BATCH_RESTARTS,
    LocalFile,
    PutOutcome,
    PutStatus,
    Uploader,
    _refused,
)

# Members per pack batch when the service does not say (older services have no pack batches).
DEFAULT_PACK_MEMBER_LIMIT = 100_000
# Pack batches built ahead of the one being uploaded (each up to ``max_batch_bytes``).
PACK_BATCHES_AHEAD = 1
# Shards up to this size are built in memory, larger ones in a temporary directory (so at most
# two pack batches' worth of temporary disk, and little memory, is used).
SHARD_IN_MEMORY = 1 << 20


@dataclass
class PreparedShard:
    """A shard built locally: in memory (``data``) or in a temporary file (``file``)."""

    name: str
    size: int
    md5: str
    members: tuple[Any, ...]  # sharding.packing.MemberRecord
    entries: tuple[LocalFile, ...]  # the member files, as hashed
    data: bytes | None = None
    file: Path | None = None
    chunks_per_shard: tuple[int, ...] | None = None  # the shape of the shard's index

    @property
    def member_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.file is not None
        return self.file.read_bytes()

    def write(self, data: bytes) -> None:
        """Replace the shard's bytes (tests use it to corrupt a member); md5 and size follow."""
        if self.file is not None and self.data is None:
            self.file.write_bytes(data)
        else:
            self.data = bytes(data)
        self.size = len(data)
        self.md5 = hashlib.md5(data).hexdigest()

    def body(self) -> Any:
        if self.data is not None:
            return self.data
        assert self.file is not None
        return self.file.open("rb")

    def discard(self) -> None:
        self.data = None
        if self.file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()

    def request_json(self) -> dict[str, Any]:
        declared: dict[str, Any] = {"name": self.name, "etag": self.md5, "size": self.size}
        if self.chunks_per_shard is not None:
            declared["chunks_per_shard"] = list(self.chunks_per_shard)
        return {
            **declared,
            "members": [
                {
                    "path": m.path,
                    "md5": m.md5,
                    "size": m.length,
                    "offset": m.offset,
                    "slot": m.slot,
                }
                for m in self.members
            ],
        }


@dataclass
class PackBatch:
    """Shards to send in one pack batch, built by the producer thread."""

    shards: list[PreparedShard]

    @property
    def member_count(self) -> int:
        return sum(len(s.members) for s in self.shards)

    def discard(self) -> None:
        for shard in self.shards:
            shard.discard()


def fit_chunks_per_shard(chunks_per_shard: Sequence[int], limit: int) -> tuple[int, ...]:
    """Shrink a shard shape (first dimensions first: shards grow from the last) until a shard
    has at most ``limit`` slots, so one shard always fits in a pack batch."""
    cps = [int(n) for n in chunks_per_shard]
    while len(cps) and math.prod(cps) > max(1, limit):
        d = next(i for i, n in enumerate(cps) if n > 1)
        cps[d] = max(1, min(cps[d] // 2, cps[d] - 1))
    return tuple(cps)


def _named(item: Any) -> str:
    """A shard named in a 400 of complete: a name, or ``{"name"|"path", ...}``."""
    if isinstance(item, dict):
        return str(item.get("name") or item.get("path") or item)
    return str(item)


class PackUploader:
    """The pack path of one ``Uploader``'s run.

    Producer thread: ``plan_layouts`` (before it starts), ``chunk_test``, ``plan_shards`` and
    ``produce``; main thread: ``upload_batch`` for each ``PackBatch`` taken from the queue;
    ``cleanup`` at the end.
    """

    def __init__(self, uploader: Uploader) -> None:
        self.uploader = uploader
        # The shard layouts of the local arrays, and bounded look-ahead for builds.
        self.layouts: list[Any] = []
        self.scratch: Path | None = None  # where shards above SHARD_IN_MEMORY are built
        self._slots = threading.Semaphore(PACK_BATCHES_AHEAD + 1)

    def cleanup(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # --- planning ----------------------------------------------------------------------------

    def plan_layouts(self, paths: Sequence[str], info: Any) -> None:
        """The shard layout of every array found in the local metadata files."""
        from sharding.packing import (
            METADATA_NAMES,
            PackingError,
            ShardLayout,
            default_chunks_per_shard,
            find_grids,
        )

        up = self.uploader
        member_limit: int = info.pack_member_limit or DEFAULT_PACK_MEMBER_LIMIT
        metadata = {}
        for path in paths:
            if path.rpartition("/")[2] in METADATA_NAMES:
                try:
                    metadata[path] = (up.root / path).read_bytes()
                except OSError as error:
                    raise ClientError(f"cannot read {path}: {error}") from error
        try:
            grids = find_grids(metadata)
        except PackingError as error:
            raise ClientError(f"cannot pack: {error}") from None
        layouts = []
        for grid in grids:
            cps = (
                default_chunks_per_shard(grid, up.options.shard_target_bytes)
                if up.options.shard_target_bytes
                else default_chunks_per_shard(grid)
            )
            layouts.append(ShardLayout(grid, fit_chunks_per_shard(cps, member_limit)))
        if not layouts:
            up.progress.message("no zarr arrays found: every file is uploaded loose")
        else:
            self.scratch = Path(tempfile.mkdtemp(prefix="dandizarr-shards-"))
        self.layouts = layouts

    def chunk_test(self) -> Callable[[str], bool]:
        """Whether a path is a chunk file of one of the arrays (so it goes into a shard)."""
        by_dir: dict[str, list[Any]] = {}
        for layout in self.layouts:
            by_dir.setdefault(layout.grid.array_path, []).append(layout)
        if not by_dir:
            return lambda path: False

        def is_chunk(path: str) -> bool:
            parts = path.split("/")
            for i in range(len(parts)):
                for layout in by_dir.get("/".join(parts[:i]), ()):
                    if layout.grid.chunk_coords(path) is not None:
                        return True
            return False

        return is_chunk

    def plan_shards(self, paths: Iterable[str]) -> tuple[list[Any], list[str]]:
        """The shards these chunk files go into, and the files that fit no shard (loose)."""
        from sharding.packing import plan_shards

        return plan_shards(self.layouts, paths)

    # --- building (producer thread) ----------------------------------------------------------

    def produce(
        self,
        plans: Sequence[Any],
        by_path: dict[str, LocalFile],
        info: Any,
        put: Callable[[Any], bool],
    ) -> bool:
        """Build the shards, batch by batch (bounded look-ahead), and queue the batches."""
        up = self.uploader
        shard_limit: int = info.batch_limit
        member_limit: int = info.pack_member_limit or DEFAULT_PACK_MEMBER_LIMIT
        groups: list[list[Any]] = []
        members = nbytes = 0
        for plan in plans:
            size = sum(by_path[m.path].size for m in plan.members)
            size += 16 * plan.layout.slots() + 4
            if groups and (
                len(groups[-1]) < shard_limit
                and members + len(plan.members) <= member_limit
                and nbytes + size <= up.options.max_batch_bytes
            ):
                groups[-1].append(plan)
                members += len(plan.members)
                nbytes += size
            else:
                groups.append([plan])
                members, nbytes = len(plan.members), size
        workers = max(1, min(up.client.jobs, os.cpu_count() or 1, 16))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dandizarr-pack") as pool:
            for group in groups:
                while not self._slots.acquire(timeout=0.2):
                    if up._stop.is_set():
                        return False
                if up._stop.is_set():
                    return False
                built = [
                    shard
                    for shard in pool.map(lambda plan: self._build_shard(plan, by_path), group)
                    if shard is not None
                ]
                if not built:
                    self._slots.release()
                    continue
                if not put(PackBatch(built)):
                    for shard in built:
                        shard.discard()
                    return False
        return True

    def _build_shard(self, plan: Any, by_path: dict[str, LocalFile]) -> PreparedShard | None:
        """Build one shard from the member files on disk; a file that no longer has the md5 it
        was hashed with is left out and reported (as a loose upload does)."""
        from sharding.packing import build_shard

        up = self.uploader
        if up._stop.is_set():
            return None
        entries = [by_path[m.path] for m in plan.members]
        slots = {m.path: m.slot for m in plan.members}
        included: list[LocalFile] = []

        def members() -> Iterator[tuple[str, int | None, bytes]]:
            for entry in entries:
                try:
                    data = (up.root / entry.path).read_bytes()
                except FileNotFoundError:
                    self._report_changed(entry, "deleted")
                    continue
                if len(data) != entry.size or hashlib.md5(data).hexdigest() != entry.md5:
                    self._report_changed(entry, "content differs from its hash")
                    continue
                included.append(entry)
                yield entry.path, slots[entry.path], data

        estimate = sum(e.size for e in entries) + 16 * plan.layout.slots() + 4
        cps = plan.layout.chunks_per_shard
        if estimate <= SHARD_IN_MEMORY or self.scratch is None:
            sink = io.BytesIO()
            built = build_shard(cps, members(), sink)
            shard = PreparedShard(
                plan.name, built.size, built.md5, built.members, (), data=sink.getvalue()
            )
        else:
            target = self.scratch / f"{hashlib.sha1(plan.name.encode()).hexdigest()}.shard"
            with target.open("wb") as file:
                built = build_shard(cps, members(), file)
            shard = PreparedShard(plan.name, built.size, built.md5, built.members, (), file=target)
        shard.entries = tuple(included)
        shard.chunks_per_shard = tuple(cps)
        if not included:
            shard.discard()
            return None
        if up.after_build is not None:
            up.after_build(shard)
        return shard

    def _report_changed(self, entry: LocalFile, why: str) -> None:
        up = self.uploader
        with up._counter_lock:
            up.result.changed_files.append(entry.path)
        up.progress.message(f"{entry.path} changed on disk after it was hashed ({why}); not sent")

    # --- sending (main thread) ---------------------------------------------------------------

    def upload_batch(self, batch: PackBatch, pool: ThreadPoolExecutor) -> None:
        """Send one pack batch and wait until the server applied it; its shards are discarded
        and its look-ahead slot freed however that ends."""
        try:
            self._upload_batch(batch, pool)
        finally:
            batch.discard()
            self._slots.release()

    def _upload_batch(self, batch: PackBatch, pool: ThreadPoolExecutor) -> None:
        up = self.uploader
        shards = batch.shards
        restarts = 0
        while True:
            started = time.perf_counter()
            batch_id, urls = self._start(shards)
            up.result.add_time("start", started)
            started = time.perf_counter()
            outcomes = list(pool.map(self._put_shard, shards, urls))
            up.result.add_time("put", started)
            expired = [o for o in outcomes if o.status is PutStatus.EXPIRED]
            failed = [o for o in outcomes if o.status is PutStatus.FAILED]
            if failed:
                first = failed[0]
                more = f" (and {len(failed) - 1} more shards)" if len(failed) > 1 else ""
                raise ClientError(f"uploading shard {first.entry.name} failed: {first.error}{more}")
            if expired:
                up._cancel()
                for outcome in outcomes:
                    if outcome.status is PutStatus.OK:
                        shard = outcome.entry
                        up.progress.advance(-len(shard.entries), -shard.member_bytes)
                restarts += 1
                up.result.batch_restarts += 1
                if restarts > MAX_BATCH_RESTARTS:
                    raise ClientError(
                        f"storage kept refusing the upload URLs of shard {expired[0].entry.name} "
                        f"and {len(expired) - 1} more: {expired[0].error}"
                    )
                up.progress.message(
                    f"{len(expired)} upload URLs were refused ({expired[0].error}); "
                    "starting the pack batch again with fresh ones"
                )
                continue
            started = time.perf_counter()
            batch_id = self._complete(shards, urls, batch_id)
            up.result.add_time("complete", started)
            started = time.perf_counter()
            state = up.client.wait_for_batch(
                up.zarr_id,
                batch_id,
                timeout=up.options.checksum_timeout,
                progress=up.progress,
            )
            up.result.add_time("apply", started)
            if state.get("state") != "applied":
                error = state.get("error") or f"the batch is {state.get('state')}"
                raise ClientError(
                    f"the server refused pack batch {batch_id} of zarr archive {up.zarr_id}: "
                    f"{error}"
                )
            files = sum(len(s.entries) for s in shards)
            nbytes = sum(s.member_bytes for s in shards)
            up.result.batches += 1
            up.result.pack_batches += 1
            up.result.shards += len(shards)
            up.result.uploaded_files += files
            up.result.uploaded_bytes += nbytes
            up.result.packed_files += files
            up.result.packed_bytes += nbytes
            return

    def _start(self, shards: Sequence[PreparedShard]) -> tuple[int, list[str]]:
        up = self.uploader
        body = [s.request_json() for s in shards]
        return up._open_batch(
            lambda: up.client.start_pack_batch(up.zarr_id, body),
            files=sum(len(s.members) for s in shards),
            paths=[m.path for s in shards for m in s.members],
            kind="pack batch",
        )

    def _complete(self, shards: Sequence[PreparedShard], urls: Sequence[str], batch_id: int) -> int:
        """Complete the pack batch (PUT again what storage lost, once); its id."""
        up = self.uploader
        assert up.journal is not None
        for attempt in range(2):
            try:
                response = up.client.complete_batch(up.zarr_id)
            except NotFound:
                response = None  # completed by an earlier try whose answer was lost
            if response is None or response.status_code == 200:
                up._batch_closed()
                body = response.json() if response is not None and response.content else {}
                answered = body.get("batch") if isinstance(body, dict) else None
                return answered if isinstance(answered, int) else batch_id
            body = response.json() if response.content else {}
            missing = {_named(m) for m in body.get("missing", [])}
            missing.update(_named(m) for m in body.get("mismatched", []))
            if attempt == 1 or not missing:
                raise ClientError(
                    f"the server did not accept the pack batch: {body.get('detail', body)}"
                    + (f" ({', '.join(sorted(missing)[:5])})" if missing else "")
                )
            again = [(s, u) for s, u in zip(shards, urls, strict=True) if s.name in missing]
            outcomes = [self._put_shard(s, u, count=False) for s, u in again]
            bad = [o for o in outcomes if o.status is not PutStatus.OK]
            if bad:
                raise ClientError(
                    f"uploading shard {bad[0].entry.name} again failed: {bad[0].error}"
                )
        raise AssertionError("unreachable")

    def _put_shard(self, shard: PreparedShard, url: str, *, count: bool = True) -> PutOutcome:
        up = self.uploader
        if up._abort.is_set():
            return PutOutcome(shard, PutStatus.ABORTED)
        opened: list[Any] = []

        def body_factory() -> Any:
            body = shard.body()
            if not isinstance(body, bytes):
                opened.append(body)
            return body

        try:
            response = up._send_put(url, shard.md5, body_factory)
        except (TransientError, requests.RequestException, OSError) as error:
            return PutOutcome(shard, PutStatus.FAILED, str(error))
        finally:
            for file in opened:
                file.close()
        if response.ok:
            if count:
                up.progress.advance(len(shard.entries), shard.member_bytes)
            return PutOutcome(shard, PutStatus.OK)
        return _refused(shard, response)
