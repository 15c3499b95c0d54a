"""What a person waits for: a page of a 100,000-file directory (cold and cached) and a small API
call, against ``dandizarr serve`` (gunicorn, SQLite, local storage) as a process.

The directory's ``.checksum`` listing is written straight to the server's storage directory,
as an upload would leave it, so no 100,000 PUTs are needed to set it up.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import requests

from bench.s3_env import archive_created, timed_get
from dandizarr.checksums import DirectoryEntry, DirectoryListing, FileEntry, encode_checksum_file
from dandizarr_server.zarr_api.domain.keys import checksum_key
from tests.support.processes import serve_process

FILES = 100_000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "var") as (url, token):
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        zarr_id = archive_created(session, url, "big.zarr")
        listing = DirectoryListing()
        for i in range(FILES):
            listing.set_file(FileEntry(f"{i:06d}", "0" * 32, i))
        digest, _, size = listing.summary()
        root = DirectoryListing()
        root.set_directory(DirectoryEntry("big", digest, size))
        storage = Path(tmp) / "var" / "storage"
        for directory, content in {"": root, "big": listing}.items():
            path = storage / checksum_key(zarr_id, directory)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_checksum_file(content))
        page = f"{url}/archives/{zarr_id}/tree/big"
        cold = timed_get(session, page)
        cached = [timed_get(session, f"{page}?page={p}") for p in (2, 250, 500)]
        api = [timed_get(requests.Session(), f"{url}/api/info/") for _ in range(50)]
        print(f"{FILES:,}-file directory page: first open {cold * 1000:.0f} ms, cached pages")
        print(f"  {', '.join(f'{t * 1000:.0f}' for t in cached)} ms")
        print(
            f"GET /api/info/ (new connection each): median {statistics.median(api) * 1000:.1f} ms"
        )
