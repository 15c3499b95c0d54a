"""A 100-file change to a 1,000,000-file archive, and to a 1,000-file one: what the service
spends from batch start to checksum applied (issue #40, docs/partial-work.md).

Against ``dandizarr serve`` (gunicorn, SQLite, local storage, tasks inline) as a process. Each
archive is one Zarr v2 array ``s0`` of chunk rows of 100 files (``s0/0/{z}/{y}/{x}``): 100 x
100 rows for the big one, 1 x 10 for the small one. Its ``.checksum`` listings are written
straight to the server's storage directory as an upload would leave them, and the archive's
row is given the tree's checksum, count and size, so no million PUTs are needed (the chunk
files themselves are not written: nothing in a batch of other files reads them).

Two changes of 100 files each, through the REST batch flow as any client sends it (``POST
upload/``, a PUT per file with its ``Content-MD5``, ``POST upload/complete/``, then polling
the archive until ``checksum_status`` is ``complete``): one chunk row rewritten (a shard of
a big array: 100 files replaced in one directory) and a new resolution level (100 files in
new directories). Printed per change: the wall time from batch start to checksum applied, the
service's CPU seconds for it, and the final checksum checked against the tree computed here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import requests

from bench.s3_env import archive_created, cpu_seconds, local_service
from dandizarr.checksums import (
    DirectoryEntry,
    DirectoryListing,
    FileEntry,
    compute_tree,
    encode_checksum_file,
)
from dandizarr_server.zarr_api.domain.keys import checksum_key

ROW = 100  # chunk files per row (one leaf directory)
CHUNK_BYTES = 4096
CHANGE = 100
TRIALS = 3


def _chunk_md5(z: int, y: int, x: int) -> str:
    return hashlib.md5(f"{z}/{y}/{x}".encode()).hexdigest()


def build(storage: Path, zarr_id: str, grid_z: int, grid_y: int) -> tuple[str, int, int]:
    """Listings of ``s0/0/{z}/{y}/{x}`` (``grid_z`` x ``grid_y`` rows of ``ROW`` files) and of
    the metadata documents; the tree's (checksum, file count, size)."""
    listings: dict[str, DirectoryListing] = {}
    channel = DirectoryListing()
    for z in range(grid_z):
        plane = DirectoryListing()
        for y in range(grid_y):
            row = DirectoryListing()
            for x in range(ROW):
                row.set_file(FileEntry(str(x), _chunk_md5(z, y, x), CHUNK_BYTES))
            listings[f"s0/0/{z}/{y}"] = row
            digest, _, size = row.summary()
            plane.set_directory(DirectoryEntry(str(y), digest, size))
        listings[f"s0/0/{z}"] = plane
        digest, _, size = plane.summary()
        channel.set_directory(DirectoryEntry(str(z), digest, size))
    listings["s0/0"] = channel
    level = DirectoryListing()
    digest, _, size = channel.summary()
    level.set_directory(DirectoryEntry("0", digest, size))
    zarray = json.dumps({"zarr_format": 2, "shape": [1, grid_z, grid_y * 32, ROW * 32]}).encode()
    level.set_file(FileEntry(".zarray", hashlib.md5(zarray).hexdigest(), len(zarray)))
    listings["s0"] = level
    root = DirectoryListing()
    digest, _, size = level.summary()
    root.set_directory(DirectoryEntry("s0", digest, size))
    listings[""] = root
    for directory, listing in listings.items():
        path = storage / checksum_key(zarr_id, directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_checksum_file(listing))
    digest, count, size = root.summary()
    return digest, count, size


def _row_set(database: Path, zarr_id: str, checksum: str, count: int, size: int) -> None:
    """The archive's row as an upload of the tree would have left it."""
    with sqlite3.connect(database, timeout=30) as db:
        db.execute(
            "UPDATE zarr_api_zarrarchive SET checksum = ?, file_count = ?, size = ? "
            "WHERE zarr_id = ?",
            (checksum, count, size, zarr_id.replace("-", "")),
        )
        assert db.total_changes == 1, "the archive's row was not found"


PHASES = ("start", "PUTs", "complete -> applied", "total", "service CPU-s")


def _change(
    session: requests.Session, url: str, pid: int, zarr_id: str, files: dict[str, bytes]
) -> tuple[dict[str, object], list[float]]:
    """One batch of ``files`` as a client sends it, until the checksum is applied: the archive
    then, and the seconds of each of PHASES."""
    api = f"{url}/api/zarr/{zarr_id}"
    declared = [{"path": p, "etag": hashlib.md5(b).hexdigest()} for p, b in files.items()]
    cpu_before, started = cpu_seconds([pid]), time.perf_counter()
    answer = session.post(f"{api}/upload/", json=declared, timeout=120)
    answer.raise_for_status()
    put_from = time.perf_counter()
    storage = requests.Session()
    for item in answer.json():
        body = files[item["path"]]
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        put = storage.put(item["upload_url"], data=body, headers={"Content-MD5": md5}, timeout=60)
        put.raise_for_status()
    complete_from = time.perf_counter()
    session.post(f"{api}/upload/complete/", timeout=120).raise_for_status()
    while True:
        archive: dict[str, object] = session.get(f"{api}/", timeout=60).json()
        if archive["checksum_status"] == "complete":
            break
        time.sleep(0.02)
    done = time.perf_counter()
    cpu = cpu_seconds([pid]) - cpu_before
    phases = [put_from - started, complete_from - put_from, done - complete_from, done - started]
    return archive, [*phases, cpu]


def _full_checksum(grid_z: int, grid_y: int, changed: dict[str, bytes]) -> str:
    """The tree's checksum computed from every file at once (``compute_tree``), not by the
    service's incremental update: the base files with ``changed`` applied."""
    zarray = json.dumps({"zarr_format": 2, "shape": [1, grid_z, grid_y * 32, ROW * 32]}).encode()
    entries = {"s0/.zarray": (len(zarray), hashlib.md5(zarray).hexdigest())}
    for z in range(grid_z):
        for y in range(grid_y):
            for x in range(ROW):
                entries[f"s0/0/{z}/{y}/{x}"] = (CHUNK_BYTES, _chunk_md5(z, y, x))
    for path, body in changed.items():
        entries[path] = (len(body), hashlib.md5(body).hexdigest())
    return compute_tree((p, *entries[p]) for p in sorted(entries)).digest


def _run(label: str, grid_z: int, grid_y: int) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_service(Path(tmp) / "var") as (
            url,
            token,
            pid,
        ),
    ):
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        zarr_id = archive_created(session, url, f"{label}.zarr")
        storage = Path(tmp) / "var" / "storage"
        clock = time.perf_counter()
        checksum, count, size = build(storage, zarr_id, grid_z, grid_y)
        _row_set(Path(tmp) / "var" / "db.sqlite3", zarr_id, checksum, count, size)
        print(f"{label}: built {count:,} files' listings in {time.perf_counter() - clock:.1f} s")
        archive = session.get(f"{url}/api/zarr/{zarr_id}/", timeout=60).json()
        assert archive["checksum"] == checksum and archive["file_count"] == count, archive

        rows, levels = [], []
        changed: dict[str, bytes] = {}
        for trial in range(TRIALS):
            # One row of chunks rewritten: 100 files replaced in one leaf directory.
            z, y = (trial * 7) % grid_z, (trial * 3) % grid_y
            rewritten = {f"s0/0/{z}/{y}/{x}": f"v{trial} {x}".encode() for x in range(ROW)}
            archive, figures = _change(session, url, pid, zarr_id, rewritten)
            assert archive["file_count"] == count, archive
            rows.append(figures)
            changed.update(rewritten)
            # A new resolution level: 100 new files in new directories (10 rows of 10).
            level = {f"s{trial + 1}/0/0/{r}/{x}": b"level" for r in range(10) for x in range(10)}
            count += CHANGE
            archive, figures = _change(session, url, pid, zarr_id, level)
            assert archive["file_count"] == count, archive
            levels.append(figures)
            changed.update(level)
        archive = session.get(f"{url}/api/zarr/{zarr_id}/", timeout=60).json()
        assert archive["checksum"] == _full_checksum(grid_z, grid_y, changed), archive
        print(f"{label}: final checksum {archive['checksum']} equals the full computation")

    def line(figures: list[list[float]]) -> str:
        medians = [statistics.median(f[i] for f in figures) for i in range(len(PHASES))]
        return ", ".join(f"{name} {value:.3f}" for name, value in zip(PHASES, medians, strict=True))

    print(f"{label}: {CHANGE}-file change, seconds from batch start (median of {TRIALS}):")
    print(f"  a chunk row rewritten: {line(rows)}")
    print(f"  a new level added:     {line(levels)}")
    return {
        "row": statistics.median(f[2] for f in rows),
        "level": statistics.median(f[2] for f in levels),
    }


def main() -> None:
    small = _run("1,000-file archive", 1, 10)
    big = _run("1,000,000-file archive", ROW, ROW)
    print(
        f"1M vs 1k files, complete -> applied: a row rewritten {big['row'] / small['row']:.2f}x, "
        f"a level added {big['level'] / small['level']:.2f}x the time"
    )
