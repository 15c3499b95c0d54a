"""The archive page and the OME summary (``/api/zarr/{id}/ome/``) of a 1,000,000-file
OME-Zarr archive, against ``dandizarr serve`` (gunicorn, SQLite, local storage) as a process.

The archive is an NGFF 0.4 image: level ``s0`` of 1 x 100 x 100 x 100 chunks (1,000,000 chunk
files in nested directories, ``/`` separator), levels ``s1`` and ``s2`` smaller. Its
``.checksum`` listings (10,000 leaf directories of 100 chunk files each, and their parents) and
its metadata documents are written straight to the server's storage directory, as an upload
would leave them, so no million PUTs are needed. The page and the summary read only the
listings of the directories they walk (the root and each array's directory) and the metadata
documents, never a listing of every file: both answer in milliseconds, the first time and
cached. Target: under a second each.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import requests

from bench.s3_env import archive_created, timed_get
from dandizarr.checksums import DirectoryEntry, DirectoryListing, FileEntry, encode_checksum_file
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr_server.zarr_api.domain.keys import checksum_key, file_key
from tests.support.processes import serve_process

GRID = 100  # chunks per dimension of s0's z, y and x: GRID**3 chunk files
CHUNK_BYTES = 4096


def _attrs() -> dict:
    datasets = [
        {
            "path": f"s{i}",
            "coordinateTransformations": [
                {"type": "scale", "scale": [1, 2.0 * 2**i, 0.5 * 2**i, 0.5 * 2**i]}
            ],
        }
        for i in range(3)
    ]
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"
    ]
    return {
        "multiscales": [{"version": "0.4", "name": "big", "axes": axes, "datasets": datasets}],
        "omero": {
            "channels": [
                {
                    "label": "signal",
                    "color": "00FF00",
                    "window": {"start": 0, "end": 1000, "min": 0, "max": 4095},
                }
            ]
        },
    }


def _zarray(grid: int) -> bytes:
    return json.dumps(
        {
            "zarr_format": 2, "shape": [1, grid * 16, grid * 32, grid * 32],
            "chunks": [1, 16, 32, 32], "dtype": "<u2", "compressor": None,
            "fill_value": 0, "filters": None, "order": "C", "dimension_separator": "/",
        }
    ).encode()  # fmt: skip


def build(storage: Path, zarr_id: str) -> int:
    """The archive's listings and metadata in the local storage directory; its file count."""
    store = LocalObjectStore(storage, public_url="http://unused", secret_key="unused")
    listings: dict[str, DirectoryListing] = {}
    documents = {".zgroup": b'{"zarr_format": 2}', ".zattrs": json.dumps(_attrs()).encode()}
    files = 0
    for level, grid in (("s0", GRID), ("s1", GRID // 2), ("s2", GRID // 4)):
        documents[f"{level}/.zarray"] = _zarray(grid)
        level_listing = DirectoryListing()
        channel = DirectoryListing()
        for z in range(grid):
            z_listing = DirectoryListing()
            for y in range(grid):
                row = DirectoryListing()
                for x in range(grid):
                    row.set_file(FileEntry(str(x), "0" * 32, CHUNK_BYTES))
                files += grid
                digest, _, size = row.summary()
                listings[f"{level}/0/{z}/{y}"] = row
                z_listing.set_directory(DirectoryEntry(str(y), digest, size))
            listings[f"{level}/0/{z}"] = z_listing
            digest, _, size = z_listing.summary()
            channel.set_directory(DirectoryEntry(str(z), digest, size))
        listings[f"{level}/0"] = channel
        digest, _, size = channel.summary()
        level_listing.set_directory(DirectoryEntry("0", digest, size))
        listings[level] = level_listing
    root = DirectoryListing()
    for name, body in documents.items():
        store.put(file_key(zarr_id, name), body)
        directory, _, base = name.rpartition("/")
        entry = FileEntry(base, hashlib.md5(body).hexdigest(), len(body))
        (listings[directory] if directory else root).set_file(entry)
        files += 1
    for level in ("s0", "s1", "s2"):
        digest, _, size = listings[level].summary()
        root.set_directory(DirectoryEntry(level, digest, size))
    listings[""] = root
    for directory, listing in listings.items():
        path = storage / checksum_key(zarr_id, directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_checksum_file(listing))
    return files


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "var") as (url, token):
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        zarr_id = archive_created(session, url, "big.ome.zarr")
        started = time.perf_counter()
        files = build(Path(tmp) / "var" / "storage", zarr_id)
        print(f"built {files:,} files' listings in {time.perf_counter() - started:.1f} s")
        page, summary = f"{url}/archives/{zarr_id}/", f"{url}/api/zarr/{zarr_id}/ome/"
        first_summary = timed_get(session, summary)  # the scan, description and validation
        first_page = timed_get(session, page)
        html = session.get(page, timeout=60).text
        assert "OME-Zarr images" in html and "Open in Neuroglancer" in html
        data = session.get(summary, timeout=60).json()
        assert data["images"][0]["levels"][0]["shape"] == [1, GRID * 16, GRID * 32, GRID * 32]
        assert data["validation"][0]["valid"], data["validation"]
        pages = [timed_get(session, page) for _ in range(5)]
        summaries = [timed_get(session, summary) for _ in range(5)]
        print(f"{files:,}-file OME-Zarr archive:")
        print(
            f"  OME summary: first {first_summary * 1000:.0f} ms, "
            f"then median {statistics.median(summaries) * 1000:.0f} ms"
        )
        print(
            f"  archive page: first {first_page * 1000:.0f} ms, "
            f"then median {statistics.median(pages) * 1000:.0f} ms (target < 1000 ms)"
        )
